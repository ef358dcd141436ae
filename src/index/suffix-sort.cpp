#include "suffix-sort.h"

#include "sais.h"

#include <algorithm>
#include <climits>
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

std::uint64_t max_shard_tokens(int /*sort_width*/) {
    return static_cast<std::uint64_t>(INT32_MAX) - 1;  // plus the sentinel, ranks fit an int32
}

namespace {

template <int S> std::uint32_t decode(const std::uint8_t * p) {
    std::uint32_t v = 0;
    for (int b = 0; b < S; ++b) {
        v = (v << 8) | p[b];
    }
    return v;
}

template <int S> constexpr std::uint32_t k_separator = S == 4 ? 0xFFFFFFFFu : (1u << (8 * S)) - 1;

// The sort text as SA-IS sees it: n tokens then the sentinel 0; token v is v + 1 (or its rank + 1 among the
// distinct ids when ids are sparse), and a separator is the largest character, so it sorts after every token.
template <int S, bool Ranked> struct token_chars {
    const std::uint8_t *               text;
    std::int32_t                       n;
    std::int32_t                       sep;
    const std::vector<std::uint32_t> * ids;  // Ranked: the sorted distinct token ids

    std::int32_t operator()(std::int32_t i) const {
        if (i == n) {
            return 0;
        }
        const std::uint32_t v = decode<S>(text + static_cast<std::size_t>(i) * S);
        if (v == k_separator<S>) {
            return sep;
        }
        if constexpr (Ranked) {
            return static_cast<std::int32_t>(std::lower_bound(ids->begin(), ids->end(), v) - ids->begin()) + 1;
        } else {
            return static_cast<std::int32_t>(v) + 1;
        }
    }
};

template <int S> std::uint64_t sort_width_s(const std::uint8_t * text, std::uint64_t n, std::int32_t * sa) {
    const auto     ni    = static_cast<std::int32_t>(n);
    std::uint32_t  max_v = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint32_t v = decode<S>(text + i * S);
        if (v != k_separator<S>) {
            max_v = std::max(max_v, v);
        }
    }
    // Dense ids keep the alphabet at the vocabulary (a bucket array of 4 bytes per id); sparse ids (a vocabulary
    // above 2^20 on a small text) are ranked so that the bucket array stays proportional to the text.
    if (max_v < std::max<std::uint64_t>(1u << 20, n)) {
        const auto sep = static_cast<std::int32_t>(max_v) + 2;
        sais::sort(token_chars<S, false>{text, ni, sep, nullptr}, sa, ni + 1, sep);
    } else {
        std::vector<std::uint32_t> ids;
        for (std::uint64_t i = 0; i < n; ++i) {
            const std::uint32_t v = decode<S>(text + i * S);
            if (v != k_separator<S>) {
                ids.push_back(v);
            }
        }
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        const auto sep = static_cast<std::int32_t>(ids.size()) + 1;
        sais::sort(token_chars<S, true>{text, ni, sep, &ids}, sa, ni + 1, sep);
    }
    // Keep the suffixes that start with a real token (the sentinel's is first, separators' are last), in place.
    std::uint64_t j = 0;
    for (std::uint64_t i = 0; i <= n; ++i) {
        const auto p = static_cast<std::uint64_t>(sa[i]);
        if (p < n && decode<S>(text + p * S) != k_separator<S>) {
            sa[j++] = static_cast<std::int32_t>(p);
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
    switch (sort_width) {
        case 2:  return sort_width_s<2>(text, n, work);
        case 3:  return sort_width_s<3>(text, n, work);
        default: return sort_width_s<4>(text, n, work);
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
    std::vector<std::int32_t>  work(n + 1);
    encode_sort_text(tokens, sort_width, text.data());
    const std::uint64_t n_sa = sort_suffixes(text.data(), n, sort_width, work.data());
    return std::vector<std::uint32_t>(work.begin(), work.begin() + static_cast<std::ptrdiff_t>(n_sa));
}

}  // namespace rest
