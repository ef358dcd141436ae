// `rest index build|append|compact|verify|inspect|query`: the datastore's front end.
#include "commands.h"
#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/index-builder.h"
#include "rest/llama-model.h"
#include "rest/types.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Human-readable counts: 1234567 -> "1.23M".
std::string si(double v) {
    const char * units[] = {"", "k", "M", "G", "T"};
    int          u       = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f%s" : "%.2f%s", v, units[u]);
    return buf;
}

// One display line for a token string: control characters escaped, so output stays one line per item.
std::string escape(const std::string & s) {
    std::string out;
    for (unsigned char c : s) {
        switch (c) {
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            case '"':  out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            default:
                if (c < 0x20 || c == 0x7F) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\x%02x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    return out;
}

// An index given through a symlink is written (and locked) at the link's target: renaming the new file over the
// link itself replaced the link with a file and left the target, which other links still name, as it was.
std::string write_target(const std::string & path) {
    // Link by link (a link to a file a build has yet to write has no canonical path), at most 40 as the kernel.
    namespace fs = std::filesystem;
    fs::path        p = path;
    std::error_code ec;
    for (int hops = 0; fs::is_symlink(p, ec); ++hops) {
        const fs::path target = fs::read_symlink(p, ec);
        if (ec || hops == 40) throw rest::user_error("cannot resolve the symlink '" + path + "'");
        p = target.is_absolute() ? target : p.parent_path() / target;
    }
    return p.string();
}

// Takes the index's writers' lock (rest::index_write_lock, not waiting) for the rest of the command, then removes
// the temp files of writers killed mid-write: with the lock held, no other writer of this index runs.
std::unique_ptr<rest::index_write_lock> lock_index(const std::string & path) {
    auto lock = std::make_unique<rest::index_write_lock>(path, rest::index_write_lock::wait::no);
    if (const std::size_t n = rest::remove_stale_temps(path)) {
        std::fprintf(stderr, "rest: removed %zu temp file(s) of '%s' left by a writer that stopped mid-write\n", n,
                     path.c_str());
    }
    return lock;
}

// The temp file of the build in progress, removed if the build is interrupted (the builder removes it on errors).
char g_temp_path[4096] = {};

void remove_temp() {
    if (g_temp_path[0]) {
        ::unlink(g_temp_path);  // async-signal-safe
    }
}

extern "C" void on_interrupt(int sig) {
    remove_temp();
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

// While it lives, SIGINT/SIGTERM, and llama.cpp stopping the process (a tokenizer's failed check), remove the temp
// file a build, append or compact of `path` writes.
struct temp_file_on_interrupt {
    explicit temp_file_on_interrupt(const std::string & path) {
        std::snprintf(g_temp_path, sizeof(g_temp_path), "%s", rest::datastore_temp_path(path).c_str());
        std::signal(SIGINT, on_interrupt);
        std::signal(SIGTERM, on_interrupt);
        rest::set_llama_stop_cleanup(remove_temp);
    }
    ~temp_file_on_interrupt() {
        g_temp_path[0] = '\0';
        rest::set_llama_stop_cleanup(nullptr);
    }
};

// Redraws one status line on a terminal at most ten times a second. The suffix sort reports nothing while it runs,
// so a ticker thread redraws the last state with the phase's elapsed time.
class progress_line {
  public:
    explicit progress_line(bool enabled) : enabled_(enabled), t0_(clock_type::now()) {
        if (enabled_) {
            ticker_ = std::thread([this] {
                std::unique_lock<std::mutex> lock(mutex_);
                while (!stop_) {
                    if (cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stop_; })) {
                        break;
                    }
                    if (have_ && last_.phase == rest::build_phase::sort) {
                        draw(last_);
                    }
                }
            });
        }
    }

    ~progress_line() {
        if (ticker_.joinable()) {
            {
                std::lock_guard<std::mutex> lock(mutex_);
                stop_ = true;
            }
            cv_.notify_all();
            ticker_.join();
        }
    }

    void update(const rest::build_progress & p) {
        if (!enabled_) {
            return;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        const auto now = clock_type::now();
        if (!have_ || p.phase != last_.phase) {
            t_phase_ = now;
        } else if (now - t_draw_ < std::chrono::milliseconds(100)) {
            last_ = p;
            return;
        }
        last_ = p;
        have_ = true;
        draw(p);
    }

    void clear() {
        std::lock_guard<std::mutex> lock(mutex_);
        if (enabled_ && shown_) {
            std::fprintf(stderr, "\r\033[K");
            std::fflush(stderr);
        }
        have_ = false;
    }

  private:
    // Caller holds mutex_.
    void draw(const rest::build_progress & p) {
        const double t     = seconds_since(t0_);
        const double t_ph  = seconds_since(t_phase_);
        char         line[256];
        switch (p.phase) {
            case rest::build_phase::tokenize:
                if (p.total > 0) {
                    std::snprintf(line, sizeof(line), "tokenize %s %3.0f%% %sB/%sB  %s tokens  %s tok/s",
                                  bar(double(p.done) / double(p.total)).c_str(), 100.0 * p.done / p.total,
                                  si(p.done).c_str(), si(p.total).c_str(), si(p.n_tokens).c_str(),
                                  si(p.n_tokens / std::max(t, 1e-3)).c_str());
                } else {
                    std::snprintf(line, sizeof(line), "tokenize %sB  %s tokens  %s tok/s", si(p.done).c_str(),
                                  si(p.n_tokens).c_str(), si(p.n_tokens / std::max(t, 1e-3)).c_str());
                }
                break;
            case rest::build_phase::sort:
                std::snprintf(line, sizeof(line), "sort     shard %zu, %s tokens so far ... %.0f s", p.shard,
                              si(p.n_tokens).c_str(), t_ph);
                break;
            case rest::build_phase::write:
                std::snprintf(line, sizeof(line), "write    %s %3.0f%% shard %zu",
                              bar(p.total ? double(p.done) / double(p.total) : 1.0).c_str(),
                              p.total ? 100.0 * p.done / p.total : 100.0, p.shard);
                break;
        }
        std::fprintf(stderr, "\r\033[K%s", line);
        std::fflush(stderr);
        shown_  = true;
        t_draw_ = clock_type::now();
    }

    static std::string bar(double f) {
        const int   width = 24;
        const int   full  = static_cast<int>(std::clamp(f, 0.0, 1.0) * width);
        std::string s     = "[";
        s.append(full, '#');
        s.append(width - full, '.');
        return s + "]";
    }

    bool                    enabled_;
    bool                    shown_ = false;
    bool                    have_  = false;
    bool                    stop_  = false;
    clock_type::time_point  t0_;
    clock_type::time_point  t_phase_{};
    clock_type::time_point  t_draw_{};
    rest::build_progress    last_;
    std::mutex              mutex_;
    std::condition_variable cv_;
    std::thread             ticker_;
};

struct build_args {
    std::string              model;
    std::string              output;
    std::string              format = "text";
    std::vector<std::string> fields;
    std::vector<std::string> include;
    std::vector<std::string> inputs;
    bool                     split_paragraphs = false;
    int                      n_threads        = 0;
    std::uint64_t            shard_tokens     = 0;
    bool                     append           = false;  // output exists: add the inputs as new shards
};

void run_build(const build_args & a) {
#if defined(__GLIBC__)
    // Tokenizer threads allocate and free multi-MB token vectors. With glibc's default, freeing one raises the
    // mmap threshold, later ones come from thread arenas, and arenas keep their free tops (malloc_trim does not trim
    // them): tens of MB held through the suffix sort, the build's peak. A fixed threshold returns them at once.
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
    rest::llama_log_quiet();
    const auto tok = rest::load_tokenizer(a.model);

    rest::corpus_build_params p;
    p.corpus.format = a.format == "jsonl" ? rest::corpus_format::jsonl
                    : a.format == "chat"  ? rest::corpus_format::chat
                                          : rest::corpus_format::text;
    if (!a.fields.empty()) {
        p.corpus.fields = a.fields;
    }
    p.corpus.include          = a.include;
    p.corpus.split_paragraphs = a.split_paragraphs;
    p.n_threads = a.n_threads > 0 ? a.n_threads : std::max(1u, std::thread::hardware_concurrency());
    p.index.n_shard_tokens_max = a.shard_tokens;
    std::uint64_t base_docs = 0, base_tokens = 0;
    if (std::filesystem::is_directory(a.output)) {
        throw rest::user_error("the output '" + a.output + "' is a directory");
    }
    const auto locked = lock_index(a.output);  // first, so that an append's counts are of the file it extends
    if (a.append) {
        // A one-line error for a missing or bad index; the builder reads the base once.
        const auto base = rest::datastore::open(a.output, 0, "", rest::datastore::access::one_pass);
        base_docs       = base->info().n_documents;
        base_tokens     = base->info().n_tokens;
        p.index.base    = a.output;
    }

    const bool    tty = ::isatty(STDERR_FILENO) != 0;
    progress_line progress(tty);
    p.index.on_progress = [&](const rest::build_progress & bp) { progress.update(bp); };

    std::size_t n_warnings = 0;
    auto        warn       = [&](const std::string & w) {
        if (++n_warnings <= 10) {
            progress.clear();
            std::fprintf(stderr, "rest: warning: %s\n", w.c_str());
        }
    };

    const auto t0 = clock_type::now();
    rest::corpus_build_summary s;
    try {
        temp_file_on_interrupt guard(a.output);
        s = rest::build_datastore(a.output, a.inputs, *tok, p, warn);
    } catch (...) {
        progress.clear();
        throw;
    }
    progress.clear();
    if (n_warnings > 10) {
        std::fprintf(stderr, "rest: warning: %zu more warnings not shown\n", n_warnings - 10);
    }
    const auto & i = s.info;
    std::printf("%s %llu documents, %llu tokens from %llu files (%llu skipped), %s bytes of text\n",
                a.append ? "appended" : "indexed", (unsigned long long) (i.n_documents - base_docs),
                (unsigned long long) (i.n_tokens - base_tokens), (unsigned long long) s.n_files,
                (unsigned long long) s.n_files_skipped, si(double(s.n_bytes)).c_str());
    std::printf("wrote %s: %s, u%d tokens, %zu shard(s), %llu bytes (%.2f bytes/token)\n", a.output.c_str(),
                i.tokenizer_description.c_str(), 8 * i.token_width, i.n_shards, (unsigned long long) i.n_bytes,
                double(i.n_bytes) / double(i.n_tokens));
    // CPU time beside wall time: on a shared machine the wall figures alone mislead.
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    const double cpu = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    std::printf("time: %.1f s total (%.1f s CPU), tokenize %.1f s (%s tok/s, %d threads), sort %.1f s (%.1f s CPU), "
                "write %.1f s\n",
                seconds_since(t0), cpu, s.t_tokenize_s,
                si((i.n_tokens - base_tokens) / std::max(s.t_tokenize_s, 1e-3)).c_str(),  // the tokens tokenized
                p.n_threads, s.t_sort_s, s.t_sort_cpu_s, s.t_write_s);
}

void run_compact(const std::string & path, std::uint64_t shard_tokens) {
    const auto t0     = clock_type::now();
    const auto locked = lock_index(path);  // first, so that the counts are of the file compacted
    const auto before = rest::datastore::open(path, 0, "", rest::datastore::access::one_pass)->info();
    rest::index_builder_params p;
    p.n_shard_tokens_max = shard_tokens;
    const auto after = [&] {
        temp_file_on_interrupt guard(path);
        try {
            return rest::compact_datastore(path, p);
        } catch (const rest::user_error & e) {
            // What the builder finds wrong in the shards it reads names no file: this one.
            throw rest::user_error("cannot compact '" + path + "': " + e.what());
        }
    }();
    std::printf("compacted %s: %zu shard(s) -> %zu, %llu tokens, %llu -> %llu bytes in %.1f s\n", path.c_str(),
                before.n_shards, after.n_shards, (unsigned long long) after.n_tokens,
                (unsigned long long) before.n_bytes, (unsigned long long) after.n_bytes, seconds_since(t0));
}

void run_verify(const std::string & path) {
    const auto t0 = clock_type::now();
    const auto ds = rest::datastore::open(path, 0, "", rest::datastore::access::one_pass);
    ds->verify();
    const auto & i = ds->info();
    std::printf("%s: OK, %zu shard(s), %llu tokens, %llu bytes checked in %.2f s\n", path.c_str(), i.n_shards,
                (unsigned long long) i.n_tokens, (unsigned long long) i.n_bytes, seconds_since(t0));
}

void run_inspect(const std::string & path, bool as_json) {
    const auto   t0      = clock_type::now();
    const auto   ds      = rest::datastore::open(path, 0, "", rest::datastore::access::one_pass);
    const double t_open  = seconds_since(t0);
    const auto & i       = ds->info();
    const double per_tok = i.n_tokens ? double(i.n_bytes) / double(i.n_tokens) : 0.0;
    if (as_json) {
        nlohmann::json j = {
            {"path", path},
            {"format_version", i.format_version},
            {"tokenizer", i.tokenizer_description},
            {"tokenizer_fingerprint", i.tokenizer_fingerprint},
            {"token_width_bytes", i.token_width},
            {"documents", i.n_documents},
            {"tokens", i.n_tokens},
            {"shards", i.n_shards},
            {"bytes", i.n_bytes},
            {"bytes_per_token", per_tok},
            {"open_ms", t_open * 1e3},
        };
        nlohmann::json shards = nlohmann::json::array();
        for (const auto & s : ds->shards()) {
            shards.push_back(
                {{"text_tokens", s.n_tokens()}, {"suffixes", s.n_suffixes()}, {"bigram_table", s.has_bigram_table()},
                 {"sample_rows", s.n_sample_rows()}});
        }
        j["shard_sizes"] = shards;
        // Text from the file (a description) may hold invalid UTF-8: replaced, not thrown on.
        std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return;
    }
    std::printf("index:          %s\n", path.c_str());
    std::printf("format version: %u\n", i.format_version);
    std::printf("tokenizer:      %s (fingerprint 0x%016llx)\n", i.tokenizer_description.c_str(),
                (unsigned long long) i.tokenizer_fingerprint);
    std::printf("token width:    %d bytes (u%d)\n", i.token_width, 8 * i.token_width);
    std::printf("documents:      %llu\n", (unsigned long long) i.n_documents);
    std::printf("tokens:         %llu\n", (unsigned long long) i.n_tokens);
    std::printf("shards:         %zu\n", i.n_shards);
    // Opened for one pass, a shard has a table only if the file carries it (format 2; shards an append kept from a
    // format 1 base do not, and every process then builds theirs after open).
    const auto n_tables = std::count_if(ds->shards().begin(), ds->shards().end(),
                                        [](const rest::index_shard & s) { return s.has_bigram_table(); });
    if (static_cast<std::size_t>(n_tables) < i.n_shards) {
        std::printf("bigram tables:  %zu of %zu shards (`rest index compact` writes the others)\n",
                    static_cast<std::size_t>(n_tables), i.n_shards);
    }
    // Suffix samples (format 3): shards without them (kept by an append from an older base) search without.
    const auto n_sampled = std::count_if(ds->shards().begin(), ds->shards().end(),
                                         [](const rest::index_shard & s) { return s.n_sample_rows() > 0; });
    if (static_cast<std::size_t>(n_sampled) < i.n_shards) {
        std::printf("suffix samples: %zu of %zu shards (`rest index compact` writes the others)\n",
                    static_cast<std::size_t>(n_sampled), i.n_shards);
    }
    std::printf("bytes:          %llu (%.3f bytes/token)\n", (unsigned long long) i.n_bytes, per_tok);
    std::printf("opened in:      %.3f ms\n", t_open * 1e3);
}

struct query_args {
    std::string model;
    std::string index;
    std::string text;
    std::size_t top        = 10;
    std::size_t max_length = 64;
    std::size_t depth      = 16;
    int         tree       = 0;  // > 0: also show the drafter's best-first tree of this many nodes
};

// A corrupt index can hold ids past the vocabulary, which llama.cpp's vocabulary would throw on.
bool in_vocab(const rest::tokenizer & tok, rest::token_id t) { return t >= 0 && t < tok.n_vocab(); }

// The draft tree the drafter would verify after this text (datastore source only: no context, no history).
void print_draft_tree(const rest::datastore & ds, const rest::tokenizer & tok, std::span<const rest::token_id> ctx,
                      int n_nodes) {
    rest::drafter_params dp;
    dp.use_context = false;
    dp.use_history = false;
    dp.n_budget_max = std::max(dp.n_budget_max, n_nodes);
    rest::drafter     d(&ds, nullptr, dp);
    rest::draft_stats st;
    d.reset(ctx);
    const rest::draft_tree tree = d.draft(n_nodes, &st);
    std::printf("draft tree: %zu nodes, expected accepted %.2f, match %d tokens x %llu, %.1f us\n", tree.size(),
                tree.expected_accepted(tree.size()), st.match_len_datastore,
                (unsigned long long) st.match_count_datastore, st.t_draft_us);
    const auto piece = [&](rest::token_id t) {
        return in_vocab(tok, t) ? escape(tok.piece(t)) : "<token " + std::to_string(t) + " outside the vocabulary>";
    };
    std::fputs(rest::format_draft_tree(tree, piece).c_str(), stdout);
}

void run_query(const query_args & a) {
    rest::llama_log_quiet();
    const auto tok = rest::load_tokenizer(a.model);
    const auto ds  = rest::datastore::open(a.index, tok->fingerprint(), tok->description());
    const std::vector<rest::token_id> ctx = tok->tokenize(a.text, false, false);
    std::printf("query: %zu tokens\n", ctx.size());
    const auto t0 = clock_type::now();
    const rest::datastore_match m = rest::find_longest_suffix(*ds, ctx, a.max_length);
    const double t_find = seconds_since(t0);
    if (m.length == 0) {
        std::printf("no match: the query's last token does not occur in the index\n");
        return;
    }
    if (a.tree > 0) {
        print_draft_tree(*ds, *tok, ctx, a.tree);
    }
    const std::vector<rest::token_id> matched(ctx.end() - static_cast<std::ptrdiff_t>(m.length), ctx.end());
    std::printf("longest match: %zu tokens \"%s\", %llu occurrences (%.1f us)\n", m.length,
                escape(tok->detokenize(matched)).c_str(), (unsigned long long) m.count, t_find * 1e6);
    const auto next = rest::next_token_counts(*ds, m, a.top);
    std::printf("top continuations (count, then the most frequent path from it, up to %zu tokens):\n", a.depth);
    for (const auto & tc : next) {
        if (tc.token == rest::k_doc_end) {
            std::printf("%10llu  <end of document>\n", (unsigned long long) tc.count);
            continue;
        }
        if (!in_vocab(*tok, tc.token)) {  // a corrupt index
            std::printf("%10llu  <token %d outside the vocabulary>\n", (unsigned long long) tc.count, tc.token);
            continue;
        }
        // Extend greedily with the most frequent next token, stopping at a document's end.
        std::vector<rest::token_id> pattern = matched;
        std::vector<rest::token_id> cont    = {tc.token};
        pattern.push_back(tc.token);
        while (cont.size() < a.depth) {
            const auto step = rest::next_token_counts(*ds, rest::find_all(*ds, pattern), 1);
            if (step.empty() || !in_vocab(*tok, step[0].token)) {
                break;  // a document's end (or a corrupt index's id)
            }
            pattern.push_back(step[0].token);
            cont.push_back(step[0].token);
        }
        std::printf("%10llu  \"%s\"\n", (unsigned long long) tc.count, escape(tok->detokenize(cont)).c_str());
    }
}

// --shard-tokens: 0 or at least 65,536. Every shard carries a first-token table of 4 bytes per vocabulary entry (128
// KB for a 32k vocabulary): one-token shards made a 114 KB corpus a 233 MB index of 14,188 shards.
CLI::Validator shard_tokens_check() {
    return CLI::Validator(
        [](const std::string & v) -> std::string {
            // Digits only: strtoull reads "-1" as its maximum, and an overflow as it too.
            errno = 0;
            const unsigned long long n = std::strtoull(v.c_str(), nullptr, 10);
            if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || errno == ERANGE) {
                return "--shard-tokens must be a whole number of tokens, not '" + v + "'";
            }
            return n == 0 || n >= 65536 ? "" : "--shard-tokens must be 0 (a suffix array's reach) or at least 65536";
        },
        "0 or >= 65536");
}

// The corpus options of build and append (the inputs last: they take every remaining argument).
void add_corpus_options(CLI::App * cmd, build_args & b) {
    cmd->add_option("--format", b.format,
                    "text: each file is a document; jsonl: --field of each record; chat: ShareGPT/OpenAI records "
                    "rendered with the model's chat template")
        ->check(CLI::IsMember({"text", "jsonl", "chat"}))
        ->capture_default_str();
    // One value per use (allow_extra_args false): a list option would otherwise swallow the inputs after it.
    cmd->add_option("--field", b.fields, "jsonl: dotted path to a string, a list of strings, or a list of "
                                         "token ids taken as is (repeatable; default text)")
        ->allow_extra_args(false);
    cmd->add_option("--include", b.include, "Glob on file names when walking directories, e.g. '*.py' (repeatable)")
        ->allow_extra_args(false);
    cmd->add_flag("--split-paragraphs", b.split_paragraphs, "text: blank-line-separated paragraphs are documents");
    cmd->add_option("-t,--threads", b.n_threads, "Tokenizer threads (0: all)")->capture_default_str();
    cmd->add_option("--shard-tokens", b.shard_tokens,
                    "Most tokens per shard (0: a suffix array's reach); build memory is ~10 bytes x this for u16")
        ->check(shard_tokens_check())
        ->capture_default_str();
    cmd->add_option("inputs", b.inputs,
                    "Files, directories (recursive) or - for stdin. Text files holding NUL bytes or invalid "
                    "UTF-8 are skipped with a warning")
        ->required();
}

}  // namespace

