// Best-first selection of the most probable continuations of a match, with counts (exact up to scan_max).
//
// A source's continuations form a counted trie: the root is the matched context suffix (count = its occurrences)
// and a node's count is the number of occurrences whose continuation starts with the node's path. Continuations
// stop at document ends. Scores are path products of smoothed count ratios,
//     score(child) = score(parent) * count(child) / (count(parent) + alpha),    score(root) = 1,
// so they never increase along a path. A tree returns the n_top best nodes in the total order
//     score descending, then depth ascending, then path (token ids from the root) ascending,
// which is ancestor-closed (a parent sorts before its children) and deterministic. With a source weight w the
// order uses w * score: rounding can make two different scores equal after weighting, and the merge (which
// compares weighted scores across sources) is exact only if each source was cut in that same order.
//
// On a suffix array the match is a range per shard. Its continuations are read as rows (one random access per
// occurrence gives the whole continuation; the accesses are independent, so their cache misses overlap), and within
// one shard the rows come out sorted (suffix-array order), so every node is a contiguous row span at no further
// cost. A match with more than scan_max occurrences is read at scan_max of them, evenly spaced over its ranges: the
// counts are then estimates (each row standing for n / scan_max occurrences, rounded), good to about one row's
// share per shard (a node's occurrences are one run of ranks in each), and the work per call is bounded whatever
// the index's size (tree-expand.cpp gives the measurements). scan_max = 0 reads one row.
#pragma once

#include "rest/index-shard.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace rest {

struct expand_params {
    int           n_top       = 16;       // nodes to select
    int           depth_max   = 10;       // deepest node (root children have depth 1)
    double        alpha       = 0.0;      // count smoothing in the score ratio (0: plain count ratios)
    std::uint64_t scan_max    = 64;       // occurrences read: all of a match with at most this many, else a sample
    double        weight      = 1.0;      // the source's weight: nodes are ordered (and returned) by weight * score
};

struct cand_node {
    token_id      token  = 0;
    std::int32_t  parent = -1;  // index in cand_tree::nodes; -1: a child of the match
    std::int32_t  depth  = 1;
    std::uint64_t count  = 0;   // occurrences of the path after the match, summed over shards (estimated from
                                //   scan_max rows for a match with more)
    double        score  = 0;   // weight * path score (the order key; see expand_params::weight)
};

struct cand_tree {
    std::vector<cand_node> nodes;           // selection order (see above); parents precede children
    std::uint64_t          root_count = 0;  // occurrences of the match
    std::uint64_t          n_probes   = 0;  // suffix-array entries read (occurrences whose continuation was read)
};

// The score of a child with `count` occurrences under a parent with `parent_count` and `parent_score`. Every
// component computes scores with this one expression so that equal inputs give bit-equal scores.
inline double child_score(double parent_score, std::uint64_t count, std::uint64_t parent_count, double alpha) {
    return parent_score * (static_cast<double>(count) / (static_cast<double>(parent_count) + alpha));
}

// One shard's occurrences of the match: suffixes in `range` share the matched tokens.
struct sa_root {
    const index_shard * shard = nullptr;
    sa_range            range;
};

// Reusable selection state: keeps its buffers between calls, so a drafter step allocates (almost) nothing.
// Not thread-safe; one per source per drafter.
class tree_expander {
  public:
    tree_expander();
    ~tree_expander();
    tree_expander(tree_expander &&) noexcept;
    tree_expander & operator=(tree_expander &&) noexcept;

    // Selects from the continuations of a match of `depth0` tokens occurring in the given shard ranges (counts
    // summed over shards). The result stays valid until the next call on this expander.
    const cand_tree & expand_sa(std::span<const sa_root> roots, std::uint32_t depth0, const expand_params & p);

    // Selects from explicit continuations: `rows` holds one continuation per occurrence, `width` tokens each,
    // padded with k_doc_end after its end. Rows need not be sorted.
    const cand_tree & expand_rows(std::span<const token_id> rows, std::size_t width, const expand_params & p);

    // An empty result (a source that did not match), valid until the next call.
    const cand_tree & none();

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

// One-shot conveniences (tests).
cand_tree expand_sa(std::span<const sa_root> roots, std::uint32_t depth0, const expand_params & p);
cand_tree expand_rows(std::span<const token_id> rows, std::size_t width, const expand_params & p);

}  // namespace rest
