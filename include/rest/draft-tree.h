// A draft tree, stored flat as parallel arrays (the form a tree-attention verifier wants).
//
//   field    | index       | value
//   tokens   | node i      | drafted token
//   parents  | node i      | index of the parent node, -1 when the parent is the root (the last emitted token)
//   depths   | node i      | 1 + depth of the parent (root children have depth 1)
//   scores   | node i      | estimated probability that node i is accepted (product along the path of
//            |             | count(child)/count(parent)); non-increasing along every path
//   sources  | node i      | bitmask of draft_source values that proposed the node
//
// Invariants: parents[i] < i (parents precede children), siblings have distinct tokens, and nodes are in
// best-first order (scores non-increasing, ties broken deterministically), so every prefix of the arrays is
// itself a valid tree: the verifier may keep only the first N nodes.
#pragma once

#include "rest/types.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rest {

enum class draft_source : std::uint8_t {
    datastore = 1,
    context   = 2,
    history   = 4,
    prediction = 8,  // the request's predicted output (OpenAI's `prediction`)
};

struct draft_tree {
    std::vector<token_id>     tokens;
    std::vector<std::int32_t> parents;
    std::vector<std::int32_t> depths;
    std::vector<float>        scores;
    std::vector<std::uint8_t> sources;

    std::size_t size() const { return tokens.size(); }
    bool empty() const { return tokens.empty(); }
    void clear();
    // Appends a node; returns its index.
    std::int32_t add(token_id token, std::int32_t parent, float score, std::uint8_t source_mask);
    // Keeps the first n nodes (a valid tree because of the ordering invariant).
    void truncate(std::size_t n);
    // Sum of the first n scores: the expected number of accepted draft tokens if the first n nodes are verified.
    double expected_accepted(std::size_t n) const;
    // Number of leaves among the first n nodes (each leaf costs the verifier one sequence id).
    std::size_t n_leaves(std::size_t n) const;
    // Keeps only the best path: from the root, always the best child (the first one in best-first order). For
    // verifiers that take one chain per request.
    void keep_best_path();
    // Returns "" when every invariant holds, else a message naming the first violation.
    std::string check_integrity() const;
};

// Renders the tree depth-first, one node per line: indentation by depth, then "#index 'piece' score [sources]"
// (sources as d/c/h/p). piece(t) gives a token's display text; for CLIs (`rest index query --tree`) and debugging.
std::string format_draft_tree(const draft_tree & tree, const std::function<std::string(token_id)> & piece);

}  // namespace rest
