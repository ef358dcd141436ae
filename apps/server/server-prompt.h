// From a parsed request to a job: render the chat template, tokenize, and check the prompt and max_tokens against
// the slot's context, as OpenAI does (400 context_length_exceeded).
#pragma once

#include "job.h"
#include "oai-request.h"

#include "rest/chat-template.h"
#include "rest/tokenizer.h"

#include <cstdint>

struct prompt_limits {
    std::int32_t n_ctx_slot = 0;         // positions per slot: prompt + completion must fit
    std::int32_t n_predict_default = -1;  // max_tokens when the request has none (-1: to the context end)
};

// The prompt text of a chat request (what POST /apply-template returns). Throws api_error (400, param "messages")
// when the template refuses the conversation.
std::string render_chat(const rest::chat_template & chat, std::span<const rest::chat_message> messages);

// Throws api_error (400) for a conversation the chat template refuses, an empty or too long prompt, bad token ids
// and max_tokens beyond the context.
job_input prepare_job(const completion_spec & spec, const rest::tokenizer & tok, const rest::chat_template & chat,
                      const prompt_limits & lim);
