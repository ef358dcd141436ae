// build_datastore: corpus -> documents -> tokens (parallel) -> index_builder.
//
// The reader runs on the calling thread; each batch of documents (a few MB of text) is tokenized by n_threads
// workers while the calling thread reads the next batch and appends the previous batch's tokens, so reading,
// tokenizing and sorting overlap without holding more than three batches in memory.
#include "rest/index-builder.h"

#include "corpus-reader.h"
#include "index-format.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

namespace rest {

namespace {

constexpr std::size_t k_batch_bytes = 2u << 20;

using token_batch = std::vector<std::vector<token_id>>;

token_batch tokenize_batch(const tokenizer & tok, const std::vector<corpus_document> & docs, int n_threads) {
    token_batch             out(docs.size());
    std::atomic<std::size_t> next{ 0 };
    std::exception_ptr      error;
    std::mutex              error_mutex;
    auto                    work = [&]() {
        for (std::size_t i = next++; i < docs.size(); i = next++) {
            try {
                out[i] = docs[i].pretokenized ? docs[i].tokens : tok.tokenize(docs[i].text, false, docs[i].parse_special);
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!error) {
                    error = std::current_exception();
                }
                next = docs.size();
            }
        }
    };
    const int n = std::max(1, std::min<int>(n_threads, static_cast<int>(docs.size())));
    std::vector<std::thread> threads;
    for (int t = 1; t < n; ++t) {
        threads.emplace_back(work);
    }
    work();
    for (auto & th : threads) {
        th.join();
    }
    if (error) {
        std::rethrow_exception(error);
    }
    return out;
}

bool looks_like_index(const std::string & file) {
    std::ifstream in(file, std::ios::binary);
    char          magic[sizeof(index_format::k_magic)] = {};
    return in.read(magic, sizeof(magic)) && std::equal(std::begin(magic), std::end(magic), std::begin(index_format::k_magic));
}

// The index is written over `path` when done: an input that is the output would be lost (`build -o DIR/a.py DIR`
// overwrote a.py). Named, it is refused; found in a directory walked, it is left out if it is an index (the last
// build's, as `build -o DIR/x.idx DIR` run again finds it), with the writers' lock and temp files, and refused
// otherwise.
void leave_out_the_output(std::vector<corpus_file> & files, const std::vector<std::string> & inputs,
                          const std::string & path) {
    namespace fs = std::filesystem;
    const std::string out_name = fs::path(path).filename().string();
    const fs::path    out_dir  = fs::absolute(path).parent_path();
    std::erase_if(files, [&](const corpus_file & f) {
        if (f.path == "-") return false;
        const bool      named = std::find(inputs.begin(), inputs.end(), f.path) != inputs.end();
        std::error_code ec;
        if (fs::equivalent(f.path, path, ec)) {
            if (named || !looks_like_index(f.path)) {
                throw user_error("the output '" + path + "' is also an input ('" + f.path + "'): it would be overwritten");
            }
            return true;
        }
        const std::string name = fs::path(f.path).filename().string();
        if (named || (name != out_name + ".lock" && name.rfind(out_name + ".tmp.", 0) != 0)) return false;
        return fs::equivalent(fs::absolute(f.path).parent_path(), out_dir, ec);
    });
}

}  // namespace

corpus_build_summary build_datastore(const std::string & path, const std::vector<std::string> & inputs,
                                     const tokenizer & tok, const corpus_build_params & params,
                                     const std::function<void(const std::string &)> & on_warning) {
    const auto t0 = std::chrono::steady_clock::now();
    if (inputs.empty()) {
        throw user_error("no inputs given");
    }
    std::vector<corpus_file> files = list_corpus_files(inputs, params.corpus);
    leave_out_the_output(files, inputs, path);
    if (files.empty()) {
        throw user_error("empty corpus: the inputs hold no files" +
                         std::string(params.corpus.include.empty() ? "" : " matching --include"));
    }
    std::uint64_t total_bytes = 0;
    for (const auto & f : files) {
        total_bytes += f.size;
    }
    const bool size_known = std::none_of(files.begin(), files.end(), [](const corpus_file & f) { return f.path == "-"; });

    corpus_reader reader(std::move(files), params.corpus, tok, on_warning);
    tokenizer_identity id{ tok.fingerprint(), tok.description(), tok.n_vocab() };
    index_builder      builder(path, id, params.index);

    std::uint64_t n_tokens = 0;
    auto          report   = [&]() {
        if (params.index.on_progress) {
            params.index.on_progress({ build_phase::tokenize, reader.bytes_read(), size_known ? total_bytes : 0,
                                       n_tokens, 0 });
        }
    };
    auto append = [&](token_batch & batch) {
        for (auto & d : batch) {
            builder.add_document(d);
            n_tokens += d.size();
            std::vector<token_id>().swap(d);
        }
        report();
    };

    // Pipeline: tokenize batch k on the workers while this thread appends batch k-1 and reads batch k+1.
    std::vector<corpus_document> docs;
    std::future<token_batch>     pending;
    std::vector<corpus_document> in_flight;
    for (;;) {
        docs.clear();
        const bool more = reader.next(docs, k_batch_bytes);
        if (pending.valid()) {
            token_batch done = pending.get();
            append(done);
        }
        if (!more && docs.empty()) {
            break;
        }
        in_flight = std::move(docs);
        docs      = {};
        pending   = std::async(std::launch::async, tokenize_batch, std::cref(tok), std::cref(in_flight),
                               params.n_threads);
        if (!more) {
            token_batch done = pending.get();
            append(done);
            break;
        }
    }
    // Shards that filled up were sorted and written inside the loop; that time is not tokenizing.
    const double t_loop = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() -
                          builder.t_sort_s() - builder.t_write_s();

    std::vector<corpus_document>().swap(in_flight);  // the last sort is the peak: hold nothing else
    std::vector<corpus_document>().swap(docs);

    corpus_build_summary s;
    s.n_files         = reader.n_files();
    s.n_files_skipped = reader.n_skipped();
    s.n_bytes         = reader.bytes_read();
    if (n_tokens == 0) {
        throw user_error("empty corpus: " + std::to_string(s.n_files) + " input file(s), " +
                         std::to_string(s.n_files_skipped) + " skipped, no text to index");
    }
    s.info         = builder.finish();
    s.t_sort_s     = builder.t_sort_s();
    s.t_sort_cpu_s = builder.t_sort_cpu_s();
    s.t_write_s    = builder.t_write_s();
    s.t_tokenize_s = t_loop;
    return s;
}

}  // namespace rest
