// Suffix sorting of token texts with libdivsufsort (which sorts bytes).
//
// Each token is written as `sort_width` big-endian bytes, so comparing two token-aligned byte suffixes compares
// their token sequences; a separator is all 0xFF bytes and so sorts after every real token, and a suffix that
// runs out sorts before its extensions. divsufsort sorts all n * sort_width byte suffixes; we keep the aligned
// ones that start with a real token and divide by the width, in place.
//
// Memory: the byte text (n * w) plus divsufsort's 32-bit SA over it (4 * n * w): 10 bytes per token for w = 2.
// Reach: divsufsort's 32-bit index limits n * w to INT32_MAX bytes (see max_shard_tokens).
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

// Longest text (tokens, separators included) one divsufsort call can sort at this sort width.
std::uint64_t max_shard_tokens(int sort_width);

// Sorts the suffixes of `text` (n tokens of sort_width big-endian bytes each). `work` must hold n * sort_width
// int32 entries; on return work[0..result) holds, as u32 token positions, the suffixes that start with a real token
// in token order. Throws std::invalid_argument when n exceeds max_shard_tokens, std::runtime_error if divsufsort
// fails.
std::uint64_t sort_suffixes(const std::uint8_t * text, std::uint64_t n, int sort_width, std::int32_t * work);

// Encodes tokens (k_doc_end for a separator) as big-endian bytes of sort_width each.
void encode_sort_text(std::span<const token_id> tokens, int sort_width, std::uint8_t * out);

// Convenience for tests and small inputs: the suffix array of tokens (k_doc_end marks separators), built through
// the same path as the index builder.
std::vector<std::uint32_t> suffix_array(std::span<const token_id> tokens, int sort_width);

}  // namespace rest
