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

// llama.cpp's built-in template names, as llama_chat_builtin_templates lists them.
std::vector<std::string> chat_template_builtin_names();

}  // namespace rest
