// Naive, obviously correct references for the datastore: suffix array by sorting suffix indices, search by linear
// scan, continuations by enumerating every match. Quadratic in places; for small inputs only.
//
// A text is a vector of token ids with k_doc_end (-1) as the document separator. Sort order: a separator sorts
// after every token; a suffix that runs out sorts before its extensions.
#pragma once

#include "rest/types.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <span>
#include <vector>

namespace rest_ref {

using rest::token_id;

// 0 = past the end, then tokens, then the separator.
inline std::uint64_t key(std::span<const token_id> text, std::uint64_t pos) {
    if (pos >= text.size()) {
        return 0;
    }
    return text[pos] < 0 ? UINT64_MAX : static_cast<std::uint64_t>(text[pos]) + 1;
}

inline bool suffix_less(std::span<const token_id> text, std::uint64_t a, std::uint64_t b) {
    for (std::uint64_t k = 0;; ++k) {
        const std::uint64_t ka = key(text, a + k), kb = key(text, b + k);
        if (ka != kb) {
            return ka < kb;
        }
        if (ka == 0) {
            return false;  // both ran out: a == b
        }
    }
}

// All suffixes in order, then those starting with a separator dropped (they sort last).
inline std::vector<std::uint32_t> suffix_array(std::span<const token_id> text) {
    std::vector<std::uint32_t> sa(text.size());
    std::iota(sa.begin(), sa.end(), 0u);
    std::sort(sa.begin(), sa.end(), [&](std::uint32_t a, std::uint32_t b) { return suffix_less(text, a, b); });
    while (!sa.empty() && text[sa.back()] < 0) {
        sa.pop_back();
    }
    return sa;
}

// True when text[pos..] starts with pattern (no separator can match: patterns hold real tokens).
inline bool starts_with(std::span<const token_id> text, std::uint64_t pos, std::span<const token_id> pattern) {
    for (std::size_t k = 0; k < pattern.size(); ++k) {
        if (pos + k >= text.size() || text[pos + k] != pattern[k] || pattern[k] < 0) {
            return false;
        }
    }
    return true;
}

// Positions where pattern occurs, ascending.
inline std::vector<std::uint64_t> occurrences(std::span<const token_id> text, std::span<const token_id> pattern) {
    std::vector<std::uint64_t> out;
    for (std::uint64_t p = 0; p < text.size(); ++p) {
        if (text[p] >= 0 && starts_with(text, p, pattern)) {
            out.push_back(p);
        }
    }
    return out;
}

// Next-token counts after every occurrence; k_doc_end for a separator or the end of the text.
inline std::map<token_id, std::uint64_t> next_counts(std::span<const token_id> text,
                                                     std::span<const token_id> pattern) {
    std::map<token_id, std::uint64_t> out;
    for (std::uint64_t p : occurrences(text, pattern)) {
        const std::uint64_t q = p + pattern.size();
        out[q < text.size() ? text[q] : rest::k_doc_end] += 1;
    }
    return out;
}

// Concatenates documents with separators between them (none after the last), as the builder lays them out.
inline std::vector<token_id> join_documents(const std::vector<std::vector<token_id>> & docs) {
    std::vector<token_id> text;
    for (const auto & d : docs) {
        if (d.empty()) {
            continue;
        }
        if (!text.empty()) {
            text.push_back(rest::k_doc_end);
        }
        text.insert(text.end(), d.begin(), d.end());
    }
    return text;
}

}  // namespace rest_ref
