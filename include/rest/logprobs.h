// Log probabilities of emitted tokens, as OpenAI-style APIs return them: the model's own distribution at each
// position (log-softmax of its logits, before temperature or any other sampling transform, as vLLM reports them).
#pragma once

#include "rest/types.h"

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace rest {

struct token_logprobs {
    token_id                               token   = 0;
    float                                  logprob = 0;
    std::vector<std::pair<token_id, float>> top;  // the n_top most likely tokens, most likely first (ties: lower id)
};

// log_softmax(logits)[token], and the n_top most likely tokens. O(n_vocab).
token_logprobs logprobs_of(std::span<const float> logits, token_id token, std::int32_t n_top);

}  // namespace rest
