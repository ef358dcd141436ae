// From a parsed request to a job: render the chat template, tokenize, and check the prompt and max_tokens against
// the slot's context, as OpenAI does (400 context_length_exceeded).
#pragma once

#include "job.h"
#include "oai-request.h"

#include "rest/tokenizer.h"

#include <cstdint>

struct prompt_limits {
    std::int32_t n_ctx_slot = 0;         // positions per slot: prompt + completion must fit
    std::int32_t n_predict_default = -1;  // max_tokens when the request has none (-1: to the context end)
};

// Throws api_error (400) for a model without a chat template, an empty or too long prompt, bad token ids and
// max_tokens beyond the context.
job_input prepare_job(const completion_spec & spec, const rest::tokenizer & tok, const prompt_limits & lim);
