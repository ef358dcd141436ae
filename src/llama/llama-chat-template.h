// rest::chat_template over llama.cpp's `common` chat code (common/chat.h), set up as llama-server sets it up
// (tools/server/server-context.cpp, load_model; server-common.cpp, oaicompat_chat_params_parse).
#pragma once

#include "llama.h"
#include "rest/chat-template.h"

#include <memory>
#include <string>
#include <vector>

namespace rest {

// Borrows `model`, which must outlive the result. Throws user_error for an unknown name or a template that does not
// parse.
std::unique_ptr<chat_template> make_llama_chat_template(const llama_model * model, const chat_template_params & params);

// For tokenizer::apply_chat_template (index building, `rest bench --chat`): `t` (from make_llama_chat_template)
// renders with add_generation_prompt = add_assistant, and a trailing assistant turn is closed like any other, not
// continued: a corpus document is a whole conversation.
std::string llama_chat_render(const chat_template & t, std::span<const chat_message> messages, bool add_assistant);

// llama.cpp's built-in template names, as llama_chat_builtin_templates lists them.
std::vector<std::string> chat_template_builtin_names();

}  // namespace rest
