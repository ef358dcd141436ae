// Merging the sources' candidate trees into one budgeted draft tree.
//
// Each source proposes its own best n nodes (a cand_tree, ancestor-closed, ordered by weighted score). The merged
// trie is their union by path; a node's score is the largest weighted score any source gives it, and it keeps the
// mask of the sources that proposed it. The result is the first n_budget nodes in the order (score descending, depth ascending, path
// ascending). Because a node's merged score is one source's weighted score, every node of the merged top n is in
// that source's own top n, so this equals the top n of the union of the sources' complete tries (ties included).
#pragma once

#include "tree-expand.h"

#include "rest/draft-tree.h"

#include <cstdint>
#include <span>
#include <vector>

namespace rest {

struct weighted_source {
    const cand_tree * tree   = nullptr;  // expanded with the source's weight (its scores are weighted already)
    draft_source      source = draft_source::datastore;
};

// Scratch space kept by a caller between merges (so a step does not allocate it again).
struct merge_buffers {
    std::vector<std::uint64_t> keys;
    std::vector<std::int32_t>  vals, map, order, out;
};

draft_tree merge_trees(std::span<const weighted_source> sources, int n_budget, merge_buffers * buffers = nullptr);

}  // namespace rest
