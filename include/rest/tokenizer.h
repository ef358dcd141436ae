// The tokenizer seen by the core (index building, chat rendering). The llama adapter implements it;
// tests may fake it. Implementations must allow concurrent const calls from several threads.
#pragma once

#include "rest/types.h"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rest {

struct chat_message {
    std::string role;     // "system" | "user" | "assistant"
    std::string content;
};

class tokenizer {
  public:
    virtual ~tokenizer() = default;

    // add_special: prepend BOS (etc.) as the model's own settings say. parse_special: turn "<|im_start|>" etc. into
    // control tokens (wanted for chat-rendered text, unwanted for plain corpora).
    virtual std::vector<token_id> tokenize(std::string_view text, bool add_special, bool parse_special) const = 0;
    virtual std::string detokenize(std::span<const token_id> tokens) const = 0;
    virtual std::string piece(token_id t) const = 0;  // text of one token, for display
    virtual int32_t n_vocab() const = 0;
    // 64-bit hash of the tokenizer type and every token's text: indexes remember it so a wrong model is refused.
    virtual std::uint64_t fingerprint() const = 0;
    virtual std::string description() const = 0;  // e.g. "llama-spm, 32000 tokens"
    // Renders a conversation with the model's own chat template through llama.cpp's built-in matcher
    // (llama_chat_apply_template), for index building and `rest bench --chat`. Throws user_error if the model has
    // none. The server renders through llama.cpp's Jinja code instead (rest/chat-template.h).
    virtual std::string apply_chat_template(std::span<const chat_message> messages, bool add_assistant) const = 0;
};

}  // namespace rest
