// Greedy losslessness checks on real llama.cpp contexts. Batched decodes round differently from single-token
// decodes, so where plain decoding's top two logits are within k_tie_eps a flipped argmax is arithmetic, not a
// bug. These helpers generate with a sampler that records every step's top-2 gap and accept a divergence only
// at such a near-tie of the plain run, checked at the exact divergence point.
#pragma once

#include "rest/decoder.h"
#include "rest/llama-model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace rest_test {

constexpr float k_tie_eps = 1e-2f;

struct greedy_run {
    std::vector<rest::token_id> tokens;
    std::vector<float>          gaps;
    rest::generation_stats      stats;
};

inline greedy_run generate_greedy(const rest::model & m, rest::target_model & ctx, std::span<const rest::token_id> prompt,
                                  int n, rest::draft_provider * d, int n_draft_max, rest::budget_policy * policy) {
    std::vector<float>          gaps;
    rest::gap_recording_sampler s(gaps);
    rest::decoder               dec(ctx, policy);
    rest::request r;
    r.params.n_predict   = n;
    r.params.n_draft_max = d ? n_draft_max : 0;
    r.sampler            = &s;
    r.draft              = d;
    r.is_eog             = [&](rest::token_id t) { return m.is_eog(t); };
    dec.run(r, prompt);
    return {r.output, std::move(gaps), r.stats};
}

struct lossless_tally {
    int    cases = 0, exact = 0, near_ties = 0;
    long   accepted = 0, long_paths = 0;  // accepted draft tokens; steps that accepted >= 4
    double tokens = 0, forwards = 0;

    double tokens_per_forward() const { return forwards > 0 ? tokens / forwards : 0; }
};

// Fails the test unless spec equals plain, or diverges first where plain had a near-tie.
inline void expect_lossless(const greedy_run & plain, const greedy_run & spec, lossless_tally & t, const std::string & what) {
    ++t.cases;
    t.accepted += spec.stats.n_accepted;
    t.tokens += (double) spec.stats.n_tokens;
    t.forwards += (double) spec.stats.n_forward;
    for (size_t k = 4; k < spec.stats.accept_hist.size(); ++k) t.long_paths += spec.stats.accept_hist[k];
    const auto mm = std::mismatch(plain.tokens.begin(), plain.tokens.end(), spec.tokens.begin(), spec.tokens.end());
    if (mm.first == plain.tokens.end() && mm.second == spec.tokens.end()) {
        ++t.exact;
        return;
    }
    const size_t k = mm.first - plain.tokens.begin();
    ASSERT_LT(k, plain.gaps.size()) << what << ": outputs differ in length only";
    ASSERT_LT(plain.gaps[k], k_tie_eps) << what << ": divergence at token " << k << " where the plain run's top-2 gap is "
                                        << plain.gaps[k] << " (not a near-tie)";
    ++t.near_ties;
}

}  // namespace rest_test
