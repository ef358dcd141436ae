#include "tree-expand.h"

#include <algorithm>
#include <numeric>

namespace rest {

namespace {

// Continuations as rows of `width` tokens in an arena (k_doc_end after a document's end), sorted, so every trie
// node is a contiguous row span. The rows stand for n_total occurrences (n_rows of them, or an even sample).
struct row_block {
    std::size_t   width   = 0;
    std::size_t   n_rows  = 0;
    std::uint64_t n_total = 0;
};

// Most rows read for one selection, whatever scan_max says (scan_max = UINT64_MAX reads every occurrence, as tests
// do): bounds the arena (a few MB) and keeps row indices in 32 bits.
constexpr std::uint64_t k_rows_max = 1 << 16;

// Sorts the rows of a block lexicographically (k_doc_end first), with the caller's scratch buffers. Needed only when
// rows come from several shards or from outside a suffix array; one shard's rows are already grouped.
void sort_rows(std::vector<token_id> & arena, const row_block & b, std::vector<std::size_t> & order,
               std::vector<token_id> & sorted) {
    const std::size_t w    = b.width;
    token_id *        base = arena.data();
    auto less = [&](std::size_t x, std::size_t y) {
        return std::lexicographical_compare(base + x * w, base + (x + 1) * w, base + y * w, base + (y + 1) * w);
    };
    order.resize(b.n_rows);
    std::iota(order.begin(), order.end(), 0);
    if (std::is_sorted(order.begin(), order.end(), less)) {
        return;
    }
    std::sort(order.begin(), order.end(), less);
    sorted.resize(b.n_rows * w);
    for (std::size_t i = 0; i < b.n_rows; ++i) {
        std::copy_n(base + order[i] * w, w, sorted.begin() + static_cast<std::ptrdiff_t>(i * w));
    }
    std::copy(sorted.begin(), sorted.end(), base);
}

// A range's size, 0 for an inverted one (a corrupt index's search could in principle give one; reading it as huge
// would read ranks far outside the suffix array).
std::uint64_t size_of(sa_range r) { return r.empty() ? 0 : r.size(); }

struct enode {
    token_id      token  = 0;
    std::int32_t  parent = -1;  // engine index; the root (index 0) has -1
    std::int32_t  depth  = 0;
    std::uint64_t count  = 0;
    double        score  = 0;   // path score
    double        key    = 0;   // weight * score: the order
    std::int32_t  out    = -1;  // index in the output once selected
    std::uint32_t a = 0, b = 0; // rows [a, b) of the block; the next token is at column `depth`
};

struct item {
    double       key;
    std::int32_t node;
};

}  // namespace

struct tree_expander::impl {
    // Per call
    expand_params p_;
    cand_tree     out_;
    row_block     block_;
    // Buffers kept between calls (cleared, never shrunk)
    std::vector<enode>    nodes_;
    std::vector<token_id> arena_;
    std::vector<item>     heap_;
    struct pick {
        std::size_t   shard;
        std::uint64_t rank;
        std::uint64_t pos = 0;  // where its continuation starts in the text (read_rows' first pass)
    };
    std::vector<pick>        picks_;
    std::vector<std::size_t> order_;   // sort_rows() scratch
    std::vector<token_id>    sorted_;

    void begin(const expand_params & p) {
        p_ = p;
        out_.nodes.clear();
        out_.root_count = 0;
        out_.n_probes   = 0;
        nodes_.clear();
        arena_.clear();
        heap_.clear();
        block_ = {};
    }

    const cand_tree & run_sa(std::span<const sa_root> roots, std::uint64_t depth0) {
        std::uint64_t n = 0;
        for (const sa_root & r : roots) n += size_of(r.range);
        if (n > 0 && p_.depth_max > 0 && p_.n_top > 0) read_rows(roots, depth0, n);
        block_.n_total = n;
        return run();
    }

    const cand_tree & run_rows(std::span<const token_id> rows, std::size_t width) {
        block_.width   = width;
        block_.n_rows  = width ? rows.size() / width : 0;
        block_.n_total = block_.n_rows;
        arena_.assign(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(block_.n_rows * width));
        sort_rows(arena_, block_, order_, sorted_);
        return run();
    }