void add_index_command(CLI::App & root) {
    auto * idx = root.add_subcommand("index", "Build, verify, inspect and query datastores (suffix-array indexes)");
    idx->require_subcommand(1);

    auto   b     = std::make_shared<build_args>();
    auto * build = idx->add_subcommand("build", "Tokenize a corpus with the model's tokenizer and index it");
    build->add_option("-m,--model", b->model, "GGUF model whose tokenizer to use (only the vocabulary is loaded)")
        ->required();
    build->add_option("-o,--output", b->output, "Index file to write (atomically)")->required();
    add_corpus_options(build, *b);
    build->callback([b] {
        b->output = write_target(b->output);
        run_build(*b);
    });

    auto   ap     = std::make_shared<build_args>();
    auto * append = idx->add_subcommand(
        "append", "Add documents to an index as new shards: its shards are kept as they are, and the new file replaces "
                  "it atomically (readers that have it open keep the old one)");
    append->add_option("-m,--model", ap->model, "GGUF model whose tokenizer built the index")->required();
    append->add_option("index", ap->output, "Index file to add to")->required();
    add_corpus_options(append, *ap);
    append->callback([ap] {
        ap->append = true;
        ap->output = write_target(ap->output);
        run_build(*ap);
    });

    auto   cpath   = std::make_shared<std::string>();
    auto   ctokens = std::make_shared<std::uint64_t>(0);
    auto * compact = idx->add_subcommand("compact", "Merge an index's shards (after appends) into as few as fit, atomically");
    compact->add_option("index", *cpath, "Index file")->required();
    compact->add_option("--shard-tokens", *ctokens, "Most tokens per shard (0: a suffix array's reach)")
        ->check(shard_tokens_check())
        ->capture_default_str();
    compact->callback([cpath, ctokens] { run_compact(write_target(*cpath), *ctokens); });

    auto   vpath  = std::make_shared<std::string>();
    auto * verify = idx->add_subcommand("verify", "Check every section checksum of an index");
    verify->add_option("index", *vpath, "Index file")->required();
    verify->callback([vpath] { run_verify(*vpath); });

    auto   ipath   = std::make_shared<std::string>();
    auto   ijson   = std::make_shared<bool>(false);
    auto * inspect = idx->add_subcommand("inspect", "Print an index's format, tokenizer and counts");
    inspect->add_option("index", *ipath, "Index file")->required();
    inspect->add_flag("--json", *ijson, "Print JSON");
    inspect->callback([ipath, ijson] { run_inspect(*ipath, *ijson); });

    auto   q     = std::make_shared<query_args>();
    auto * query = idx->add_subcommand("query", "Longest match of a text's end and its top continuations");
    query->add_option("-m,--model", q->model, "GGUF model (its tokenizer must match the index's)")->required();
    query->add_option("index", q->index, "Index file")->required();
    query->add_option("text", q->text, "Query text; its longest indexed suffix is matched")->required();
    query->add_option("--top", q->top, "Continuations to show")->capture_default_str();
    query->add_option("--max-length", q->max_length, "Longest suffix to try, tokens")->capture_default_str();
    query->add_option("--depth", q->depth, "Tokens shown per continuation")->capture_default_str();
    query->add_option("--tree", q->tree, "Also show the draft tree of this many nodes (best-first, exact counts)")
        ->check(CLI::Range(0, 4096));
    query->callback([q] { run_query(*q); });
}
