// Suffix sorting of token texts (SA-IS over the token alphabet, sais.h).
//
// The builder holds each token as `sort_width` big-endian bytes; a separator is all 0xFF bytes. Suffixes are
// ordered token by token, a separator after every real token, and a suffix that runs out before its extensions.
// Only suffixes that start with a real token are kept.
//
// Memory: the text (n * w bytes) plus n + 1 int32 ranks, n / 8 bytes of types and a bucket array per vocabulary
// id: about 6.1 bytes per token for w = 2. Reach: int32 ranks, INT32_MAX - 1 tokens (see max_shard_tokens).
#pragma once

#include "rest/types.h"

#include <cstdint>
#include <span>
#include <vector>

namespace rest {

// Bytes per token used for sorting: the fewest that hold every token id below an all-0xFF separator.
int sort_width_for(std::int64_t n_vocab);

// Bytes per token on disk: 2 or 4 (the index_shard widths).
int token_width_for(std::int64_t n_vocab);

// Longest text (tokens, separators included) one sort can take (the same for every width).
std::uint64_t max_shard_tokens(int sort_width);

// Sorts the suffixes of `text` (n tokens of sort_width big-endian bytes each). `work` must hold n + 1
// int32 entries; on return work[0..result) holds, as u32 token positions, the suffixes that start with a real token
// in token order. Throws std::invalid_argument when n exceeds max_shard_tokens.
std::uint64_t sort_suffixes(const std::uint8_t * text, std::uint64_t n, int sort_width, std::int32_t * work);

// Encodes tokens (k_doc_end for a separator) as big-endian bytes of sort_width each.
void encode_sort_text(std::span<const token_id> tokens, int sort_width, std::uint8_t * out);

// The token encode_sort_text() wrote at src: k_doc_end for a separator (a negative token).
inline token_id decode_sort_token(const std::uint8_t * src, int sort_width) {
    std::uint32_t v = 0;
    for (int b = 0; b < sort_width; ++b) v = (v << 8) | src[b];
    const std::uint32_t sep = sort_width == 4 ? 0xFFFFFFFFu : (1u << (8 * sort_width)) - 1;
    return v == sep ? k_doc_end : static_cast<token_id>(v);
}

// Convenience for tests and small inputs: the suffix array of tokens (k_doc_end marks separators), built through
// the same path as the index builder.
std::vector<std::uint32_t> suffix_array(std::span<const token_id> tokens, int sort_width);

}  // namespace rest
