// Token selection from one row of logits. Greedy is an argmax in the core; everything else is llama.cpp's
// sampler chain behind the adapter (see llama-model.h), never a hand-written sampler.
#pragma once

#include "rest/types.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace rest {

struct sampler_params {
    float         temp             = 0.0f;   // <= 0: greedy (argmax)
    std::int32_t  top_k            = 40;     // <= 0: off
    float         top_p            = 0.95f;  // >= 1: off
    float         min_p            = 0.05f;  // <= 0: off
    float         repeat_penalty   = 1.0f;   // 1: off
    std::int32_t  repeat_last_n    = 64;     // tokens the penalties look back over
    float         presence_penalty = 0.0f;
    float         frequency_penalty = 0.0f;
    std::uint32_t seed             = 0xFFFFFFFFu;  // 0xFFFFFFFF: random

    bool penalized() const { return repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f; }
    // The argmax of the raw logits. A temperature of 0 with penalties is the argmax of the penalized logits, as in
    // llama.cpp's sampler chain (penalties come first): llama.cpp's chain, not greedy().
    bool greedy() const { return temp <= 0.0f && !penalized(); }
};

// Throws user_error naming the first value no sampler can use (NaN, a non-positive top-p or repeat penalty, ...).
// The CLI checks its options so before it loads anything, and llama.cpp models' new_sampler() checks again.
void check_sampler_params(const sampler_params & p);

class token_sampler {
  public:
    virtual ~token_sampler() = default;
    // Draws a token from the distribution the chain derives from these logits. Consumes randomness.
    virtual token_id sample(std::span<const float> logits) = 0;
    // Records t in the penalty state: every prompt token, then each emitted token, in order.
    virtual void accept(token_id t) = 0;
    virtual bool is_greedy() const = 0;
};

// First index of the largest logit (ties go to the lowest id, as llama.cpp's greedy sampler does).
token_id argmax(std::span<const float> logits);

// Greedy sampling that also records each step's gap between the two largest logits, so a divergence from plain
// decoding can be told apart from a float near-tie (batched decodes round differently from single-token ones).
// Picks the same token as argmax; also records the runner-up when given a vector for it (the strict comparison in
// rest/exactness.h needs both). The caller owns the vectors, which must outlive the sampler.
class gap_recording_sampler final : public token_sampler {
  public:
    explicit gap_recording_sampler(std::vector<float> & gaps, std::vector<token_id> * runner_up = nullptr)
        : gaps_(gaps), runner_up_(runner_up) {}
    token_id sample(std::span<const float> logits) override;
    void accept(token_id) override {}
    bool is_greedy() const override { return true; }

  private:
    std::vector<float> &    gaps_;
    std::vector<token_id> * runner_up_;
};

class greedy_sampler final : public token_sampler {
  public:
    token_id sample(std::span<const float> logits) override { return argmax(logits); }
    void accept(token_id) override {}
    bool is_greedy() const override { return true; }
};

}  // namespace rest
