// Matches of the context's own suffix inside the context (prompt + generated tokens), prompt-lookup style but
// with every occurrence kept, so that their continuations form a counted trie.
//
// Definition (what the reference in tests/ref checks): for a context c[0..L-1], the match length m is the largest
// k in [n_min, n_max] such that c[L-k..L-1] also ends at some p <= L-2 (0 when there is none); the occurrences are
// all such p (the most recent `n_occ_max` of them); occurrence p continues with c[p+1 .. min(p+width, L-1)].
//
// Index: positions bucketed by a hash of the n_min tokens ending there and of the n_max tokens ending there (for
// the capped case); both are appended in O(n_max) per token. Bucket scans verify tokens, so hash collisions only
// cost time. The match is updated lazily:
// appended tokens extend the previous occurrence set (exact while the match is below n_max and no occurrence was
// dropped by the cap); otherwise the bucket of the last tokens is scanned once.
#pragma once

#include "rest/types.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace rest {

class context_matcher {
  public:
    // With index == false the matcher only stores the tokens (no match is ever found): for drafters that do not
    // use the context source but still keep the context.
    context_matcher(int n_min, int n_max, std::size_t n_occ_max, bool index = true);

    void reset(std::span<const token_id> tokens);
    void append(std::span<const token_id> tokens);

    // Brings the match up to date with the tokens appended so far. Cheap when nothing was appended.
    void update();

    int match_len() const { return len_; }
    // Occurrence end positions, ascending. Valid until the next append/reset.
    std::span<const std::int32_t> occurrences() const { return occ_; }
    std::span<const token_id> tokens() const { return ctx_; }

    // The continuations of the occurrences as rows of `width` tokens padded with k_doc_end (for expand_rows).
    void continuation_rows(std::size_t width, std::vector<token_id> & rows) const;
    std::vector<token_id> continuation_rows(std::size_t width) const {
        std::vector<token_id> rows;
        continuation_rows(width, rows);
        return rows;
    }

  private:
    std::uint64_t hash_ending_at(std::size_t p, int n) const;
    void index_position(std::size_t p);
    void search();

    int                   n_min_;
    int                   n_max_;
    std::size_t           n_occ_max_;
    std::vector<token_id> ctx_;
    std::size_t           n_indexed_ = 0;  // positions [0, n_indexed_) are in the buckets
    std::size_t           n_seen_    = 0;  // context length the match reflects
    bool                  index_;
    // Buckets as chains: head_*[hash of the tokens ending at p] is the latest such p, prev_*[p] the one before
    // (-1 ends a chain). One allocation per new key instead of one vector per bucket.
    std::unordered_map<std::uint64_t, std::int32_t> head_min_, head_max_;
    std::vector<std::int32_t>                       prev_min_, prev_max_;
    int                       len_       = 0;
    bool                      truncated_ = false;  // occ_ holds only the most recent n_occ_max_ occurrences
    std::vector<std::int32_t> occ_;
};

}  // namespace rest
