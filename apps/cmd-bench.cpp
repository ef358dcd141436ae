// `rest bench`: plain decoding, rest.cpp's methods and llama.cpp's own decoders side by side, in one process on
// one loaded model, interleaved per prompt (the method order rotates from prompt to prompt) so that machine noise
// hits every method alike. Writes results.json, results.md and the TSV tables bench/plot.sh draws.
#include "bench/bench-methods.h"
#include "bench/bench-report.h"
#include "bench/bench-streams.h"
#include "bench/edit-workload.h"
#include "commands.h"
#include "prompts.h"
#include "session.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

namespace {

namespace fs = std::filesystem;

struct bench_args {
    session_params         sp;
    bench::method_config   mc;
    std::string            prompts;
    std::string            field = "prompt";
    std::int32_t           n_prompts = -1;
    std::int32_t           n_predict = 128;
    std::int32_t           max_turns = -1;
    rest::sampler_params   sampling;
    std::string            methods = "plain,llama-plain,rest,rest-datastore,rest-context,ngram-cache,ngram-simple,ngram-mod";
    std::string            out;
    std::string            label;
    std::vector<std::string> meta;
    bool                   chat = false;
    bool                   quiet = false;
    std::int32_t           warmup = 16;
    std::int32_t           settle_ms = 10;
    std::string            command;
    std::vector<std::int32_t> streams;  // non-empty: the concurrency experiment (bench-streams.h) instead
    std::int32_t           reps = 3;
};

std::vector<double> loadavg() {
    std::ifstream       in("/proc/loadavg");
    std::vector<double> v(3, std::nan(""));
    in >> v[0] >> v[1] >> v[2];
    return v;
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string   line;
    while (std::getline(in, line)) {
        if (line.starts_with("model name")) {
            const size_t c = line.find(':');
            return c == std::string::npos ? line : line.substr(c + 2);
        }
    }
    return "unknown";
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    char              buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

// Tokenizes chat-rendered text; templates that spell out BOS would otherwise get it twice.
std::vector<rest::token_id> tokenize_chat(const session & s, const std::string & text) {
    const auto & vocab = s.model().vocab();
    auto         toks  = vocab.tokenize(text, true, true);
    const auto   bos   = vocab.tokenize("", true, false);
    if (bos.size() == 1 && toks.size() >= 2 && toks[0] == bos[0] && toks[1] == bos[0]) {
        toks.erase(toks.begin());
    }
    return toks;
}

// The concurrency experiment: one slot per stream; unless -c is given, each slot holds the longest prompt (at most
// one token per byte, plus BOS) and n_predict tokens.
void run_streams_bench(bench_args a, const std::vector<prompt_record> & records) {
    a.sp.ctx.n_slots = std::max(1, *std::max_element(a.streams.begin(), a.streams.end()));
    a.sp.speculate   = true;
    for (const std::int32_t n : a.streams) {
        if (n < 1 || n > 256) throw rest::user_error("--streams: " + std::to_string(n) + " is outside 1..256");
    }
    if (a.sp.ctx.n_ctx == 0) {
        std::size_t longest = 0;
        for (const auto & r : records) longest = std::max(longest, r.turns.front().size());
        a.sp.ctx.n_ctx = (std::int32_t) (longest + 2 + (std::size_t) std::max(0, a.n_predict) + 8) * a.sp.ctx.n_slots;
    }
    a.sp.warm_start = false;  // the bench's policies start cold (bench-methods.cpp)
    a.sp.warm_up    = a.warmup > 0;
    session               s(a.sp);
    bench::streams_params p;
    for (const auto & r : records) p.prompts.push_back(s.tokenize_prompt(r.turns.front()));
    p.streams     = a.streams;
    p.reps        = a.reps;
    p.n_predict   = a.n_predict;
    p.ctx         = a.sp.ctx;
    p.draft       = a.sp.draft;
    p.n_draft_max = a.sp.n_draft_max;
    p.out_dir     = a.out;
    bench::run_streams(s, p);
}

void run_bench(const bench_args & a) {
    if (a.out.empty()) throw rest::user_error("--out DIR is required");
    rest::check_sampler_params(a.sampling);  // before the model loads
    // --streams compares plain with REST (whichever sources exist) and ignores --methods.
    const auto methods = a.streams.empty() ? bench::parse_methods(a.methods) : std::vector<bench::method_spec>{};
    for (const auto & m : methods) {
        // rest+pred methods draft from a datastore when there is one; the others that name one need it.
        if (m.type == bench::method_spec::kind::rest && m.use_datastore && !m.has_prediction() && a.sp.index_paths.empty()) {
            throw rest::user_error("method '" + m.name + "' needs a datastore (--index)");
        }
    }
    auto       records = read_prompt_file(a.prompts, a.field);
    if (a.n_prompts >= 0 && (size_t) a.n_prompts < records.size()) records.resize((size_t) a.n_prompts);
    std::error_code ec;
    fs::create_directories(a.out, ec);
    if (ec) throw rest::user_error("cannot create output directory '" + a.out + "': " + ec.message());

    if (!a.streams.empty()) {
        run_streams_bench(a, records);
        return;
    }
    const auto load_start = loadavg();
    session_params sp = a.sp;
    sp.warm_start     = false;  // the bench's policies start cold (bench-methods.cpp)
    sp.warm_up        = a.warmup > 0;
    session    s(sp);
    const auto & tok = s.model().vocab();

    bench::method_config mc = a.mc;
    mc.draft                = a.sp.draft;
    mc.n_draft_max          = a.sp.n_draft_max;
    mc.model_path           = a.sp.model_path;
    mc.n_batch              = a.sp.ctx.n_batch;
    mc.n_threads            = a.sp.ctx.n_threads;
    mc.n_gpu_layers         = a.sp.n_gpu_layers;
    mc.ctx                  = a.sp.ctx;

    std::unique_ptr<bench::ngram_static_cache> ngram_static;
    for (const auto & m : methods) {
        if (m.drafter == "ngram-cache" && s.datastore() && !ngram_static) {  // one cache, shared by ngram-cache@N
            ngram_static = std::make_unique<bench::ngram_static_cache>(*s.datastore());
        }
    }
    std::vector<std::unique_ptr<bench::method_runner>> runners;
    for (const auto & m : methods) runners.push_back(bench::make_runner(m, s, mc, ngram_static.get()));
    int reference = -1;
    for (size_t m = 0; m < methods.size(); ++m) {
        if (methods[m].name == "plain") reference = (int) m;
    }
    const int answer_from = reference >= 0 ? reference : 0;

    // Chat template: used for multi-turn records (and for all with --chat) when the model has one.
    bool has_template = true;
    try {
        const rest::chat_message probe[] = {{"user", "hi"}};
        (void) tok.apply_chat_template(probe, true);
    } catch (const rest::user_error &) {
        has_template = false;
    }
    bool any_multi = a.chat;
    for (const auto & r : records) any_multi = any_multi || r.turns.size() > 1;
    std::vector<std::string> notes;
    std::string              chat_mode = "not used (single-turn completion prompts)";
    if (any_multi) {
        chat_mode = has_template ? "the model's chat template"
                                 : "none: the model has no chat template, turns are joined by blank lines";
        if (!has_template) notes.push_back("multi-turn prompts: the model has no chat template; plain concatenation");
    }

    // Warm-up (not recorded): page in the weights and spin up the thread pools. Only methods without memory of
    // past requests, so no method learns the first prompt before it is measured.
    if (a.warmup > 0 && !records.empty()) {
        const auto p = s.tokenize_prompt(records[0].turns.front());
        for (size_t m = 0; m < methods.size(); ++m) {
            if (methods[m].type == bench::method_spec::kind::plain || methods[m].type == bench::method_spec::kind::llama_plain) {
                runners[m]->run(p, a.warmup, a.sampling);
            }
        }
    }

    // The edit workload (rest+pred methods): plain decoding's greedy output for each record's first turn, computed
    // before the measured loop (untimed), so that the method order rotates as for every other method and an
    // unrelated prediction can be the next record's output.
    std::vector<std::vector<rest::token_id>> plain_outputs;
    if (std::any_of(methods.begin(), methods.end(), [](const auto & m) { return m.has_prediction(); })) {
        if (reference < 0) throw rest::user_error("rest+pred methods need plain in --methods (it makes their predictions)");
        if (records.size() < 2 && std::any_of(methods.begin(), methods.end(), [](const auto & m) { return m.pred_unrelated; })) {
            throw rest::user_error("rest+pred-unrelated needs at least two prompts (its prediction is another prompt's output)");
        }
        rest::sampler_params greedy;
        greedy.temp = 0;
        for (const auto & rec : records) {
            const bool use_chat = (a.chat || rec.turns.size() > 1) && has_template;
            const auto prompt   = use_chat ? tokenize_chat(s, tok.apply_chat_template(std::vector<rest::chat_message>{{"user", rec.turns[0]}}, true))
                                           : s.tokenize_prompt(rec.turns[0]);
            auto out = (std::int32_t) prompt.size() + 1 < s.context().n_ctx_slot()
                           ? runners[(size_t) reference]->run(prompt, a.n_predict, greedy).tokens
                           : std::vector<rest::token_id>{};
            if (!out.empty() && s.model().is_eog(out.back())) out.pop_back();
            plain_outputs.push_back(std::move(out));
        }
    }
    // A method's prediction for record ri (first turns only; later turns get none).
    auto prediction_for = [&](const bench::method_spec & m, size_t ri, size_t turn) -> std::vector<rest::token_id> {
        if (!m.has_prediction() || turn > 0) return {};
        auto p = m.pred_unrelated ? plain_outputs[(ri + 1) % plain_outputs.size()]
                                  : bench::random_edits(plain_outputs[ri], m.pred_edits, s.model().info().n_vocab,
                                                        (std::uint32_t) (1000 * ri + (size_t) m.pred_edits));
        p.resize(std::min(p.size(), (size_t) s.context().n_ctx_slot()));  // insertions can make it longer
        return p;
    };

    std::vector<bench::bench_case>              cases;
    std::vector<std::vector<bench::bench_cell>> cells;
    double load_sum = 0, load_max = 0;
    int    n_skipped = 0;
    const auto t_start = std::chrono::steady_clock::now();
    for (size_t ri = 0; ri < records.size(); ++ri) {
        const auto & rec     = records[ri];
        const size_t n_turns = a.max_turns > 0 ? std::min(rec.turns.size(), (size_t) a.max_turns) : rec.turns.size();
        std::vector<rest::chat_message> conv;
        std::string                     raw;  // no-template transcript so far
        for (size_t turn = 0; turn < n_turns; ++turn) {
            std::vector<rest::token_id> prompt;
            const bool use_chat = (a.chat || rec.turns.size() > 1) && has_template;
            conv.push_back({"user", rec.turns[turn]});
            if (use_chat) {
                prompt = tokenize_chat(s, tok.apply_chat_template(conv, true));
            } else {
                raw += (turn ? "\n\n" : "") + rec.turns[turn];
                prompt = s.tokenize_prompt(raw);
            }
            bench::bench_case bc{(std::int32_t) ri, (std::int32_t) turn, (std::int32_t) prompt.size()};
            std::vector<bench::bench_cell> row(methods.size());
            if ((std::int32_t) prompt.size() + 1 >= s.context().n_ctx_slot()) {
                ++n_skipped;
                cases.push_back(bc);
                cells.push_back(std::move(row));
                break;  // later turns only grow
            }
            const double la = loadavg()[0];
            load_sum += la;
            load_max = std::max(load_max, la);
            const size_t off = cases.size() % methods.size();
            for (size_t k = 0; k < methods.size(); ++k) {
                const size_t m = (off + k) % methods.size();
                const auto pred = prediction_for(methods[m], ri, turn);
                std::this_thread::sleep_for(std::chrono::milliseconds(a.settle_ms));  // see --settle-ms
                row[m].run     = runners[m]->run(prompt, a.n_predict, a.sampling, pred);
                row[m].ran     = true;
            }
            if (reference >= 0) bench::judge_case(row, reference, *runners[(size_t) reference], prompt, a.n_predict);
            // The next turn continues the reference method's answer (the same for every method when lossless).
            auto answer = row[(size_t) answer_from].run.tokens;
            if (!answer.empty() && s.model().is_eog(answer.back())) answer.pop_back();
            const std::string answer_text = tok.detokenize(answer);
            conv.push_back({"assistant", answer_text});
            raw += answer_text;
            if (!a.quiet) {
                std::fprintf(stderr, "bench: prompt %zu/%zu turn %zu (%zu tokens):", ri + 1, records.size(), turn + 1,
                             prompt.size());
                for (size_t m = 0; m < methods.size(); ++m) {
                    const auto & st = row[m].run.stats;
                    std::fprintf(stderr, " %s %.2fms/t", methods[m].name.c_str(),
                                 st.n_tokens ? (st.t_total_us - st.t_prefill_us) / 1000.0 / st.n_tokens : 0.0);
                }
                std::fprintf(stderr, "\n");
            }
            cases.push_back(bc);
            cells.push_back(std::move(row));
        }
    }
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    const auto   load_end = loadavg();
    const int    n_run    = (int) cases.size() - n_skipped;
    if (n_skipped) {
        notes.push_back(std::to_string(n_skipped) + " prompt(s) did not fit the context and were skipped");
        std::fprintf(stderr, "rest bench: warning: %s\n", notes.back().c_str());
    }
    if (n_run <= 0) {
        throw rest::user_error("no prompt fits the context (" + std::to_string(n_skipped) +
                               " skipped): nothing was measured");
    }

    const auto & info = s.model().info();
    nlohmann::json meta;
    meta["tool"]         = "rest bench";
    meta["version"]      = "rest.cpp 0.1.0";
    meta["command"]      = a.command;
    meta["date_utc"]     = utc_now();
    meta["label"]        = a.label;
    meta["model"]        = {{"path", info.path}, {"description", info.description}, {"file_type", info.file_type},
                            {"n_params", info.n_params}, {"n_vocab", info.n_vocab}, {"backend", info.backend}};
    if (s.datastore()) {
        const auto & di = s.datastore()->info();
        meta["index"] = {{"path", a.sp.index_paths.size() == 1 ? nlohmann::json(a.sp.index_paths[0]) : nlohmann::json(a.sp.index_paths)}, {"n_tokens", di.n_tokens}, {"n_documents", di.n_documents}};
    }
    if (ngram_static) meta["ngram_static_cache_ngrams"] = ngram_static->size();
    meta["prompts"]      = {{"path", a.prompts}, {"field", a.field}, {"n_records", records.size()},
                            {"n_cases", cases.size()}, {"n_run", n_run}, {"chat_template", chat_mode}};
    meta["n_predict"]    = a.n_predict;
    meta["settle_ms"]    = a.settle_ms;
    meta["n_ctx_slot"]   = s.context().n_ctx_slot();
    meta["draft_layout"] = s.layout();
    meta["threads"]      = a.sp.ctx.n_threads > 0 ? a.sp.ctx.n_threads : (int) std::thread::hardware_concurrency();
    meta["sampling"]     = {{"temp", a.sampling.temp}, {"top_k", a.sampling.top_k}, {"top_p", a.sampling.top_p},
                            {"min_p", a.sampling.min_p}, {"seed", a.sampling.seed}};
    meta["rest_draft"]   = {{"n_budget_max", a.sp.draft.n_budget_max}, {"draft_max", a.sp.n_draft_max},
                            {"depth_max", a.sp.draft.depth_max}};
    meta["llama_drafters"] = {{"ngram_cache_draft_max", a.mc.ngram.cache_draft_max},
                              {"max_draft_per_step", a.mc.n_llama_draft_max},
                              {"ngram_simple", {a.mc.ngram.simple_size_n, a.mc.ngram.simple_size_m}},
                              {"ngram_mod", {a.mc.ngram.mod_n_match, a.mc.ngram.mod_n_min, a.mc.ngram.mod_n_max}}};
    meta["machine"]      = {{"cpu", cpu_model()}, {"n_cpu", (int) std::thread::hardware_concurrency()},
                            {"loadavg_start", load_start}, {"loadavg_end", load_end},
                            {"load1_mean_during", n_run ? load_sum / n_run : 0.0}, {"load1_max_during", load_max}};
    meta["wall_seconds"] = wall_s;
    meta["notes"]        = notes;
    for (const auto & kv : a.meta) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos) throw rest::user_error("--meta expects KEY=VALUE, got '" + kv + "'");
        meta["extra"][kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    char line[512];
    std::snprintf(line, sizeof(line),
                  "%s%s%s, %s, %d prompt turns of %s, %d tokens, %s, %d threads, %s drafts; load average %.1f at start, "
                  "%.1f mean during the run (%d CPUs)",
                  a.label.empty() ? "" : a.label.c_str(), a.label.empty() ? "" : ": ", info.description.c_str(),
                  s.datastore() ? ("datastore of " + std::to_string(s.datastore()->info().n_tokens) + " tokens").c_str()
                                : "no datastore",
                  n_run, fs::path(a.prompts).filename().c_str(), a.n_predict,
                  a.sampling.greedy() ? "greedy" : "sampled", meta["threads"].get<int>(), s.layout().c_str(), load_start[0],
                  n_run ? load_sum / n_run : 0.0, (int) std::thread::hardware_concurrency());
    meta["summary_line"] = line;

    const auto sums = bench::summarize(methods, cases, cells, reference);
    const auto j    = bench::results_json(sums, methods, cases, cells, s.costs(), meta);
    bench::write_result_file(a.out, "results.json", j.dump(1) + "\n");
    const std::string md = bench::markdown_table(sums, meta);
    bench::write_result_file(a.out, "results.md", md);
    bench::write_plot_tables(a.out, sums, s.costs());
    std::fputs(md.c_str(), stdout);
    std::fprintf(stderr, "bench: wrote %s/results.json, results.md, speedup.tsv, accept.tsv, cost.tsv (%.1f s)\n",
                 a.out.c_str(), wall_s);
}

}  // namespace

void add_bench_command(CLI::App & root) {
    auto * cmd = root.add_subcommand("bench", "Benchmark plain, rest.cpp and llama.cpp decoding side by side on a prompt set");
    auto   a   = std::make_shared<bench_args>();
    cmd->add_option("-m,--model", a->sp.model_path, "GGUF model")->required();
    add_index_option(cmd, a->sp.index_paths, "; also the corpus of ngram-cache's static cache");
    cmd->add_option("--prompts", a->prompts, "Prompt file: .jsonl (.gz), .json array, or text")->required();
    cmd->add_option("--field", a->field, "Dotted field holding the prompt (a list of strings: turns)")->capture_default_str();
    cmd->add_option("--n-prompts", a->n_prompts, "Use only the first N records (-1: all)")
        ->check(CLI::Range(-1, INT32_MAX) & !CLI::IsMember({0}))
        ->capture_default_str();
    cmd->add_option("--max-turns", a->max_turns, "Most turns per record (-1: all)")
        ->check(CLI::Range(-1, INT32_MAX) & !CLI::IsMember({0}))
        ->capture_default_str();
    cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate per prompt turn")
        ->check(CLI::Range(1, INT32_MAX))
        ->capture_default_str();
    cmd->add_option("--methods", a->methods,
                    "Comma-separated: plain, llama-plain, rest, rest-datastore, rest-context, rest-history, "
                    "rest@N (fixed budget N), ngram-cache, ngram-cache-nostatic, ngram-simple, ngram-mod, ngram-map-k, "
                    "ngram-map-k4v; each llama.cpp type also as TYPE@N (at most N draft tokens a step, overriding "
                    "--ngram-draft-max and --llama-draft-max)")
        ->capture_default_str();
    cmd->add_option("--out", a->out, "Output directory")->required();
    cmd->add_option("--label", a->label, "Name of this run in the table's caption");
    cmd->add_option("--meta", a->meta, "KEY=VALUE recorded under results.json's \"extra\" (repeatable)");
    cmd->add_flag("--chat", a->chat, "Render every prompt through the model's chat template (multi-turn always is)");
    cmd->add_option("-c,--ctx-size", a->sp.ctx.n_ctx, "Context size (0: model's, capped at 4096)")->capture_default_str();
    cmd->add_option("-t,--threads", a->sp.ctx.n_threads, "CPU threads (0: all)")->capture_default_str();
    cmd->add_option("-b,--batch-size", a->sp.ctx.n_batch, "Most tokens per forward pass")->capture_default_str();
    cmd->add_option("--temp", a->sampling.temp, "Temperature (0: greedy)")->capture_default_str();
    cmd->add_option("--top-k", a->sampling.top_k, "Top-k (0: off)")->capture_default_str();
    cmd->add_option("--top-p", a->sampling.top_p, "Top-p (1: off)")->capture_default_str();
    cmd->add_option("--min-p", a->sampling.min_p, "Min-p (0: off)")->capture_default_str();
    add_seed_option(cmd, a->sampling.seed, "Sampling seed for every method (-1 or 4294967295: 42)");
    cmd->add_option("--draft-max", a->sp.n_draft_max, "rest: cap on draft nodes per step (-1: 64)")
        ->check(draft_nodes_range())->capture_default_str();
    cmd->add_option("--ngram-draft-max", a->mc.ngram.cache_draft_max,
                    "ngram-cache: tokens per draft (llama-lookup's --spec-draft-n-max)")->capture_default_str();
    cmd->add_option("--llama-draft-max", a->mc.n_llama_draft_max, "llama.cpp drafters: most draft tokens per step")
        ->capture_default_str();
    cmd->add_option("--warmup", a->warmup,
                    "Tokens of unrecorded plain warm-up on the first prompt, after the warm-up passes of the sizes "
                    "rest may verify (0: neither)")
        ->capture_default_str();
    // Why: after a pass on several threads llama.cpp's OpenMP workers spin for a few ms. With another process on a
    // core, the method run next shared the CPUs with them: one fixed budget under three names came out 0.53-0.97
    // (slowest over fastest) in one run, 0.89-0.99 with this pause.
    cmd->add_option("--settle-ms", a->settle_ms,
                    "Pause before each method's run of a prompt, so that none runs beside the threads the one before "
                    "left spinning (0: none; the method table only, not --streams)")
        ->check(CLI::Range(0, 60000))
        ->capture_default_str();
    cmd->add_flag("--quiet", a->quiet, "No per-prompt progress on stderr");
    cmd->add_option("--streams", a->streams,
                    "Concurrency experiment instead of the method table: plain vs REST at these stream counts, "
                    "e.g. 1,4,8 (server-style continuous batching, one process)")->delimiter(',');
    cmd->add_option("--reps", a->reps, "--streams: repetitions per stream count")
        ->check(CLI::Range(1, INT32_MAX))
        ->capture_default_str();
    add_verify_options(cmd, a->sp);
    add_offload_options(cmd, a->sp.n_gpu_layers, a->sp.rpc_servers);
    cmd->add_flag("--verbose", a->sp.verbose, "Print the measured verify cost");
    cmd->callback([a, cmd] {
        std::string c = "rest bench";
        for (const auto * opt : cmd->get_options()) {
            if (opt->count() == 0) continue;
            for (const auto & r : opt->results()) {
                c.append(" ").append(opt->get_name());
                if (!r.empty()) c.append(" ").append(r);
            }
        }
        a->command = c;
        if (a->sampling.seed == 0xFFFFFFFFu && !a->sampling.greedy()) a->sampling.seed = 42;  // the same for all
        run_bench(*a);
    });
}
