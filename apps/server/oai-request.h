// OpenAI request bodies (/v1/completions, /v1/chat/completions) parsed and validated into a completion_spec.
//
// Validation needs no model: it checks JSON syntax, types, ranges, and refuses what this server cannot honour
// (n > 1, echo, tools, ...) instead of silently ignoring it. Fields of OpenAI's or llama-server's that rest does not
// implement pass only at values that change nothing (foreign-fields.h); other unknown top-level fields are refused as
// OpenAI does ("Unrecognized request argument supplied"). Model-dependent checks (prompt length vs context, token ids
// vs vocabulary) happen when the prompt is tokenized (server-prompt.h).
#pragma once

#include "rest/sampler.h"
#include "rest/tokenizer.h"
#include "rest/types.h"

#include <cstdint>
#include <string>
#include <vector>

enum class api_kind {
    completion,  // POST /v1/completions
    chat,        // POST /v1/chat/completions
};

struct completion_spec {
    api_kind    kind = api_kind::completion;
    std::string model;  // as sent (any value is accepted: the server serves one model)

    // completion: prompt_text, or prompt_tokens when has_prompt_tokens; chat: messages
    std::string                     prompt_text;
    std::vector<rest::token_id>     prompt_tokens;
    bool                            has_prompt_tokens = false;
    std::vector<rest::chat_message> messages;

    std::int32_t             max_tokens = -1;  // -1: not given
    rest::sampler_params     sampling;         // OpenAI defaults: temperature 1, top_p 1, no top-k, no min-p
    std::vector<std::string> stop;
    bool                     stream        = false;
    bool                     include_usage = false;  // stream_options.include_usage
    // Log probabilities of the completion's tokens with this many alternatives each (-1: none). Completions:
    // `logprobs` (0-20); chat: `logprobs: true` with `top_logprobs` (0-20). Streamed, each chunk carries those of
    // the text it releases.
    std::int32_t             logprobs      = -1;
    // OpenAI's predicted output (`prediction: {"type": "content", "content": ...}`): its text, parts joined.
    std::string              prediction;
    bool                     has_prediction = false;

    // rest.cpp extensions
    bool         speculate     = true;   // false: plain decoding for this request
    // llama-server's cache_prompt: reuse the longest prefix of the prompt that a free slot's memory holds.
    bool         cache_prompt  = true;
    std::int32_t draft_max     = -1;     // per-request cap on draft nodes per step (-1: server default)
    bool         return_tokens = false;  // add the generated token ids to the `rest` object
    std::vector<std::string> corpora;    // `corpus`: a name or a list of names of corpora to draft from (none: all)
};

// Throws api_error (400) naming the offending field.
completion_spec parse_completion_request(const std::string & body, api_kind kind);
