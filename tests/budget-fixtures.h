// Shared by the cost-model, budget and decoder-step tests: injected cost tables (no clocks), scored drafts, and a
// fake model whose passes take a set time per (rows, threads).
#pragma once

#include "fake-model.h"
#include "decode/online-budget.h"
#include "rest/cost-model.h"

#include <chrono>
#include <functional>
#include <utility>
#include <vector>

namespace rest_test {

using namespace rest;

inline cost_table table_of(std::vector<std::int32_t> rows, std::vector<double> t, double attn = 0) {
    cost_table c;
    c.rows    = std::move(rows);
    c.t_us    = std::move(t);
    c.attn_us = attn;
    return c;
}

// A chain of n nodes whose scores decay geometrically from p (a drafter's path probabilities).
inline draft_tree chain(int n, float p, std::uint8_t src = 1) {
    draft_tree t;
    float s = 1;
    for (int i = 0; i < n; ++i) {
        s *= p;
        t.add(100 + i, i - 1, s, src);
    }
    return t;
}

// What the decoder reports after a step: n_rows rows over n_equal requests (as step_report), all but drafting in
// t_pass us, drafting in t_draft us, `tokens` emitted.
inline step_report step_of(std::int32_t n_rows, double t_pass, double t_draft = 0, std::int64_t tokens = 1,
                           bool drafted = false, std::size_t n_equal = 1, std::int32_t n_past = 10) {
    step_report r;
    r.n_rows     = n_rows;
    r.n_requests = std::max<std::size_t>(n_equal, 1);
    r.n_equal    = n_equal;
    r.n_past     = n_past;
    r.t_pass_us  = t_pass;
    r.t_draft_us = t_draft;
    r.n_tokens   = tokens;
    r.drafted    = drafted;
    return r;
}

inline online_budget_params no_exploration() {
    online_budget_params p;
    p.explore_obs = 0;
    return p;
}

inline std::int32_t choose_one(budget_policy & b, const draft_tree & t, std::int32_t n_past = 10) {
    budget_query q{&t, n_past, (std::int32_t) t.size()};
    std::int32_t n = -1;
    b.choose({&q, 1}, {&n, 1});
    return n;
}

// CPU-like: 8 rows cost ~3x one (stories260K's measured curve, in microseconds).
inline const cost_table k_cpu = table_of({1, 2, 4, 8, 16, 32, 64}, {77, 109, 146, 238, 463, 1140, 3350});
// GPU-like: flat up to 64.
inline const cost_table k_gpu = table_of({1, 2, 4, 8, 16, 32, 64}, {1000, 1001, 1002, 1004, 1008, 1016, 1030});

// stories260K, chains of 4 requests (measured): a request's second row is nearly free, unlike t(total rows).
inline cost_table with_grid() {
    cost_table c = table_of({1, 2, 4, 8}, {276, 194, 292, 529});
    c.threads    = {2, 1, 1, 1};
    c.batches    = {{2, {1, 2, 4}, {442, 305, 572}, {2, 1, 1}}, {4, {1, 2, 4}, {691, 569, 1221}, {2, 1, 2}}};
    return c;
}

// stories260K on one CPU thread, measured: 2 rows cost less than 1 (ggml's sgemm needs 2+ rows; one row takes
// per-element dot products), and a pass whose size differs from the last one rebuilds llama.cpp's graph.
inline cost_table tiny_one_thread() {
    cost_table c = table_of({1, 2, 3, 4, 6, 8}, {236, 167, 223, 296, 457, 708});
    c.rebuild_us = 195;
    return c;
}

// A fake model with CPU threads whose decode() takes a set time per (rows, threads): one thread is fast for small
// batches and slow for large ones, as ggml behaves on tiny models. It records the thread count of every decode.
class threaded_target final : public target_model {
  public:
    // cost(rows, threads): microseconds a decode takes. Default: one thread is fast up to 8 rows, slow beyond.
    explicit threaded_target(rest_test::fake_target & f, std::function<double(int, int)> cost = nullptr) :
        f_(f), cost_([c = cost ? std::move(cost) : [](int rows, int threads) {
            return threads == 1 ? (rows <= 8 ? 100.0 : 3000.0) : 600.0;
        }](std::span<const tree_request> reqs, int threads) { return c(total_rows(reqs), threads); }) {}
    // cost(requests, threads): for costs that depend on a tree's shape, not only its rows.
    threaded_target(rest_test::fake_target & f, std::function<double(std::span<const tree_request>, int)> cost) :
        f_(f), cost_(std::move(cost)) {}
    static int total_rows(std::span<const tree_request> reqs) {
        int rows = 0;
        for (const auto & r : reqs) rows += 1 + (int) r.tokens.size();
        return rows;
    }
    std::int32_t n_vocab() const override { return f_.n_vocab(); }
    std::int32_t n_slots() const override { return f_.n_slots(); }
    std::int32_t n_ctx_slot() const override { return f_.n_ctx_slot(); }
    std::int32_t n_leaves_max() const override { return f_.n_leaves_max(); }
    bool trees() const override { return f_.trees(); }
    std::int32_t n_past(std::int32_t slot) const override { return f_.n_past(slot); }
    std::int32_t n_threads() const override { return 2; }
    void set_decode_threads(std::int32_t n) override { threads_ = n > 0 ? n : 2; }
    void prefill(std::int32_t slot, std::span<const token_id> t) override { f_.prefill(slot, t); }
    decode_status decode(std::span<const tree_request> reqs) override {
        seen.emplace_back(total_rows(reqs), threads_);
        requests_seen.push_back((int) reqs.size());
        const auto   t0 = std::chrono::steady_clock::now();
        const double us = cost_(reqs, threads_);
        last_us_        = us;
        // The fake's own work counts towards the set time, so a wall clock around decode() reads it too.
        const decode_status st = f_.decode(reqs);
        while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() < us) {
        }
        return st;
    }
    std::span<const float> logits(std::int32_t r, std::int32_t node) const override { return f_.logits(r, node); }
    void commit(std::int32_t r, std::span<const std::int32_t> path) override { f_.commit(r, path); }
    void clear(std::int32_t slot) override { f_.clear(slot); }
    std::int64_t n_forward() const override { return f_.n_forward(); }
    // The set time, not the wall clock: a busy machine slows these tests but does not change what they measure.
    double last_pass_us() const override { return last_us_; }

    std::vector<std::pair<int, int>> seen;           // (rows, threads) per decode()
    std::vector<int>                 requests_seen;  // requests per decode()

  private:
    rest_test::fake_target &         f_;
    std::function<double(std::span<const tree_request>, int)> cost_;
    std::int32_t                     threads_ = 2;
    double                           last_us_ = -1;
};

}  // namespace rest_test
