#include "rest/draft-tree.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <utility>

namespace rest {

void draft_tree::clear() {
    tokens.clear();
    parents.clear();
    depths.clear();
    scores.clear();
    sources.clear();
}

std::int32_t draft_tree::add(token_id token, std::int32_t parent, float score, std::uint8_t source_mask) {
    const auto idx = static_cast<std::int32_t>(tokens.size());
    tokens.push_back(token);
    parents.push_back(parent);
    depths.push_back(parent < 0 ? 1 : depths[static_cast<std::size_t>(parent)] + 1);
    scores.push_back(score);
    sources.push_back(source_mask);
    return idx;
}

void draft_tree::truncate(std::size_t n) {
    if (n >= tokens.size()) {
        return;
    }
    tokens.resize(n);
    parents.resize(n);
    depths.resize(n);
    scores.resize(n);
    sources.resize(n);
}

double draft_tree::expected_accepted(std::size_t n) const {
    // Node i is accepted exactly when its whole path is, so by linearity E[accepted] is the sum of path
    // probabilities, which is what scores hold.
    double sum = 0;
    for (std::size_t i = 0; i < std::min(n, scores.size()); ++i) {
        sum += scores[i];
    }
    return sum;
}

void draft_tree::keep_best_path() {
    // Children follow their parent and siblings are in best-first order, so one forward scan finds, at each
    // level, the best child of the node taken last.
    draft_tree   path;
    std::int32_t cur = -1;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (parents[i] == cur) {
            cur = static_cast<std::int32_t>(i);
            path.add(tokens[i], static_cast<std::int32_t>(path.size()) - 1, scores[i], sources[i]);
        }
    }
    *this = std::move(path);
}

std::size_t draft_tree::n_leaves(std::size_t n) const {
    n = std::min(n, tokens.size());
    std::vector<bool> has_child(n, false);
    for (std::size_t i = 0; i < n; ++i) {
        if (parents[i] >= 0) {
            has_child[static_cast<std::size_t>(parents[i])] = true;
        }
    }
    return static_cast<std::size_t>(std::count(has_child.begin(), has_child.end(), false));
}

std::string draft_tree::check_integrity() const {
    const std::size_t n = tokens.size();
    if (parents.size() != n || depths.size() != n || scores.size() != n || sources.size() != n) {
        return "array sizes differ: tokens " + std::to_string(n) + ", parents " + std::to_string(parents.size()) +
               ", depths " + std::to_string(depths.size()) + ", scores " + std::to_string(scores.size()) +
               ", sources " + std::to_string(sources.size());
    }
    std::set<std::pair<std::int32_t, token_id>> children;  // (parent, token): siblings must differ
    for (std::size_t i = 0; i < n; ++i) {
        const std::string at = "node " + std::to_string(i) + ": ";
        const std::int32_t p = parents[i];
        if (p < -1 || p >= static_cast<std::int32_t>(i)) {
            return at + "parent " + std::to_string(p) + " does not precede it";
        }
        const std::int32_t want_depth = p < 0 ? 1 : depths[static_cast<std::size_t>(p)] + 1;
        if (depths[i] != want_depth) {
            return at + "depth " + std::to_string(depths[i]) + ", expected " + std::to_string(want_depth);
        }
        if (tokens[i] < 0) {
            return at + "token " + std::to_string(tokens[i]) + " is not a real token";
        }
        if (!children.insert({p, tokens[i]}).second) {
            return at + "token " + std::to_string(tokens[i]) + " repeats a sibling under parent " + std::to_string(p);
        }
        if (!(scores[i] >= 0.0f && scores[i] <= 1.0f) || std::isnan(scores[i])) {
            return at + "score " + std::to_string(scores[i]) + " is not a probability";
        }
        if (p >= 0 && scores[i] > scores[static_cast<std::size_t>(p)]) {
            return at + "score " + std::to_string(scores[i]) + " exceeds its parent's " +
                   std::to_string(scores[static_cast<std::size_t>(p)]);
        }
        if (i > 0 && scores[i] > scores[i - 1]) {
            return at + "score " + std::to_string(scores[i]) + " exceeds the previous node's " +
                   std::to_string(scores[i - 1]) + " (not best-first)";
        }
        if (sources[i] == 0 || (sources[i] & ~0xFu) != 0) {
            return at + "source mask " + std::to_string(sources[i]) + " names no known source";
        }
    }
    return "";
}

std::string format_draft_tree(const draft_tree & tree, const std::function<std::string(token_id)> & piece) {
    std::vector<std::vector<std::int32_t>> children(tree.size() + 1);  // [0]: the root's children
    for (std::size_t i = 0; i < tree.size(); ++i) {
        children[static_cast<std::size_t>(tree.parents[i] + 1)].push_back(static_cast<std::int32_t>(i));
    }
    std::string               out;
    std::vector<std::int32_t> stack(children[0].rbegin(), children[0].rend());
    while (!stack.empty()) {
        const auto i = static_cast<std::size_t>(stack.back());
        stack.pop_back();
        char head[64];
        std::snprintf(head, sizeof(head), "#%zu ", i);
        out += std::string(2 * static_cast<std::size_t>(tree.depths[i] - 1), ' ') + head + "'" + piece(tree.tokens[i]) + "'";
        char tail[64];
        std::snprintf(tail, sizeof(tail), " %.3f [%s%s%s%s]\n", tree.scores[i], (tree.sources[i] & 1) ? "d" : "",
                      (tree.sources[i] & 2) ? "c" : "", (tree.sources[i] & 4) ? "h" : "", (tree.sources[i] & 8) ? "p" : "");
        out += tail;
        const auto & ch = children[i + 1];
        stack.insert(stack.end(), ch.rbegin(), ch.rend());
    }
    return out;
}

}  // namespace rest
