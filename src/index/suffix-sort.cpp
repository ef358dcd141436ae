#include "suffix-sort.h"

#include <divsufsort.h>

#include <climits>
#include <memory>
#include <stdexcept>
#include <string>

namespace rest {

int sort_width_for(std::int64_t n_vocab) {
    if (n_vocab < 0xFFFF) {
        return 2;
    }
    if (n_vocab < 0xFFFFFF) {
        return 3;
    }
    return 4;
}

int token_width_for(std::int64_t n_vocab) {
    return n_vocab < 0xFFFF ? 2 : 4;
}

std::uint64_t max_shard_tokens(int sort_width) {
    return static_cast<std::uint64_t>(INT32_MAX) / static_cast<std::uint64_t>(sort_width);
}

namespace {

template <int S> bool is_separator(const std::uint8_t * p) {
    for (int i = 0; i < S; ++i) {
        if (p[i] != 0xFF) {
            return false;
        }
    }
    return true;
}

// Keeps aligned suffixes that start with a real token, dividing by the width. In place: the write index never
// passes the read index. O(n * S), sequential over work, random over text.
template <int S> std::uint64_t compact(const std::uint8_t * text, std::uint64_t n_bytes, std::int32_t * work) {
    std::uint64_t j = 0;
    for (std::uint64_t i = 0; i < n_bytes; ++i) {
        const std::uint32_t p = static_cast<std::uint32_t>(work[i]);
        if (p % S == 0 && !is_separator<S>(text + p)) {
            work[j++] = static_cast<std::int32_t>(p / S);
        }
    }
    return j;
}

}  // namespace

std::uint64_t sort_suffixes(const std::uint8_t * text, std::uint64_t n, int sort_width, std::int32_t * work) {
    if (sort_width < 2 || sort_width > 4) {
        throw std::invalid_argument("sort_suffixes: sort width must be 2, 3 or 4");
    }
    if (n > max_shard_tokens(sort_width)) {
        throw std::invalid_argument("sort_suffixes: " + std::to_string(n) + " tokens exceed one shard's reach");
    }
    if (n == 0) {
        return 0;
    }
    const std::uint64_t n_bytes = n * static_cast<std::uint64_t>(sort_width);
    if (divsufsort(text, work, static_cast<saidx_t>(n_bytes)) != 0) {
        throw std::runtime_error("divsufsort failed on " + std::to_string(n_bytes) + " bytes");
    }
    switch (sort_width) {
        case 2:  return compact<2>(text, n_bytes, work);
        case 3:  return compact<3>(text, n_bytes, work);
        default: return compact<4>(text, n_bytes, work);
    }
}

void encode_sort_text(std::span<const token_id> tokens, int sort_width, std::uint8_t * out) {
    for (const token_id t : tokens) {
        const std::uint32_t v = t < 0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(t);
        for (int b = sort_width - 1; b >= 0; --b) {
            *out++ = static_cast<std::uint8_t>(v >> (8 * b));
        }
    }
}

std::vector<std::uint32_t> suffix_array(std::span<const token_id> tokens, int sort_width) {
    const std::uint64_t n = tokens.size();
    std::vector<std::uint8_t>  text(n * sort_width);
    std::vector<std::int32_t>  work(n * sort_width);
    encode_sort_text(tokens, sort_width, text.data());
    const std::uint64_t n_sa = sort_suffixes(text.data(), n, sort_width, work.data());
    return std::vector<std::uint32_t>(work.begin(), work.begin() + static_cast<std::ptrdiff_t>(n_sa));
}

}  // namespace rest
