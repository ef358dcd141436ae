// The one strict comparison of a speculative greedy output against plain greedy decoding, used by every lossless
// test and by `rest bench`'s "output = plain" verdict.
//
// Batched verification may round a logit differently from a single-token decode, so where plain decoding's top two
// logits are within eps a flipped argmax is arithmetic, not a bug. The comparison allows exactly that and nothing
// looser: at a divergence, plain's top-2 gap must be below eps *and* the speculative token must be plain's
// runner-up there. After an allowed divergence it continues against plain decoding resumed from the speculative
// prefix, so a later bug cannot hide behind the first near-tie. Outputs that agree but differ in length fail (both
// runs stop on the same conditions, so a stop cannot explain it). Callers bound the number of allowed divergences.
#pragma once

#include "rest/target-model.h"
#include "rest/types.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace rest {

// A plain greedy run, per emitted token: the token, plain's runner-up there and the gap between the top two logits.
struct plain_trace {
    std::vector<token_id> tokens;
    std::vector<token_id> runner_up;
    std::vector<float>    gaps;
};

struct exactness_verdict {
    bool         ok = true;
    std::int32_t near_ties = 0;          // allowed divergences (each one resumed plain decoding)
    std::int32_t first_divergence = -1;  // index of the first token that differs from the first plain run (-1: none)
    float        gap_at_first = -1;      // plain's top-2 gap there (-1: none or unknown)
    std::string  why;                    // what failed, empty when ok
    bool exact() const { return ok && first_divergence < 0; }
};

// Plain greedy decoding resumed after prompt + prefix: the tokens it emits after prefix, up to the same total
// length as the original plain run, with their runner-ups and gaps.
using plain_resume = std::function<plain_trace(std::span<const token_id> prefix)>;

// A failure because one output stops where the other goes on reports first_divergence at the shorter one's end.
// Exceptions from resume propagate.
exactness_verdict compare_to_plain(const plain_trace & plain, std::span<const token_id> spec, float eps,
                                   const plain_resume & resume);

// Plain greedy decoding on ctx, resumed after `prefix` the way plain decoding computes it: the original prompt is
// processed as before and the prefix is replayed one token per single-row pass (so the logits are plain's
// arithmetic, not a batched prefill's, and a context that the original run filled is filled the same way); then
// greedy with the top-2 record, until n_predict tokens in all (< 0: until EOG or the context's end).
plain_trace resume_plain_greedy(target_model & ctx, std::span<const token_id> prompt, std::int32_t n_predict,
                                std::span<const token_id> prefix, const std::function<bool(token_id)> & is_eog);

}  // namespace rest
