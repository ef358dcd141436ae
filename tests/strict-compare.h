// Greedy losslessness checks on real llama.cpp contexts, through the one strict comparison (rest/exactness.h): a
// speculative output may leave plain's only at a near-tie of plain (top-2 gap < k_tie_eps) to plain's runner-up, and
// is then compared with plain decoding resumed from its own prefix. Callers bound the count of such near-ties.
#pragma once

#include "rest/decoder.h"
#include "rest/exactness.h"
#include "rest/llama-model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace rest_test {

constexpr float k_tie_eps = 1e-2f;

struct greedy_run {
    std::vector<rest::token_id> tokens;
    std::vector<float>          gaps;
    std::vector<rest::token_id> runner_up;
    rest::generation_stats      stats;

    rest::plain_trace trace() const { return {tokens, runner_up, gaps}; }
};

inline greedy_run generate_greedy(const rest::model & m, rest::target_model & ctx, std::span<const rest::token_id> prompt,
                                  int n, rest::draft_provider * d, int n_draft_max, rest::budget_policy * policy,
                                  std::int32_t slot = 0) {
    greedy_run                  out;
    rest::gap_recording_sampler s(out.gaps, &out.runner_up);
    rest::decoder               dec(ctx, policy);
    rest::request r;
    r.slot               = slot;
    r.params.n_predict   = n;
    r.params.n_draft_max = d ? n_draft_max : 0;
    r.sampler            = &s;
    r.draft              = d;
    r.is_eog             = [&](rest::token_id t) { return m.is_eog(t); };
    dec.run(r, prompt);
    out.tokens = std::move(r.output);
    out.stats  = r.stats;
    return out;
}

// Plain greedy decoding on ctx resumed after prefix, for the run of n tokens after prompt (rest/exactness.h).
inline rest::plain_resume resume_plain(const rest::model & m, rest::target_model & ctx,
                                       std::span<const rest::token_id> prompt, int n) {
    std::vector<rest::token_id> p(prompt.begin(), prompt.end());
    return [&m, &ctx, p, n](std::span<const rest::token_id> prefix) {
        return rest::resume_plain_greedy(ctx, p, n, prefix, [&m](rest::token_id t) { return m.is_eog(t); });
    };
}

struct lossless_tally {
    int    cases = 0, exact = 0, near_ties = 0;
    long   accepted = 0, long_paths = 0;  // accepted draft tokens; steps that accepted >= 4
    double tokens = 0, forwards = 0;

    double tokens_per_forward() const { return forwards > 0 ? tokens / forwards : 0; }
};

// Fails the test unless spec passes the strict comparison with plain; counts the near-ties it allowed.
inline void expect_lossless(const greedy_run & plain, const greedy_run & spec, lossless_tally & t, const std::string & what,
                            const rest::plain_resume & resume) {
    ++t.cases;
    t.accepted += spec.stats.n_accepted;
    t.tokens += (double) spec.stats.n_tokens;
    t.forwards += (double) spec.stats.n_forward;
    for (size_t k = 4; k < spec.stats.accept_hist.size(); ++k) t.long_paths += spec.stats.accept_hist[k];
    const rest::exactness_verdict v = rest::compare_to_plain(plain.trace(), spec.tokens, k_tie_eps, resume);
    ASSERT_TRUE(v.ok) << what << ": " << v.why;
    t.exact += v.exact();
    t.near_ties += v.near_ties;
}

// F32/F16 weights: matrix-vector and matrix-matrix kernels round differently, so a few near-ties are arithmetic.
// Lossless suites on them allow at most this many near-ties per case (stories260K, 106 prompts: 6-7 measured);
// quantized models allow 0.
constexpr double k_float_near_tie_fraction = 0.10;

inline void expect_near_ties_at_most(const lossless_tally & t, double fraction_of_cases, const std::string & what) {
    const int bound = (int) std::ceil(fraction_of_cases * t.cases);
    std::printf("%s: %d near-tie divergence(s) in %d cases (bound %d), %d identical\n", what.c_str(), t.near_ties,
                t.cases, bound, t.exact);
    EXPECT_LE(t.near_ties, bound) << what << ": more near-ties than float rounding explains";
}

}  // namespace rest_test
