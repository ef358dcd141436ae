// Private helpers shared by the adapter's files.
#pragma once

#include "llama.h"
#include "rest/types.h"

#include <string>
#include <type_traits>

static_assert(std::is_same_v<rest::token_id, llama_token>, "rest::token_id must be llama_token");

namespace rest {

// llama_backend_init() exactly once per process, and the quiet log callback installed.
void llama_ensure_backend();

// Checks that `path` names a readable file that starts with the GGUF magic, so a bad path gets a clear one-line
// error before llama.cpp logs its own multi-line story. Throws user_error.
void llama_check_gguf_file(const std::string & path);

// The last error llama.cpp logged (its loaders report failures through the log, not return values).
std::string llama_last_error();

}  // namespace rest
