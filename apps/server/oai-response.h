// OpenAI response bodies: whole completions, stream chunks (Server-Sent Events), usage, errors, and the `rest`
// object that shows what speculation did for the request.
#pragma once

#include "api-error.h"
#include "job.h"
#include "oai-request.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

struct response_meta {
    api_kind     kind = api_kind::completion;
    std::string  id;       // "cmpl-..." or "chatcmpl-..."
    std::int64_t created = 0;
    std::string  model;
    bool         return_tokens = false;
    std::int32_t logprobs      = -1;  // >= 0: the choice carries log probabilities (completion_spec::logprobs)
};

// A fresh response id with the kind's prefix.
std::string new_response_id(api_kind kind);

nlohmann::json error_json(const api_error & e);
nlohmann::json usage_json(const job_output & out);
nlohmann::json rest_json(const job_output & out, bool return_tokens);
// choice.logprobs in the kind's format: completions {tokens, token_logprobs, top_logprobs, text_offset}; chat
// {content: [{token, logprob, bytes, top_logprobs}]}. text_offset: where the first token's piece starts in the
// completion (a stream chunk's offsets count from the start of the whole completion, as OpenAI's do).
nlohmann::json logprobs_json(api_kind kind, const std::vector<position_logprobs> & lps, std::size_t text_offset = 0);

// The whole (non-streamed) response.
nlohmann::json completion_json(const response_meta & m, const std::string & text, const job_output & out);

// One stream chunk. finish_reason null: more follows; chat chunks with role set open the assistant message.
// logprobs: the chunk's choice.logprobs (logprobs_json of the tokens its text releases), null without.
nlohmann::json chunk_json(const response_meta & m, const std::string & text, const char * finish_reason,
                          bool with_role = false, const nlohmann::json & logprobs = nullptr);
// The last chunk: an empty delta with the finish reason, plus usage and rest.
nlohmann::json final_chunk_json(const response_meta & m, const job_output & out);
// stream_options.include_usage: a chunk with no choices that carries the usage.
nlohmann::json usage_chunk_json(const response_meta & m, const job_output & out);

// Serializes without ever throwing: invalid UTF-8 (a generation cut inside a character) becomes U+FFFD.
std::string dump_json(const nlohmann::json & j);
// "data: <json>\n\n"
std::string sse_event(const nlohmann::json & j);
