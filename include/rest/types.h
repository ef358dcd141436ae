// Scalar types shared by every rest.cpp component. The core never includes llama.h; the adapter
// static_asserts that these match llama.cpp's own typedefs.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace rest {

using token_id = std::int32_t;  // == llama_token

// Returned by index lookups where a continuation meets the end of its document.
inline constexpr token_id k_doc_end = -1;

// Errors a user can cause (bad file, bad argument). Front ends print what() on one line and exit non-zero.
struct user_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace rest
