// Matches of the context's own suffix inside the context (prompt + generated tokens), prompt-lookup style but
// with every occurrence kept, so that their continuations form a counted trie.
//
// Definition (what the reference in tests/ref checks): for a context c[0..L-1], the match length m is the largest
// k in [n_min, n_max] such that c[L-k..L-1] also ends at some p <= L-2 (0 when there is none); the occurrences are
// all such p, of which the most recent n_occ_max are kept; occurrence p continues with c[p+1 .. min(p+width, L-1)].
//
// Index: for every length k in [n_min, n_max], the positions p are chained by a hash of the k tokens ending at p
// (a hash table holds the latest p per (k, hash), prev_ links each p to the previous one), so a chain lists the
// candidates of one length newest first. Appending a token costs O(n_max). A search is a binary search on k
// (occurrence is monotone in k; each probe walks a chain to its first verified candidate), then a walk of the
// longest length's chain that stops after n_occ_max + 1 verified candidates: O(log n_max + n_occ_max * n_max),
// whatever the context length. Candidates are always compared token by token, so hash collisions cost time only.
// Between searches, appended tokens extend the previous occurrence set (exact while the match is below n_max and
// no occurrence was dropped by the cap).
#pragma once

#include "rest/types.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rest {

class context_matcher {
  public:
    // With index == false the matcher only stores the tokens (no match is ever found): for drafters that do not
    // use the context source but still keep the context.
    context_matcher(int n_min, int n_max, std::size_t n_occ_max, bool index = true);

    void reset(std::span<const token_id> tokens);
    void append(std::span<const token_id> tokens);
    // Room for a context of n_tokens without growing: a table that doubles mid-request takes fresh pages while
    // decoding (30 page faults, 0.55 ms of a 17 ms stories260K generation in a fresh process on a Zen 5 VM).
    void reserve(std::size_t n_tokens);
    std::size_t table_slots() const { return keys_.size(); }  // the hash table's size (tests: it does not grow)

    // Brings the match up to date with the tokens appended so far. Cheap when nothing was appended.
    void update();

    int match_len() const { return len_; }
    // Occurrence end positions, ascending. Valid until the next append/reset.
    std::span<const std::int32_t> occurrences() const { return occ_; }
    std::span<const token_id> tokens() const { return ctx_; }

    // Occurrences of an arbitrary pattern of k tokens, k in [n_min, n_max] (as the match's, but for a text that need
    // not end the context: a chain drafted past it): the most recent n_occ_max end positions p, ascending, with
    // c[p-k+1..p] == pattern and p <= L-2 (so c[p+1], the continuation, exists). Returns false when more were cut.
    // O(chain walk + n_occ_max * k); valid until the next append/reset.
    bool find(std::span<const token_id> pattern, std::vector<std::int32_t> & occ) const;
    // The largest k in [n_min, min(n_max, |text|)] whose last-k-token pattern of text find()s an occurrence; 0: none.
    int longest(std::span<const token_id> text) const;
    int n_min() const { return n_min_; }
    int n_max() const { return n_max_; }
    std::size_t n_occ_max() const { return n_occ_max_; }

    // The continuations of the occurrences as rows of `width` tokens padded with k_doc_end (for expand_rows).
    void continuation_rows(std::size_t width, std::vector<token_id> & rows) const;
    std::vector<token_id> continuation_rows(std::size_t width) const {
        std::vector<token_id> rows;
        continuation_rows(width, rows);
        return rows;
    }

  private:
    std::uint64_t key_ending_at(std::size_t p, int k) const;  // never 0 (the table's empty marker)
    std::int32_t  head(std::uint64_t key) const;              // latest position with this key, or -1
    void          set_head(std::uint64_t key, std::int32_t p);
    void          rehash(std::size_t n_slots);  // n_slots: a power of two that holds every key at most half full
    void          index_position(std::size_t p);
    bool          same_suffix(std::size_t p, int k) const;    // c[p-k+1..p] == the last k tokens
    std::int32_t  first_verified(int k, std::int32_t from, std::size_t n) const;
    std::uint64_t key_of(std::span<const token_id> pattern) const;  // key_ending_at() of a pattern
    std::int32_t  next_pattern(std::span<const token_id> pattern, std::int32_t from) const;  // first_verified() of one
    void          search();

    int                   n_min_;
    int                   n_max_;
    std::size_t           n_occ_max_;
    bool                  index_;
    std::vector<token_id> ctx_;
    std::size_t           n_indexed_ = 0;  // positions [0, n_indexed_) are chained
    std::size_t           n_seen_    = 0;  // context length the match reflects

    // Open addressing (linear probing, power-of-two size, at most half full): key -> latest position.
    std::vector<std::uint64_t> keys_;
    std::vector<std::int32_t>  heads_;
    std::size_t                n_keys_ = 0;
    std::vector<std::int32_t>  prev_;  // [p * n_lengths + (k - n_min)]: previous position of p's chain for length k

    int                       len_       = 0;
    bool                      truncated_ = false;  // occ_ holds only the most recent n_occ_max_ occurrences
    std::vector<std::int32_t> occ_;
};

}  // namespace rest
