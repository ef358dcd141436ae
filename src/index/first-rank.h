// A binary search for a monotone predicate over ranks, shared by the suffix-array searches of the index and the
// drafter.
#pragma once

#include <cstdint>

namespace rest {

// The first index in [a, b) where a monotone predicate holds (b when none does). Before each probe m of [a, b),
// ahead(c1, c2) is told the two possible next probes (either may equal b), so it can prefetch what they read.
template <typename Pred, typename Ahead = void (*)(std::uint64_t, std::uint64_t)>
std::uint64_t first_rank(std::uint64_t a, std::uint64_t b, Pred && pred,
                         Ahead && ahead = [](std::uint64_t, std::uint64_t) {}) {
    while (a < b) {
        const std::uint64_t m = a + (b - a) / 2;
        ahead(a + (m - a) / 2, m + 1 + (b - m - 1) / 2);
        if (pred(m)) b = m; else a = m + 1;
    }
    return a;
}

}  // namespace rest
