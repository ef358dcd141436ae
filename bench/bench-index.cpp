// Micro-benchmarks of the datastore on synthetic corpora (fixed seeds): suffix sorting throughput, index lookups,
// continuation counting. Real-corpus figures at scale come from bench/index-scale.sh.
#include "index/suffix-sort.h"
#include "rest/datastore.h"
#include "rest/index-builder.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <filesystem>
#include <random>

namespace {

using rest::token_id;

// Zipf-distributed tokens with recurring phrases, in documents of ~2000 tokens: closer to text than uniform noise.
std::vector<std::vector<token_id>> synthetic_corpus(std::size_t n_tokens, std::int32_t n_vocab, unsigned seed) {
    std::mt19937                       rng(seed);
    std::vector<double>                w(n_vocab);
    for (std::int32_t i = 0; i < n_vocab; ++i) {
        w[i] = 1.0 / std::pow(i + 1.0, 1.1);
    }
    std::discrete_distribution<token_id> zipf(w.begin(), w.end());
    std::vector<std::vector<token_id>>   phrases(500);
    for (auto & p : phrases) {
        p.resize(4 + rng() % 30);
        for (auto & t : p) {
            t = zipf(rng);
        }
    }
    std::vector<std::vector<token_id>> docs;
    std::size_t                        n = 0;
    while (n < n_tokens) {
        std::vector<token_id> d;
        while (d.size() < 2000) {
            if (rng() % 4 == 0) {
                const auto & p = phrases[rng() % phrases.size()];
                d.insert(d.end(), p.begin(), p.end());
            } else {
                d.push_back(zipf(rng));
            }
        }
        n += d.size();
        docs.push_back(std::move(d));
    }
    return docs;
}

std::vector<token_id> flatten(const std::vector<std::vector<token_id>> & docs) {
    std::vector<token_id> t;
    for (const auto & d : docs) {
        if (!t.empty()) {
            t.push_back(rest::k_doc_end);
        }
        t.insert(t.end(), d.begin(), d.end());
    }
    return t;
}

void BM_sort_suffixes(benchmark::State & state) {
    const auto                text = flatten(synthetic_corpus(state.range(0), 32000, 1));
    const int                 w    = 2;
    std::vector<std::uint8_t> bytes(text.size() * w);
    std::vector<std::int32_t> work(text.size() + 1);
    for (auto _ : state) {
        rest::encode_sort_text(text, w, bytes.data());
        benchmark::DoNotOptimize(rest::sort_suffixes(bytes.data(), text.size(), w, work.data()));
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(text.size()));
}
BENCHMARK(BM_sort_suffixes)->Arg(1 << 20)->Arg(1 << 23)->Unit(benchmark::kMillisecond);

// One shared datastore for the lookup benchmarks (built once per process).
const rest::datastore & lookup_store() {
    static std::unique_ptr<rest::datastore> ds = [] {
        const std::string path = (std::filesystem::temp_directory_path() / "rest-bench-index.idx").string();
        rest::write_datastore(path, synthetic_corpus(1 << 23, 32000, 2), {0xBE4C, "synthetic, 32000 tokens", 32000});
        return rest::datastore::open(path);
    }();
    return *ds;
}

// Patterns cut from the corpus (they occur), of state.range(0) tokens.
std::vector<std::vector<token_id>> corpus_patterns(const rest::datastore & ds, std::size_t len, std::size_t n) {
    std::mt19937_64                    rng(3);
    const auto &                       s = ds.shards()[0];
    std::vector<std::vector<token_id>> out;
    while (out.size() < n) {
        std::vector<token_id> p(len);
        if (s.read(s.suffix(rng() % s.n_suffixes()), p) == len) {
            out.push_back(std::move(p));
        }
    }
    return out;
}

void BM_find(benchmark::State & state) {
    const auto & ds       = lookup_store();
    const auto   patterns = corpus_patterns(ds, static_cast<std::size_t>(state.range(0)), 4096);
    std::size_t  i        = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(rest::find_all(ds, patterns[i++ % patterns.size()]));
    }
}
BENCHMARK(BM_find)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16);

void BM_next_token_counts(benchmark::State & state) {
    const auto & ds       = lookup_store();
    const auto   patterns = corpus_patterns(ds, static_cast<std::size_t>(state.range(0)), 1024);
    std::size_t  i        = 0;
    for (auto _ : state) {
        const auto m = rest::find_all(ds, patterns[i++ % patterns.size()]);
        benchmark::DoNotOptimize(rest::next_token_counts(ds, m, 8));
    }
}
BENCHMARK(BM_next_token_counts)->Arg(2)->Arg(4)->Arg(8);

}  // namespace
