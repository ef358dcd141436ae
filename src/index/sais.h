// SA-IS suffix sorting over an integer alphabet (Nong, Zhang and Chan, "Two Efficient Algorithms for Linear Time
// Suffix Array Construction", 2011), written for token texts.
//
// Why our own: Debian's libdivsufsort sorts bytes, so a 16-bit token text is sorted as 2n byte suffixes with a
// 32-bit rank each: 2n + 8n = 10 bytes per token at the peak (15 for a 3-byte vocabulary), and the odd suffixes
// are thrown away afterwards. Sorting tokens directly needs the text plus n + 1 ranks, the L/S type bits and the
// bucket arrays: about 6.1 bytes per token, which is what lets a 10 bytes-per-token build budget hold. Debian
// packages no integer-alphabet suffix sorter (sdsl's is Larsson-Sadakane, two words per token).
//
// The reduced problems live inside the suffix array itself, as in the paper: names are written to the upper
// half, the reduced text is moved to the top n1 entries and sorted into the bottom n1 (n1 <= n / 2).
#pragma once

#include <cstdint>
#include <vector>

namespace rest::sais {

// L/S types, one bit per position (S = 1).
class type_bits {
public:
    explicit type_bits(std::int32_t n) : w_(static_cast<std::size_t>(n) / 64 + 1, 0) {}
    bool get(std::int32_t i) const { return (w_[static_cast<std::size_t>(i) >> 6] >> (i & 63)) & 1u; }
    void set(std::int32_t i, bool s) {
        const std::uint64_t m = std::uint64_t{1} << (i & 63);
        auto &              w = w_[static_cast<std::size_t>(i) >> 6];
        w                     = s ? (w | m) : (w & ~m);
    }
    bool is_lms(std::int32_t i) const { return i > 0 && get(i) && !get(i - 1); }

private:
    std::vector<std::uint64_t> w_;
};

// The characters of a reduced problem, stored in the suffix array's upper part.
struct int_chars {
    const std::int32_t * s;
    std::int32_t         operator()(std::int32_t i) const { return s[i]; }
};

// bkt[c] = first (end = false) or one past the last (end = true) rank of character c's bucket.
template <class Chars>
void buckets(const Chars & s, std::int32_t n, std::vector<std::int32_t> & bkt, bool end) {
    std::fill(bkt.begin(), bkt.end(), 0);
    for (std::int32_t i = 0; i < n; ++i) {
        ++bkt[static_cast<std::size_t>(s(i))];
    }
    std::int32_t sum = 0;
    for (auto & b : bkt) {
        sum += b;
        b = end ? sum : sum - b;
    }
}

// Induces L-type suffixes from the sorted ones left to right, then S-type ones right to left.
template <class Chars>
void induce(const Chars & s, const type_bits & t, std::int32_t * sa, std::int32_t n, std::vector<std::int32_t> & bkt) {
    buckets(s, n, bkt, false);
    for (std::int32_t i = 0; i < n; ++i) {
        if (sa[i] > 0 && !t.get(sa[i] - 1)) {
            const std::int32_t j = sa[i] - 1;
            sa[bkt[static_cast<std::size_t>(s(j))]++] = j;
        }
    }
    buckets(s, n, bkt, true);
    for (std::int32_t i = n - 1; i >= 0; --i) {
        if (sa[i] > 0 && t.get(sa[i] - 1)) {
            const std::int32_t j = sa[i] - 1;
            sa[--bkt[static_cast<std::size_t>(s(j))]] = j;
        }
    }
}

// Sorts the n suffixes of s (characters in [0, k]; s(n - 1) = 0 is the unique sentinel) into sa[0..n).
template <class Chars> void sort(const Chars & s, std::int32_t * sa, std::int32_t n, std::int32_t k) {
    if (n == 1) {
        sa[0] = 0;
        return;
    }
    type_bits t(n);
    t.set(n - 1, true);
    t.set(n - 2, false);
    for (std::int32_t i = n - 3; i >= 0; --i) {
        const std::int32_t a = s(i), b = s(i + 1);
        t.set(i, a < b || (a == b && t.get(i + 1)));
    }

    // Stage 1: sort the LMS substrings by induction from their bucket ends.
    {
        std::vector<std::int32_t> bkt(static_cast<std::size_t>(k) + 1);
        buckets(s, n, bkt, true);
        std::fill(sa, sa + n, -1);
        for (std::int32_t i = 1; i < n; ++i) {
            if (t.is_lms(i)) {
                sa[--bkt[static_cast<std::size_t>(s(i))]] = i;
            }
        }
        induce(s, t, sa, n, bkt);
    }
    std::int32_t n1 = 0;
    for (std::int32_t i = 0; i < n; ++i) {
        if (t.is_lms(sa[i])) {
            sa[n1++] = sa[i];
        }
    }

    // Name the LMS substrings (equal substrings share a name); names go to sa[n1 + pos / 2], which no two LMS
    // positions share since they are at least two apart.
    std::fill(sa + n1, sa + n, -1);
    std::int32_t name = 0, prev = -1;
    for (std::int32_t i = 0; i < n1; ++i) {
        const std::int32_t pos  = sa[i];
        bool               diff = prev < 0;
        for (std::int32_t d = 0; !diff; ++d) {
            if (s(pos + d) != s(prev + d) || t.get(pos + d) != t.get(prev + d)) {
                diff = true;
            } else if (d > 0 && (t.is_lms(pos + d) || t.is_lms(prev + d))) {
                break;
            }
        }
        if (diff) {
            ++name;
            prev = pos;
        }
        sa[n1 + pos / 2] = name - 1;
    }
    for (std::int32_t i = n - 1, j = n - 1; i >= n1; --i) {
        if (sa[i] >= 0) {
            sa[j--] = sa[i];
        }
    }

    // Stage 2: the order of the LMS suffixes, recursively while names repeat.
    std::int32_t * sa1 = sa;
    std::int32_t * s1  = sa + n - n1;
    if (name < n1) {
        sort(int_chars{s1}, sa1, n1, name - 1);
    } else {
        for (std::int32_t i = 0; i < n1; ++i) {
            sa1[s1[i]] = i;
        }
    }

    // Stage 3: place the sorted LMS suffixes at their bucket ends and induce the rest.
    std::vector<std::int32_t> bkt(static_cast<std::size_t>(k) + 1);
    buckets(s, n, bkt, true);
    for (std::int32_t i = 1, j = 0; i < n; ++i) {
        if (t.is_lms(i)) {
            s1[j++] = i;
        }
    }
    for (std::int32_t i = 0; i < n1; ++i) {
        sa1[i] = s1[sa1[i]];
    }
    std::fill(sa + n1, sa + n, -1);
    for (std::int32_t i = n1 - 1; i >= 0; --i) {
        const std::int32_t j = sa[i];
        sa[i]                = -1;
        sa[--bkt[static_cast<std::size_t>(s(j))]] = j;
    }
    induce(s, t, sa, n, bkt);
}

}  // namespace rest::sais
