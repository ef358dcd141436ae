// POST /tokenize and POST /detokenize as llama-server has them (tools/server/README.md in llama.cpp), parsed and
// answered without the engine: both only read the vocabulary, so they run on the HTTP thread.
//
// As on the OpenAI routes, a missing required field, a wrong type, an unknown field or a token id outside the
// vocabulary is a 400 naming the field (llama-server answers a missing field with an empty result instead).
#pragma once

#include "rest/tokenizer.h"

#include <nlohmann/json.hpp>

#include <span>
#include <string>
#include <vector>

struct tokenize_request {
    // A string, or llama-server's mixed prompt: an array of strings and token ids, joined in order (only a first
    // string gets add_special's BOS).
    nlohmann::json content;
    bool add_special   = false;  // prepend BOS etc. as the model's settings say
    bool parse_special = true;   // "<|im_start|>" becomes its control token, not text
    bool with_pieces   = false;  // reply [{"id": ..., "piece": ...}] instead of bare ids
};

// Throws api_error (400) naming the field.
tokenize_request parse_tokenize_request(const std::string & body);

// The reply body {"tokens": [...]}. A piece that is not valid UTF-8 on its own (a byte of a split character) is
// given as an array of byte values, as llama-server does. Throws api_error (400, "content") for a token id
// outside the vocabulary.
nlohmann::json tokenize_reply(const rest::tokenizer & tok, const tokenize_request & req);

// The ids of a detokenize body {"tokens": [...]}. Throws api_error (400, "tokens") for anything but an array of
// ids in [0, n_vocab).
std::vector<rest::token_id> parse_detokenize_request(const std::string & body, std::int32_t n_vocab);

// The reply body {"content": ...}: the tokens' pieces joined, control tokens included (llama-server's
// tokens_to_str).
nlohmann::json detokenize_reply(const rest::tokenizer & tok, std::span<const rest::token_id> tokens);
