// Builds the benchmark datastores for bench-draft from real source files: tokenizes them with a GGUF vocabulary,
// holds out about one file in 64 as queries (generation streams the index has not seen), and writes datastores
// holding exactly the first N corpus tokens for each requested N.
//
//   bench-draft-corpus -m VOCAB.gguf -o DIR [--tokens 1000000,10000000,100000000] [--threads 2]
//                      INPUT_DIR... [--ood OOD_DIR...]
//
// Writes DIR/draft-<N>.idx for each N, DIR/queries.bin (held-out files of the same trees) and, with --ood,
// DIR/queries-ood.bin (files from other trees, e.g. another language: the hard case, short matches). A query
// file holds a u32 document count, then per document a u32 length and its u32 tokens. Files are taken in a fixed
// pseudo-random order (hash of the path), so every size mixes every input directory; binary files, files over
// 4 MB, invalid UTF-8 and byte-identical duplicates are skipped.
#include "rest/index-builder.h"
#include "rest/llama-model.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace fs = std::filesystem;
using rest::token_id;

namespace {

bool valid_text(const std::string & s) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == 0) {
            return false;
        }
        const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) {
            return false;
        }
        for (int k = 1; k < n; ++k) {
            if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) {
                return false;
            }
        }
        i += n;
    }
    return true;
}

std::vector<std::uint64_t> parse_sizes(const std::string & s) {
    std::vector<std::uint64_t> out;
    std::stringstream          ss(s);
    for (std::string item; std::getline(ss, item, ',');) {
        out.push_back(std::stoull(item));
    }
    std::sort(out.begin(), out.end());
    return out;
}

struct tokenized {
    std::vector<std::pair<std::uint64_t, std::string>> files;   // (hash of the path, path), in processing order
    std::vector<std::vector<token_id>>                 docs;    // per file; empty when skipped
    std::vector<std::uint64_t>                         hashes;  // content hashes
};

// Tokenizes the files under `dirs` in path-hash order on n_threads threads, stopping after about `budget` tokens.
tokenized tokenize_dirs(const std::vector<std::string> & dirs, const rest::tokenizer & tok, std::uint64_t budget,
                        int n_threads) {
    tokenized t;
    for (const std::string & in : dirs) {
        for (auto it = fs::recursive_directory_iterator(in, fs::directory_options::skip_permission_denied);
             it != fs::recursive_directory_iterator(); ++it) {
            std::error_code ec;
            if (it->is_regular_file(ec) && !it->is_symlink(ec) && it->file_size(ec) > 0 &&
                it->file_size(ec) <= (4u << 20)) {
                const std::string p = it->path().string();
                t.files.push_back({XXH3_64bits(p.data(), p.size()), p});
            }
        }
    }
    std::sort(t.files.begin(), t.files.end());
    t.docs.resize(t.files.size());
    t.hashes.resize(t.files.size());
    std::atomic<std::size_t>   next{0};
    std::atomic<std::uint64_t> n_total{0};
    auto                       work = [&] {
        while (n_total.load() < budget) {
            const std::size_t i = next++;
            if (i >= t.files.size()) {
                return;
            }
            std::ifstream     f(t.files[i].second, std::ios::binary);
            const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            if (!valid_text(text)) {
                continue;
            }
            t.docs[i]   = tok.tokenize(text, false, false);
            t.hashes[i] = XXH3_64bits(text.data(), text.size());
            n_total += t.docs[i].size();
        }
    };
    std::vector<std::thread> threads;
    for (int k = 0; k < n_threads; ++k) {
        threads.emplace_back(work);
    }
    for (auto & th : threads) {
        th.join();
    }
    std::fprintf(stderr, "%zu candidate files under %zu directories, %llu tokens read\n", t.files.size(), dirs.size(),
                 (unsigned long long) n_total.load());
    return t;
}

void write_queries(const std::string & path, const std::vector<std::vector<token_id>> & docs) {
    std::ofstream q(path, std::ios::binary);
    auto          put = [&](std::uint32_t v) { q.write(reinterpret_cast<const char *>(&v), sizeof(v)); };
    put(static_cast<std::uint32_t>(docs.size()));
    for (const auto & d : docs) {
        put(static_cast<std::uint32_t>(d.size()));
        for (const token_id t : d) {
            put(static_cast<std::uint32_t>(t));
        }
    }
}

}  // namespace

