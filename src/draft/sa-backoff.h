// Next-token estimates of a suffix-array source that back off over suffix lengths, for chains grown token by token
// (drafter::draft_chain).
//
// The longest context suffix that occurs (L tokens, C_L occurrences) is REST's match; when it occurs only a few
// times its continuation counts say little, while a shorter suffix occurs more often and says more. So the
// estimate mixes levels: suffix lengths k_0 = L, k_{j+1} = max(n_min, floor(k_j / 2)) (distinct, decreasing), from
// the longest down to the first level with at least n_confident occurrences or n_levels_max levels, whichever
// comes first. With c_k(t) the occurrences of the k-suffix followed by token t and C_k all its occurrences,
//     P_k(t) = (c_k(t) + alpha * P_{k'}(t)) / (C_k + alpha),   k' the next shorter level, P below the last = 0,
// and the estimate is P_{k_0}(t): an interpolated (Dirichlet-prior) estimate whose prior is the shorter context's.
// With a confident longest match (C_L >= n_confident) it is c_L(t) / (C_L + alpha), the tree's score with exact
// counts (the tree samples a match of more than scan_max occurrences; these counts are always exact).
// Candidates for the next token: the most frequent continuation of each level (ties: the smaller token id); above
// scan_max occurrences, the most frequent in the tree's even sample of scan_max of them.
// Occurrences are summed over shards (a shard where the longest match is shorter contributes nothing to level 0).
//
// Along a chain the levels are chosen where the longest match was last searched for (set()); after that every
// chain token extends each level (advance(): a level of k tokens becomes one of k + 1, its occurrences those
// followed by the token; no search, no cap at n_max), levels left without occurrences are dropped, and level 0 is
// the longest one left. Only when none is left is the longest match searched for again and the levels chosen anew.
// So a chain keeps the longest context that still occurs among those it had, at the cost of a narrowing per level
// and token; a search (a binary search on the length, each probe a suffix-array search) only where all died.
#pragma once

#include "sa-search.h"
#include "tree-expand.h"

#include "rest/index-shard.h"

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace rest {

struct backoff_params {
    int           n_min        = 2;     // shortest suffix used
    double        alpha        = 1.0;   // weight of the shorter level's estimate (the tree's count smoothing)
    std::uint64_t n_confident  = 8;     // a level with this many occurrences ends the back-off
    int           n_levels_max = 4;     // most levels, the longest included (1: no back-off)
    std::uint64_t scan_max     = 64;    // as expand_params (finding a level's most frequent continuation)
};

class sa_backoff {
  public:
    // Levels for the end of `text`, whose longest match over the shards is `len` tokens (>= n_min), with the ranges
    // of that match per shard in `matches` (a shard's match counts only where its length equals len). memos: one
    // per shard (may be empty). Clears the levels when len < n_min.
    void set(std::span<const index_shard> shards, std::span<const sa_match> matches, int len,
             std::span<const token_id> text, const backoff_params & p, std::span<sa_bigram_memo> memos);
    // The text grew by t: every level narrows by t (one token longer); levels left without occurrences are dropped.
    void advance(token_id t);
    // The estimate P(t) described above (0 without levels).
    double prob(token_id t) const;
    // Appends each level's most frequent continuation (those not already in out); x is scratch.
    void candidates(std::vector<token_id> & out, tree_expander & x) const;
    // Forgets the continuations remembered for frequent levels (see tops_): a new request may draft from other
    // shards at the same addresses (a corpus added, a history grown).
    void forget() { tops_.clear(); }

    int           n_levels() const { return static_cast<int>(levels_.size()); }
    int           len(int level = 0) const { return levels_[static_cast<std::size_t>(level)].len; }
    std::uint64_t count(int level = 0) const { return levels_[static_cast<std::size_t>(level)].count; }

  private:
    struct level {
        int           len   = 0;
        std::uint64_t count = 0;
        std::size_t   at    = 0;  // its ranges: ranges_[at .. at + n_shards)
        // A level of at most scan_max occurrences: its next tokens counted once, (token, count) sorted by token in
        // tally_[tally_at .. tally_at + tally_n) (valid when tallied).
        mutable bool        tallied  = false;
        mutable std::size_t tally_at = 0, tally_n = 0;
    };
    const level & tally(const level & lv) const;
    std::span<const index_shard> shards_;
    backoff_params               p_;
    std::vector<level>           levels_;
    std::vector<sa_range>        ranges_;
    mutable std::vector<sa_root> roots_;
    mutable std::vector<token_id> buf_;
    mutable std::vector<std::pair<token_id, std::uint64_t>> tally_;
    // The most frequent continuation of levels of more than scan_max occurrences, by their ranges. Such levels are
    // short, frequent matches that recur along a request (an indent, "self."), and reading their sample costs
    // scan_max random accesses (expand_sa). Kept until forget() or until set() gets other shards.
    struct top_entry {
        int                   len = 0;
        std::vector<sa_range> ranges;
        token_id              top = -1;
    };
    mutable std::unordered_map<std::uint64_t, top_entry> tops_;
    static constexpr std::size_t                          k_tops_max = 4096;  // then forgotten at once
    token_id top_of(const level & lv, tree_expander & x) const;
};

}  // namespace rest
