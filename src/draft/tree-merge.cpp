#include "tree-merge.h"

#include <algorithm>
#include <numeric>

namespace rest {

namespace {

struct mnode {
    token_id     token  = 0;
    std::int32_t parent = -1;
    std::int32_t depth  = 1;
    double       score  = 0;
    std::uint8_t mask   = 0;
};

}  // namespace

draft_tree merge_trees(std::span<const weighted_source> sources, int n_budget, merge_buffers * buffers) {
    merge_buffers local;
    merge_buffers & buf = buffers ? *buffers : local;
    std::size_t n_in = 0;
    for (const weighted_source & src : sources) {
        n_in += src.tree ? src.tree->nodes.size() : 0;
    }
    std::vector<mnode> nodes;
    nodes.reserve(n_in);
    // (parent + 1, token) -> node: open addressing over a power of two at least twice the inputs.
    std::size_t cap = 16;
    while (cap < 2 * n_in) {
        cap *= 2;
    }
    std::vector<std::uint64_t> & keys = buf.keys;
    std::vector<std::int32_t> &  vals = buf.vals;
    keys.assign(cap, UINT64_MAX);
    vals.assign(cap, -1);
    auto find_or_add = [&](std::uint64_t key, const cand_node & c, std::int32_t parent) {
        std::size_t h = (key * 0x9E3779B97F4A7C15ull) >> 20;
        for (;; ++h) {
            const std::size_t i = h & (cap - 1);
            if (keys[i] == key) {
                return vals[i];
            }
            if (keys[i] == UINT64_MAX) {
                keys[i] = key;
                vals[i] = static_cast<std::int32_t>(nodes.size());
                mnode m;
                m.token  = c.token;
                m.parent = parent;
                m.depth  = c.depth;
                nodes.push_back(m);
                return vals[i];
            }
        }
    };
    std::vector<std::int32_t> & map = buf.map;  // source node -> merged node
    for (const weighted_source & src : sources) {
        if (!src.tree) {
            continue;
        }
        map.assign(src.tree->nodes.size(), -1);
        for (std::size_t i = 0; i < src.tree->nodes.size(); ++i) {
            const cand_node &  c      = src.tree->nodes[i];
            const std::int32_t parent = c.parent < 0 ? -1 : map[static_cast<std::size_t>(c.parent)];
            const std::uint64_t key   = (static_cast<std::uint64_t>(parent + 1) << 32) | static_cast<std::uint32_t>(c.token);
            const std::int32_t  idx   = find_or_add(key, c, parent);
            mnode &             m     = nodes[static_cast<std::size_t>(idx)];
            m.score                   = std::max(m.score, c.score);
            m.mask |= static_cast<std::uint8_t>(src.source);
            map[i] = idx;
        }
    }

    auto path_cmp = [&](std::int32_t a, std::int32_t b) {  // equal depths, distinct nodes
        while (nodes[static_cast<std::size_t>(a)].parent != nodes[static_cast<std::size_t>(b)].parent) {
            a = nodes[static_cast<std::size_t>(a)].parent;
            b = nodes[static_cast<std::size_t>(b)].parent;
        }
        return nodes[static_cast<std::size_t>(a)].token < nodes[static_cast<std::size_t>(b)].token;
    };
    std::vector<std::int32_t> & order = buf.order;
    order.resize(nodes.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
        const mnode & x = nodes[static_cast<std::size_t>(a)];
        const mnode & y = nodes[static_cast<std::size_t>(b)];
        if (x.score != y.score) {
            return x.score > y.score;
        }
        if (x.depth != y.depth) {
            return x.depth < y.depth;
        }
        return a != b && path_cmp(a, b);
    });
    order.resize(std::min<std::size_t>(order.size(), static_cast<std::size_t>(std::max(n_budget, 0))));

    // The order puts parents first (a parent's score is at least its child's, and ties go to the shallower), so
    // the kept prefix is ancestor-closed and parents are already placed when their children arrive.
    draft_tree tree;
    tree.tokens.reserve(order.size());
    tree.parents.reserve(order.size());
    tree.depths.reserve(order.size());
    tree.scores.reserve(order.size());
    tree.sources.reserve(order.size());
    std::vector<std::int32_t> & out = buf.out;
    out.assign(nodes.size(), -1);
    for (const std::int32_t i : order) {
        const mnode & m = nodes[static_cast<std::size_t>(i)];
        out[static_cast<std::size_t>(i)] =
            tree.add(m.token, m.parent < 0 ? -1 : out[static_cast<std::size_t>(m.parent)], static_cast<float>(m.score), m.mask);
    }
    return tree;
}

}  // namespace rest