    // Reads the continuations (depth_max tokens) of the n occurrences in the roots' ranges: all of them up to
    // scan_max (at least 1, at most k_rows_max), else that many evenly spaced ones (the middles of equal strides of
    // the ranges laid end to end), each row then standing for about n / scan_max occurrences. One random access per
    // row, all independent (their cache misses overlap): bounded work per call at any size of index, where finding a
    // large range's children exactly cost hundreds of dependent probes (draft step p99 on a 600M-token index 54-71 us
    // sampled against 120-176 us exact, the same first-token hit rate, the same M of fixed chains on stories260K and
    // the demo model: docs/benchmarks.md, 2026-12-03).
    void read_rows(std::span<const sa_root> roots, std::uint64_t depth0, std::uint64_t n) {
        const std::uint64_t m = std::min({n, std::max<std::uint64_t>(1, p_.scan_max), k_rows_max});
        picks_.clear();
        std::size_t   shard = 0;
        std::uint64_t off   = 0;  // occurrences in the shards before `shard`
        int           n_parts = 0;
        for (std::uint64_t j = 0; j < m; ++j) {
            // j when m == n; 128 bits: (2j + 1) n must not wrap, or the picks would stop ascending.
            const auto g = static_cast<std::uint64_t>((static_cast<unsigned __int128>(2 * j + 1) * n) / (2 * m));
            while (g >= off + size_of(roots[shard].range)) off += size_of(roots[shard++].range);
            if (picks_.empty() || picks_.back().shard != shard) ++n_parts;
            picks_.push_back({shard, roots[shard].range.lo + (g - off), 0});
        }
        block_.width  = static_cast<std::size_t>(p_.depth_max);
        block_.n_rows = picks_.size();
        arena_.assign(block_.n_rows * block_.width, k_doc_end);
        token_id * base = arena_.data();
        // Two passes: the first touches every occurrence once with independent loads, the second reads the rest of
        // each row from lines that are now cached.
        for (std::size_t k = 0; k < picks_.size(); ++k) {
            const index_shard & sh = *roots[picks_[k].shard].shard;
            picks_[k].pos          = sh.suffix(picks_[k].rank) + depth0;
            base[k * block_.width] = sh.token_at(picks_[k].pos);
        }
        for (std::size_t k = 0; k < picks_.size(); ++k) {
            const index_shard & sh  = *roots[picks_[k].shard].shard;
            const std::uint64_t pos = picks_[k].pos;
            token_id *          row = base + k * block_.width;
            for (std::size_t c = 1; c < block_.width && row[c - 1] != k_doc_end; ++c) {
                row[c] = sh.token_at(pos + c);
            }
        }
        out_.n_probes = picks_.size();
        // Rows of one shard keep suffix-array order: the rows sharing a prefix are contiguous, which is all the
        // grouping needs (k_doc_end rows may sit at both ends of a group, and are skipped). Several shards
        // interleave, so their rows are sorted.
        if (n_parts > 1) sort_rows(arena_, block_, order_, sorted_);
    }

