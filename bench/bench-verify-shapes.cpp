// Verify cost by batch shape on a real model: a forward pass of R rows when every step has the same shape (llama.cpp
// reuses its compute graph) against steps whose shape alternates (it rebuilds the graph each time). On tiny models
// the rebuild costs as much as the compute, which is why the budget policy keeps shapes steady.
//   bench-verify-shapes [--benchmark_filter=...]      model: $REST_BENCH_MODEL, else ../shared/data's stories260K
#include "rest/llama-model.h"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

namespace {

std::string model_path() {
    if (const char * m = std::getenv("REST_BENCH_MODEL")) return m;
    return std::string(REST_SOURCE_DIR) + "/../shared/data/models/stories260K.gguf";
}

struct fixture {
    std::unique_ptr<rest::model>        model;
    std::unique_ptr<rest::target_model> ctx;
};

fixture & get(bool trees, int flash_attn, int threads) {
    static fixture f[2][2][2];
    fixture & x = f[trees][flash_attn][threads - 1];
    if (!x.model) {
        rest::llama_log_quiet();
        x.model = rest::model::load(model_path());
        rest::context_params cp;
        cp.n_ctx     = 512;
        cp.n_threads = threads;
        cp.trees      = trees;
        cp.flash_attn = flash_attn;
        x.ctx        = x.model->new_context(cp);
    }
    return x;
}

// One step of `rows` rows (root + a chain, or with leaves > 1 that many root children, the chain under the first),
// committing only the root; the context is reset when it fills.
void step(rest::target_model & m, std::int32_t rows, std::int32_t leaves = 1) {
    if (m.n_past(0) + rows + 2 > 256) m.clear(0);
    if (m.n_past(0) == 0) {
        const std::vector<rest::token_id> p = {1, 2, 3, 4, 5, 6, 7, 8};
        m.prefill(0, p);
    }
    std::vector<rest::token_id> toks(rows - 1, 42);
    std::vector<std::int32_t>   parents(rows - 1), depths(rows - 1);
    for (std::int32_t i = 0; i + 1 < rows; ++i) {
        parents[i] = i < leaves ? -1 : i == leaves ? 0 : i - 1;
        depths[i]  = parents[i] < 0 ? 1 : depths[parents[i]] + 1;
        toks[i]    = 42 + (i < leaves ? i : 0);  // siblings differ
    }
    rest::tree_request r;
    r.slot = 0;
    r.root = 7;
    r.tokens = toks;
    r.parents = parents;
    r.depths = depths;
    m.decode({&r, 1});
    m.commit(0, {});
}

// state.range(0): rows; range(1): 1 = alternate with a one-row step (timed together, reported per pass); range(2):
// 1 = tree layout; range(3): flash attention (0 off, 1 on); range(4): threads (1 or 2: on tiny models one thread
// can beat two, since every graph node ends in a barrier).
void BM_verify(benchmark::State & state) {
    if (!std::filesystem::exists(model_path())) {
        state.SkipWithError("no model (set REST_BENCH_MODEL)");
        return;
    }
    rest::target_model & m = *get(state.range(2) != 0, (int) state.range(3), (int) state.range(4)).ctx;
    const auto rows = (std::int32_t) state.range(0);
    const bool alternate = state.range(1) != 0;
    for (auto _ : state) {
        step(m, rows);
        if (alternate) step(m, rows == 1 ? 2 : 1);
    }
    state.counters["passes"] = benchmark::Counter((double) state.iterations() * (alternate ? 2 : 1),
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

// Tree layout, the same row count every pass, alternating between a chain (one leaf) and two siblings (two leaves):
// whether a change of the tree's shape at equal rows costs a graph rebuild too. range(0): rows; range(1): 1 =
// alternate, 0 = always the chain.
void BM_tree_topology(benchmark::State & state) {
    if (!std::filesystem::exists(model_path())) {
        state.SkipWithError("no model (set REST_BENCH_MODEL)");
        return;
    }
    rest::target_model & m = *get(true, 0, 2).ctx;
    const auto rows = (std::int32_t) state.range(0);
    for (auto _ : state) {
        step(m, rows, 1);
        step(m, rows, state.range(1) ? 2 : 1);
    }
    state.counters["passes"] = benchmark::Counter((double) state.iterations() * 2,
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_tree_topology)->ArgNames({"rows", "alternate"})->ArgsProduct({{3, 4, 6}, {0, 1}})->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_verify)->ArgNames({"rows", "alternate", "trees", "fa", "threads"})
    ->ArgsProduct({{1, 2, 3, 4, 5, 6, 8}, {0, 1}, {0, 1}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