int main(int argc, char ** argv) {
    std::string              model, out_dir, sizes_arg = "1000000,10000000,100000000";
    int                      n_threads = 2;
    std::vector<std::string> inputs, ood;
    bool                     in_ood = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-m" && i + 1 < argc) {
            model = argv[++i];
        } else if (a == "-o" && i + 1 < argc) {
            out_dir = argv[++i];
        } else if (a == "--tokens" && i + 1 < argc) {
            sizes_arg = argv[++i];
        } else if (a == "--threads" && i + 1 < argc) {
            n_threads = std::max(1, std::stoi(argv[++i]));
        } else if (a == "--ood") {
            in_ood = true;
        } else {
            (in_ood ? ood : inputs).push_back(a);
        }
    }
    if (model.empty() || out_dir.empty() || inputs.empty()) {
        std::fprintf(stderr, "usage: %s -m VOCAB.gguf -o DIR [--tokens N,N,...] [--threads T] INPUT_DIR... "
                             "[--ood DIR...]\n", argv[0]);
        return 1;
    }
    try {
        rest::llama_log_quiet();
        const auto                       tok          = rest::load_tokenizer(model);
        const std::vector<std::uint64_t> sizes        = parse_sizes(sizes_arg);
        const std::uint64_t              want         = sizes.back();
        const std::uint64_t              want_queries = 1500000;

        // Margin over what is kept: duplicates and held-out files are read too.
        tokenized t = tokenize_dirs(inputs, *tok, (want + want_queries) * 13 / 10, n_threads);

        // Byte-identical files (the same header installed twice, vendored copies) are kept once, so a query is
        // never simply a copy of an indexed file.
        std::vector<std::vector<token_id>> corpus, queries;
        std::uint64_t                      n_corpus = 0, n_queries = 0, n_dup = 0;
        std::unordered_set<std::uint64_t>  seen;
        for (std::size_t i = 0; i < t.files.size() && (n_corpus < want || n_queries < want_queries); ++i) {
            if (t.docs[i].empty()) {
                continue;
            }
            if (!seen.insert(t.hashes[i]).second) {
                n_dup++;
                continue;
            }
            if (t.files[i].first % 64 == 0) {
                if (n_queries < want_queries) {
                    n_queries += t.docs[i].size();
                    queries.push_back(std::move(t.docs[i]));
                }
            } else if (n_corpus < want) {
                n_corpus += t.docs[i].size();
                corpus.push_back(std::move(t.docs[i]));
            }
        }
        std::fprintf(stderr, "corpus %llu tokens in %zu documents, queries %llu tokens in %zu documents, %llu duplicate "
                     "files skipped\n", (unsigned long long) n_corpus, corpus.size(), (unsigned long long) n_queries,
                     queries.size(), (unsigned long long) n_dup);
        if (n_corpus < want) {
            std::fprintf(stderr, "warning: only %llu corpus tokens, fewer than the %llu asked for: add inputs\n",
                         (unsigned long long) n_corpus, (unsigned long long) want);
        }
        fs::create_directories(out_dir);
        write_queries(out_dir + "/queries.bin", queries);
        if (!ood.empty()) {
            tokenized                          o = tokenize_dirs(ood, *tok, want_queries, n_threads);
            std::vector<std::vector<token_id>> oq;
            for (auto & d : o.docs) {
                if (!d.empty()) {
                    oq.push_back(std::move(d));
                }
            }
            write_queries(out_dir + "/queries-ood.bin", oq);
            std::fprintf(stderr, "out-of-distribution queries: %zu documents\n", oq.size());
        }
        const rest::tokenizer_identity id = rest::identity_of(*tok);
        for (const std::uint64_t n : sizes) {
            std::vector<std::vector<token_id>> part;
            std::uint64_t                      acc = 0;
            for (const auto & d : corpus) {
                if (acc >= n) {
                    break;
                }
                part.push_back(d);
                if (acc + d.size() > n) {
                    part.back().resize(n - acc);
                }
                acc += part.back().size();
            }
            const std::string path = out_dir + "/draft-" + std::to_string(n) + ".idx";
            const auto        t0   = std::chrono::steady_clock::now();
            rest::write_datastore(path, part, id, 1);
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::fprintf(stderr, "%s: %llu tokens, %zu documents, written in %.1f s\n", path.c_str(),
                         (unsigned long long) acc, part.size(), s);
        }
    } catch (const std::exception & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