    const cand_tree & run() {
        out_.root_count         = block_.n_total;
        const std::size_t n_top = static_cast<std::size_t>(std::max(p_.n_top, 0));
        if (block_.n_total == 0 || n_top == 0 || p_.depth_max <= 0) {
            return out_;
        }
        enode root;
        root.score = 1.0;
        root.key   = p_.weight;
        root.count = block_.n_total;
        root.b     = static_cast<std::uint32_t>(block_.n_rows);
        nodes_.push_back(root);
        out_.nodes.reserve(n_top);
        expand(0);
        while (out_.nodes.size() < n_top && !heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), heap_less{this});
            const item it = heap_.back();
            heap_.pop_back();
            enode & v = node(it.node);
            v.out     = static_cast<std::int32_t>(out_.nodes.size());
            cand_node c;
            c.token  = v.token;
            c.parent = v.parent == 0 ? -1 : node(v.parent).out;
            c.depth  = v.depth;
            c.count  = v.count;
            c.score  = v.key;
            out_.nodes.push_back(c);
            if (v.depth < p_.depth_max && out_.nodes.size() < n_top) {
                expand(it.node);
            }
        }
        return out_;
    }

    const enode & node(std::int32_t i) const { return nodes_[static_cast<std::size_t>(i)]; }
    enode & node(std::int32_t i) { return nodes_[static_cast<std::size_t>(i)]; }

    // Lexicographic order of two distinct paths of equal depth: climb to the common parent.
    int path_cmp(std::int32_t a, std::int32_t b) const {
        while (node(a).parent != node(b).parent) {
            a = node(a).parent;
            b = node(b).parent;
        }
        return node(a).token < node(b).token ? -1 : (node(a).token > node(b).token ? 1 : 0);
    }

    // Whether x pops before y: score descending, then depth ascending, then path ascending.
    bool before(const item & x, const item & y) const {
        if (x.key != y.key) {
            return x.key > y.key;
        }
        if (node(x.node).depth != node(y.node).depth) {
            return node(x.node).depth < node(y.node).depth;
        }
        return path_cmp(x.node, y.node) < 0;
    }

    // std heaps keep the largest on top: "less" means "pops later".
    struct heap_less {
        const impl * e;
        bool operator()(const item & x, const item & y) const { return e->before(y, x); }
    };

    // The occurrences `rows` rows stand for: themselves, or in a sample their share of the whole, rounded.
    std::uint64_t occurrences(std::uint64_t rows) const {
        const std::uint64_t n = block_.n_total, m = block_.n_rows;
        return n == m ? rows
                      : static_cast<std::uint64_t>((static_cast<unsigned __int128>(2 * rows) * n + m) / (2 * m));
    }

    // The children of v: the runs of equal tokens at column depth(v) of its rows.
    void expand(std::int32_t v) {
        const auto   col = static_cast<std::size_t>(node(v).depth);
        const auto   w   = block_.width;
        auto         at  = [&](std::uint32_t row) { return arena_[row * w + col]; };
        if (col >= w) {
            return;
        }
        for (std::uint32_t g0 = node(v).a, b = node(v).b; g0 < b;) {
            const token_id t  = at(g0);
            std::uint32_t  g1 = g0 + 1;
            while (g1 < b && at(g1) == t) {
                ++g1;
            }
            if (t >= 0) {
                enode c;
                c.token  = t;
                c.parent = v;
                c.depth  = node(v).depth + 1;
                c.count  = occurrences(g1 - g0);
                c.score  = child_score(node(v).score, c.count, node(v).count, p_.alpha);
                c.key    = p_.weight * c.score;
                c.a      = g0;
                c.b      = g1;
                nodes_.push_back(c);
                heap_.push_back({c.key, static_cast<std::int32_t>(nodes_.size() - 1)});
                std::push_heap(heap_.begin(), heap_.end(), heap_less{this});
            }
            g0 = g1;
        }
    }
};

tree_expander::tree_expander() : impl_(std::make_unique<impl>()) {}
tree_expander::~tree_expander() = default;
tree_expander::tree_expander(tree_expander &&) noexcept = default;
tree_expander & tree_expander::operator=(tree_expander &&) noexcept = default;

const cand_tree & tree_expander::expand_sa(std::span<const sa_root> roots, std::uint32_t depth0,
                                           const expand_params & p) {
    impl_->begin(p);
    return impl_->run_sa(roots, depth0);
}

const cand_tree & tree_expander::expand_rows(std::span<const token_id> rows, std::size_t width,
                                             const expand_params & p) {
    impl_->begin(p);
    return impl_->run_rows(rows, width);
}

const cand_tree & tree_expander::none() {
    impl_->begin(expand_params{});
    return impl_->out_;
}

cand_tree expand_sa(std::span<const sa_root> roots, std::uint32_t depth0, const expand_params & p) {
    tree_expander e;
    return e.expand_sa(roots, depth0, p);
}

cand_tree expand_rows(std::span<const token_id> rows, std::size_t width, const expand_params & p) {
    tree_expander e;
    return e.expand_rows(rows, width, p);
}

}  // namespace rest
