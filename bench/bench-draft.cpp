// A full draft step (accept one token, update the matches, count, select N = 16) on datastores of 1M, 10M and 100M
// real-code tokens, built by bench-draft-corpus (see bench/draft.cmake). Each step is timed alone; the counters
// report its p50 / p99 / p99.9 in microseconds (wall, and thread CPU time as cpu_*), plus how often the true next token is a root child of the tree
// (first-token hit rate) and the mean matched length.
//
// Data: $REST_BENCH_DRAFT_DIR (default: <build>/bench-data/draft) with draft-<N>.idx, queries.bin and
// queries-ood.bin. The queries are files fed token by token, as if the model were generating them: held-out files
// of the indexed trees (near-duplicates abound in code: long matches, cheap steps) and files of another language
// (short matches over huge ranges: the expensive steps).
#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/history-store.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace rest;

namespace {

std::string data_dir() {
    const char * env = std::getenv("REST_BENCH_DRAFT_DIR");
    return env ? env : REST_BENCH_DEFAULT_DATA "/draft";
}

std::vector<std::vector<token_id>> load_queries(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    auto          get = [&] {
        std::uint32_t v = 0;
        in.read(reinterpret_cast<char *>(&v), sizeof(v));
        return v;
    };
    std::vector<std::vector<token_id>> docs(in ? get() : 0);
    for (auto & d : docs) {
        d.resize(get());
        for (auto & t : d) {
            t = static_cast<token_id>(get());
        }
    }
    return docs;
}

struct bench_data {
    std::unique_ptr<datastore>         ds;
    std::vector<std::vector<token_id>> queries[2];  // held-out files of the same trees; other-language files
};

// Opens (once) the datastore of n tokens and touches every page of it, as a long-running server would have.
bench_data * data_for(std::int64_t n) {
    static std::map<std::int64_t, std::unique_ptr<bench_data>> cache;
    auto & slot = cache[n];
    if (!slot) {
        const std::string path = data_dir() + "/draft-" + std::to_string(n) + ".idx";
        if (!std::filesystem::exists(path)) {
            return nullptr;
        }
        slot          = std::make_unique<bench_data>();
        slot->ds      = datastore::open(path);
        slot->queries[0] = load_queries(data_dir() + "/queries.bin");
        slot->queries[1] = load_queries(data_dir() + "/queries-ood.bin");
        std::uint64_t sum = 0;
        for (const index_shard & s : slot->ds->shards()) {
            for (std::uint64_t pos = 0; pos < s.n_tokens(); pos += 1024) {
                sum += static_cast<std::uint64_t>(s.token_at(pos));
            }
            for (std::uint64_t r = 0; r < s.n_suffixes(); r += 1024) {
                sum += s.suffix(r);
            }
        }
        benchmark::DoNotOptimize(sum);
    }
    return slot.get();
}

// Thread CPU time: unlike wall time it excludes time the thread spent descheduled, which dominates the tail on a
// shared, oversubscribed machine. (The clock read itself costs a system call, included in the figure.)
double thread_cpu_s() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

constexpr std::size_t k_prompt = 64;  // tokens of a query used as its prompt

// Feeds the queries token by token. mode 0: datastore only; 1: datastore + context + history (the history store
// receives each finished query, as a server's would). chain 0: a tree of n_budget nodes (draft()); 1: the chain
// the decoder drafts for a budget of n_budget on CPUs, grown token by token (draft_chain()); 2: the same chain as
// the best path of a tree (chain_grow off, the way before).
void run_steps(benchmark::State & state, bench_data & data, int mode, int n_budget, int query_set, int chain) {
    struct {
        datastore *                              ds;
        const std::vector<std::vector<token_id>> & queries;
    } d{data.ds.get(), data.queries[query_set]};
    drafter_params p;
    p.use_context = mode == 1;
    p.use_history = mode == 1;
    p.chain_grow  = chain != 2;
    history_store hist({.n_tokens_max = 1 << 20});
    drafter       dr(d.ds, mode == 1 ? &hist : nullptr, p);
    auto          draft = [&] { return chain ? dr.draft_chain(n_budget, n_budget, INT32_MAX, 0.0f) : dr.draft(n_budget); };

    std::size_t qi = 0, pos = 0;
    auto        next_query = [&] {
        do {
            qi = (qi + 1) % d.queries.size();
        } while (d.queries[qi].size() <= k_prompt + 1);
        dr.finish();
        dr.reset({d.queries[qi].data(), k_prompt});
        pos = k_prompt;
    };
    // Warm-up: a few thousand untimed steps (caches, the history store).
    next_query();
    for (int i = 0; i < 3000; ++i) {
        if (pos >= d.queries[qi].size()) {
            next_query();
        }
        dr.accept({&d.queries[qi][pos++], 1});
        benchmark::DoNotOptimize(draft());
    }

    std::vector<double> us, cpu_us;
    us.reserve(static_cast<std::size_t>(state.max_iterations));
    cpu_us.reserve(static_cast<std::size_t>(state.max_iterations));
    std::uint64_t n_hit = 0, n_nodes = 0, match_sum = 0;
    for (auto _ : state) {
        if (pos + 1 >= d.queries[qi].size()) {
            next_query();
        }
        const double     c0   = thread_cpu_s();
        const auto       t0   = std::chrono::steady_clock::now();
        dr.accept({&d.queries[qi][pos++], 1});
        const draft_tree tree = draft();
        const auto       t1   = std::chrono::steady_clock::now();
        const double     c1   = thread_cpu_s();
        const double     s    = std::chrono::duration<double>(t1 - t0).count();
        state.SetIterationTime(s);
        us.push_back(s * 1e6);
        cpu_us.push_back((c1 - c0) * 1e6);
        const token_id truth = d.queries[qi][pos];
        for (std::size_t i = 0; i < tree.size(); ++i) {
            n_hit += tree.parents[i] < 0 && tree.tokens[i] == truth;
        }
        n_nodes += tree.size();
        match_sum += static_cast<std::uint64_t>(dr.last_stats().match_len_datastore);
    }
    std::sort(us.begin(), us.end());
    std::sort(cpu_us.begin(), cpu_us.end());
    auto pct = [](const std::vector<double> & v, double q) {
        return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
    };
    const double n = static_cast<double>(std::max<std::size_t>(us.size(), 1));
    state.counters["p50_us"]     = pct(us, 0.50);
    state.counters["p99_us"]     = pct(us, 0.99);
    state.counters["p999_us"]    = pct(us, 0.999);
    state.counters["cpu_p50_us"] = pct(cpu_us, 0.50);
    state.counters["cpu_p99_us"] = pct(cpu_us, 0.99);
    state.counters["cpu_p999_us"] = pct(cpu_us, 0.999);
    // What the two clock reads themselves cost (median of empty measurements), included in cpu_*.
    std::vector<double> empty(1000);
    for (double & e : empty) {
        const double c0 = thread_cpu_s();
        e               = (thread_cpu_s() - c0) * 1e6;
    }
    std::sort(empty.begin(), empty.end());
    state.counters["clock_us"] = empty[empty.size() / 2];
    state.counters["hit1"]       = static_cast<double>(n_hit) / n;
    state.counters["nodes"]      = static_cast<double>(n_nodes) / n;
    state.counters["match_len"]  = static_cast<double>(match_sum) / n;
}

void BM_draft_step(benchmark::State & state) {
    bench_data * d   = data_for(state.range(0));
    const int    set = static_cast<int>(state.range(3));
    if (!d || d->queries[set].empty()) {
        state.SkipWithError(("no " + data_dir() + "/draft-" + std::to_string(state.range(0)) + ".idx or " +
                             (set ? "queries-ood.bin" : "queries.bin") +
                             ": run bench-draft-corpus first (bench/draft.cmake)").c_str());
        return;
    }
    run_steps(state, *d, static_cast<int>(state.range(1)), static_cast<int>(state.range(2)), set,
              static_cast<int>(state.range(4)));
}

}  // namespace

// Args: datastore tokens, mode (0: datastore only, 1: all sources), budget N, queries (0: held-out files of the
// indexed trees, 1: files of another language), chain (0: a tree; 1: a grown chain; 2: a tree's best path).
BENCHMARK(BM_draft_step)
    ->ArgNames({"tokens", "all_sources", "N", "ood", "chain"})
    ->ArgsProduct({{1000000, 10000000, 100000000}, {0, 1}, {16}, {0, 1}, {0}})
    ->UseManualTime()
    ->Iterations(30000)
    ->Unit(benchmark::kMicrosecond);
// The chains the decoder drafts on CPUs, grown and (the way before) cut from a tree, at two budgets.
BENCHMARK(BM_draft_step)
    ->ArgNames({"tokens", "all_sources", "N", "ood", "chain"})
    ->ArgsProduct({{1000000, 10000000, 100000000}, {0, 1}, {4, 16}, {0, 1}, {1, 2}})
    ->UseManualTime()
    ->Iterations(30000)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
