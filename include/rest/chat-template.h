// A conversation rendered into prompt text the way llama-server renders it: llama.cpp's `common` chat code, with
// the model's own Jinja template or one the user names. The adapter implements it (src/llama/llama-chat-template.h)
// and a loaded model makes it (model::new_chat_template); nothing here exposes llama.h.
#pragma once

#include "rest/tokenizer.h"

#include <span>
#include <string>

namespace rest {

// Which template renders chats. Both empty: the model's own (tokenizer.chat_template), or ChatML when it has none.
struct chat_template_params {
    // One of llama.cpp's built-in names (llama_chat_builtin_templates: chatml, llama3, phi3, ...). "chatml" renders
    // through Jinja, as llama-server does; the other names through llama.cpp's built-in renderer, as llama-server
    // does with --no-jinja (with Jinja on, llama-server would render the name itself as the template text).
    std::string name;
    // Jinja source, e.g. read from --chat-template-file. At most one of name and source is set.
    std::string source;
};

class chat_template {
  public:
    virtual ~chat_template() = default;

    // The prompt for `messages` with llama-server's defaults: add_generation_prompt, thinking on where the template
    // supports it, tools left out; a conversation that ends with an assistant message is continued instead of
    // answered (llama-server's prefill_assistant). The text holds no leading BOS: tokenize it with add_special and
    // parse_special. Safe to call from several threads at once. Throws user_error when the template refuses the
    // conversation (a Jinja raise_exception, two trailing assistant messages).
    virtual std::string apply(std::span<const chat_message> messages) const = 0;

    // True when the model has no template and none was given, so ChatML stands in (llama-server's fallback).
    virtual bool is_fallback() const = 0;

    // One line for start-up logs, e.g. "the model's own (Jinja)", "built-in llama3", "ChatML (fallback)".
    virtual std::string description() const = 0;
};

}  // namespace rest
