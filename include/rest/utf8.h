// UTF-8 well-formedness, for text read from corpora and for token pieces shown to clients.
#pragma once

#include <cstddef>
#include <string_view>

namespace rest {

// Returns the byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates and code points past
// U+10FFFF are invalid), or npos when the text is valid. (Defined in src/index/corpus-reader.cpp.)
std::size_t find_invalid_utf8(std::string_view text);

}  // namespace rest
