#include "tree-expand.h"

#include <algorithm>
#include <numeric>

namespace rest {

namespace {

constexpr std::uint64_t k_initial_probes = 8;  // per shard range when a node is first expanded

// Materialized continuations: rows of `width` tokens in a shared arena, sorted, so every trie node is a contiguous
// row span.
struct row_block {
    std::size_t offset = 0;  // first token in the arena
    std::size_t width  = 0;
    std::size_t n_rows = 0;
};

// Sorts the rows of a block lexicographically (k_doc_end first). Needed only when rows come from several shards
// or from outside a suffix array; one shard's rows are already grouped.
void sort_rows(std::vector<token_id> & arena, const row_block & b) {
    const std::size_t w = b.width;
    token_id *        base = arena.data() + b.offset;
    auto less = [&](std::size_t x, std::size_t y) {
        return std::lexicographical_compare(base + x * w, base + (x + 1) * w, base + y * w, base + (y + 1) * w);
    };
    std::vector<std::size_t> order(b.n_rows);
    std::iota(order.begin(), order.end(), 0);
    if (std::is_sorted(order.begin(), order.end(), less)) {
        return;
    }
    std::sort(order.begin(), order.end(), less);
    std::vector<token_id> sorted(b.n_rows * w);
    for (std::size_t i = 0; i < b.n_rows; ++i) {
        std::copy_n(base + order[i] * w, w, sorted.begin() + static_cast<std::ptrdiff_t>(i * w));
    }
    std::copy(sorted.begin(), sorted.end(), base);
}

struct enode {
    token_id      token  = 0;
    std::int32_t  parent = -1;  // engine index; the root (index 0) has -1
    std::int32_t  depth  = 0;
    std::uint64_t count  = 0;
    double        score  = 0;   // path score
    double        key    = 0;   // weight * score: the order
    std::int32_t  out    = -1;  // index in the output once selected
    // rows mode (block >= 0): rows [a, b) of the block; the next token is at column `col`
    std::int32_t  block = -1;
    std::uint32_t a = 0, b = 0, col = 0;
    // suffix-array mode: n_roots ranges from ranges_at, and (once expanded) the runs found so far
    std::uint32_t ranges_at = 0;
    std::int32_t  disc      = -1;
};

struct item {
    double       score;
    std::int32_t node;
    bool         placeholder;  // stands for the children of `node` not yet discovered (score is an upper bound)
};

}  // namespace

struct tree_expander::impl {
    // Per call
    std::span<const sa_root> roots_;
    std::uint64_t            depth0_ = 0;
    expand_params            p_;
    cand_tree                out_;
    // Buffers kept between calls (cleared, never shrunk)
    std::vector<enode>                 nodes_;
    std::vector<sa_range>              ranges_;
    std::vector<std::vector<sa_range>> covered_;  // [disc * n_roots + shard]: runs found, sorted by lo
    std::size_t                        n_covered_ = 0;
    std::vector<row_block>             blocks_;
    std::vector<token_id>              arena_;
    std::vector<item>                  heap_;
    std::vector<sa_range>              gaps_;
    std::vector<std::uint64_t>         pts_, keys_, mids_;
    struct bsearch {
        std::uint64_t a, b;    // the answer lies in [a, b]; b satisfies the predicate (or is the end)
        std::uint64_t key;
        bool          strict;  // predicate: key_at > key (strict) or >= key
    };
    std::vector<bsearch> searches_;

    void begin(std::span<const sa_root> roots, std::uint32_t depth0, const expand_params & p) {
        roots_  = roots;
        depth0_ = depth0;
        p_      = p;
        out_.nodes.clear();
        out_.root_count = 0;
        out_.n_probes   = 0;
        out_.cut        = false;
        nodes_.clear();
        ranges_.clear();
        n_covered_ = 0;
        blocks_.clear();
        arena_.clear();
        heap_.clear();
    }

    const cand_tree & run_sa() {
        enode root;
        root.score = 1.0;
        root.key   = p_.weight;
        for (const sa_root & r : roots_) {
            ranges_.push_back(r.range);
            root.count += r.range.size();
        }
        nodes_.push_back(root);
        return run();
    }

    const cand_tree & run_rows(std::span<const token_id> rows, std::size_t width) {
        row_block blk;
        blk.width  = width;
        blk.n_rows = width ? rows.size() / width : 0;
        arena_.assign(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(blk.n_rows * width));
        sort_rows(arena_, blk);
        enode root;
        root.score = 1.0;
        root.key   = p_.weight;
        root.count = blk.n_rows;
        root.block = 0;
        root.b     = static_cast<std::uint32_t>(blk.n_rows);
        blocks_.push_back(blk);
        nodes_.push_back(root);
        return run();
    }

    const cand_tree & run() {
        out_.root_count         = nodes_[0].count;
        const std::size_t n_top = static_cast<std::size_t>(std::max(p_.n_top, 0));
        if (nodes_[0].count == 0 || n_top == 0 || p_.depth_max <= 0) {
            return out_;
        }
        out_.nodes.reserve(n_top);
        expand(0);
        while (out_.nodes.size() < n_top && !heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), heap_less{this});
            const item it = heap_.back();
            heap_.pop_back();
            if (it.placeholder) {
                refine(it.node);
                continue;
            }
            enode & v = nodes_[static_cast<std::size_t>(it.node)];
            v.out     = static_cast<std::int32_t>(out_.nodes.size());
            cand_node c;
            c.token  = v.token;
            c.parent = v.parent == 0 ? -1 : nodes_[static_cast<std::size_t>(v.parent)].out;
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

    // Whether x pops before y. A placeholder pops before real nodes of equal score, so no undiscovered node can
    // tie-break ahead of a node already selected.
    bool before(const item & x, const item & y) const {
        if (x.score != y.score) {
            return x.score > y.score;
        }
        if (x.placeholder != y.placeholder) {
            return x.placeholder;
        }
        if (x.placeholder) {
            return x.node < y.node;
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

    void push(const item & it) {
        heap_.push_back(it);
        std::push_heap(heap_.begin(), heap_.end(), heap_less{this});
    }

    std::int32_t add_child(std::int32_t v, token_id t, std::uint64_t count) {
        enode c;
        c.token  = t;
        c.parent = v;
        c.depth  = node(v).depth + 1;
        c.count  = count;
        c.score  = child_score(node(v).score, count, node(v).count, p_.alpha);
        c.key    = p_.weight * c.score;
        nodes_.push_back(c);
        const auto idx = static_cast<std::int32_t>(nodes_.size() - 1);
        push({c.key, idx, false});
        return idx;
    }

    void expand(std::int32_t v) {
        if (node(v).block >= 0) {
            expand_rows(v);
        } else if (node(v).count <= p_.scan_max) {
            materialize(v);
            expand_rows(v);
        } else {
            discover_init(v);
        }
    }

    void expand_rows(std::int32_t v) {
        const std::int32_t  blk = node(v).block;
        const std::uint32_t col = node(v).col, a = node(v).a, b = node(v).b;
        const row_block     rb  = blocks_[static_cast<std::size_t>(blk)];
        if (col >= rb.width) {
            return;
        }
        auto at = [&](std::uint32_t row) { return arena_[rb.offset + row * rb.width + col]; };
        for (std::uint32_t g0 = a; g0 < b;) {
            const token_id t  = at(g0);
            std::uint32_t  g1 = g0 + 1;
            while (g1 < b && at(g1) == t) {
                ++g1;
            }
            if (t >= 0) {
                const std::int32_t c = add_child(v, t, g1 - g0);
                node(c).block        = blk;
                node(c).a            = g0;
                node(c).b            = g1;
                node(c).col          = col + 1;
            }
            g0 = g1;
        }
    }

    // Reads every occurrence's continuation below v (one random access each) and switches v to rows mode.
    void materialize(std::int32_t v) {
        row_block blk;
        blk.offset = arena_.size();
        blk.width  = static_cast<std::size_t>(p_.depth_max - node(v).depth);
        blk.n_rows = node(v).count;
        arena_.resize(blk.offset + blk.n_rows * blk.width, k_doc_end);
        const std::uint64_t d       = depth0_ + static_cast<std::uint64_t>(node(v).depth);
        std::size_t         row     = 0;
        int                 n_parts = 0;
        for (std::size_t i = 0; i < roots_.size(); ++i) {
            const index_shard & sh = *roots_[i].shard;
            const sa_range      r  = ranges_[node(v).ranges_at + i];
            n_parts += !r.empty();
            token_id * base = arena_.data() + blk.offset;
            // Two passes: the first touches every occurrence once with independent loads (their cache misses
            // overlap), the second reads the rest of each row from lines that are now cached.
            for (std::uint64_t rank = r.lo; rank < r.hi; ++rank) {
                base[(row + (rank - r.lo)) * blk.width] = sh.token_at(sh.suffix(rank) + d);
            }
            for (std::uint64_t rank = r.lo; rank < r.hi; ++rank, ++row) {
                const std::uint64_t pos = sh.suffix(rank) + d;
                token_id *          out = base + row * blk.width;
                for (std::size_t k = 1; k < blk.width && out[k - 1] != k_doc_end; ++k) {
                    out[k] = sh.token_at(pos + k);
                }
            }
            out_.n_probes += r.size();
        }
        // Rows of one shard keep suffix-array order: the rows sharing a prefix are contiguous, which is all the
        // grouping needs (k_doc_end rows may sit at both ends of a group, and are skipped). Several shards
        // interleave, so their rows are sorted.
        if (n_parts > 1) {
            sort_rows(arena_, blk);
        }
        node(v).block = static_cast<std::int32_t>(blocks_.size());
        node(v).a     = 0;
        node(v).b     = static_cast<std::uint32_t>(blk.n_rows);
        node(v).col   = 0;
        blocks_.push_back(blk);
    }

    sa_range range_of(std::int32_t v, std::size_t shard) const { return ranges_[node(v).ranges_at + shard]; }
    std::vector<sa_range> & covered(std::int32_t v, std::size_t shard) {
        return covered_[static_cast<std::size_t>(node(v).disc) * roots_.size() + shard];
    }

    static void insert_run(std::vector<sa_range> & runs, sa_range run) {
        auto it = std::upper_bound(runs.begin(), runs.end(), run.lo,
                                   [](std::uint64_t lo, const sa_range & r) { return lo < r.lo; });
        runs.insert(it, run);
    }

    // Gaps of v's range in a shard that no discovered run covers (into `out`).
    void gaps(std::int32_t v, std::size_t shard, std::vector<sa_range> & out) {
        out.clear();
        const sa_range r   = range_of(v, shard);
        std::uint64_t  pos = r.lo;
        for (const sa_range & run : covered(v, shard)) {
            if (run.lo > pos) {
                out.push_back({pos, run.lo});
            }
            pos = std::max(pos, run.hi);
        }
        if (r.hi > pos) {
            out.push_back({pos, r.hi});
        }
    }

    // Any child not yet discovered lies in one gap per shard, so its count is at most the sum of the largest gaps.
    std::uint64_t bound(std::int32_t v) {
        std::uint64_t b = 0;
        for (std::size_t i = 0; i < roots_.size(); ++i) {
            gaps(v, i, gaps_);
            std::uint64_t g = 0;
            for (const sa_range & gap : gaps_) {
                g = std::max(g, gap.size());
            }
            b += g;
        }
        return b;
    }

    // Records the run [lo, hi) of key k in one shard and, for a real token, creates the child with its runs in
    // every other shard.
    void add_run(std::int32_t v, std::size_t shard, sa_range run, std::uint64_t k, std::uint32_t d) {
        insert_run(covered(v, shard), run);
        if (k == 0 || k == UINT64_MAX || k - 1 > (std::uint64_t) INT32_MAX) {
            return;  // past the end, a separator, or (a corrupt u32 text) no token id at all
        }
        const auto    t     = static_cast<token_id>(k - 1);
        const auto    at    = static_cast<std::uint32_t>(ranges_.size());
        std::uint64_t count = 0;
        for (std::size_t j = 0; j < roots_.size(); ++j) {
            sa_range cr = run;
            if (j != shard) {
                const sa_range r = range_of(v, j);
                cr = r.empty() ? r : roots_[j].shard->narrow(r, d, t);
                if (!cr.empty()) {
                    insert_run(covered(v, j), cr);
                    out_.n_probes++;
                }
            }
            ranges_.push_back(cr);
            count += cr.size();
        }
        const std::int32_t c = add_child(v, t, count);
        node(c).ranges_at    = at;
    }

    // Probes a gap at stride s: every run of length >= s inside it contains a probe. The probe keys are read
    // first, all independent of each other (their cache misses overlap); consecutive probes with equal keys form
    // one run, whose two ends lie between it and the neighbouring probes. Those ends are then found by binary
    // searches that advance in lockstep, one step of every search per round, so each round's loads are
    // independent too: the cost is about log2(s) memory latencies for the whole gap instead of per run.
    void probe_gap(std::int32_t v, std::size_t shard, sa_range gap, std::uint64_t s) {
        const index_shard & sh = *roots_[shard].shard;
        const auto          d  = static_cast<std::uint32_t>(depth0_ + static_cast<std::uint64_t>(node(v).depth));
        pts_.clear();
        keys_.clear();
        for (std::uint64_t pos = gap.lo + s - 1; pos < gap.hi; pos += s) {
            pts_.push_back(pos);
        }
        for (const std::uint64_t pos : pts_) {
            keys_.push_back(sh.key_at(sh.suffix(pos) + d));  // both ends of a continuation sort as suffixes do
        }
        out_.n_probes += pts_.size();
        // Two searches per group: its first rank (first key >= K after the previous probe) and its end (first key
        // > K after its last probe). The upper end of each search interval is known to satisfy the predicate.
        searches_.clear();
        for (std::size_t j = 0; j < pts_.size();) {
            std::size_t k = j;
            while (k + 1 < pts_.size() && keys_[k + 1] == keys_[j]) {
                ++k;
            }
            searches_.push_back({j == 0 ? gap.lo : pts_[j - 1] + 1, pts_[j], keys_[j], false});
            searches_.push_back({pts_[k] + 1, k + 1 < pts_.size() ? pts_[k + 1] : gap.hi, keys_[j], true});
            j = k + 1;
        }
        for (;;) {
            mids_.clear();
            for (const bsearch & b : searches_) {
                if (b.a < b.b) {
                    mids_.push_back(b.a + (b.b - b.a) / 2);
                }
            }
            if (mids_.empty()) {
                break;
            }
            keys_.clear();
            for (const std::uint64_t m : mids_) {
                keys_.push_back(sh.key_at(sh.suffix(m) + d));
            }
            out_.n_probes += mids_.size();
            std::size_t i = 0;
            for (bsearch & b : searches_) {
                if (b.a < b.b) {
                    const std::uint64_t m = mids_[i], k = keys_[i++];
                    if (b.strict ? k > b.key : k >= b.key) {
                        b.b = m;
                    } else {
                        b.a = m + 1;
                    }
                }
            }
        }
        for (std::size_t g = 0; g + 1 < searches_.size(); g += 2) {
            add_run(v, shard, {searches_[g].a, searches_[g + 1].a}, searches_[g].key, d);
        }
    }

    void push_placeholder(std::int32_t v) {
        const std::uint64_t b = bound(v);
        if (b > 0) {
            push({p_.weight * child_score(node(v).score, b, node(v).count, p_.alpha), v, true});
        }
    }

    void discover_init(std::int32_t v) {
        node(v).disc = static_cast<std::int32_t>(n_covered_);
        n_covered_++;
        if (covered_.size() < n_covered_ * roots_.size()) {
            covered_.resize(n_covered_ * roots_.size());
        }
        for (std::size_t i = 0; i < roots_.size(); ++i) {
            covered(v, i).clear();
        }
        std::vector<sa_range> g;
        for (std::size_t i = 0; i < roots_.size(); ++i) {
            const sa_range r = range_of(v, i);
            if (!r.empty()) {
                const std::uint64_t s = std::max<std::uint64_t>(1, (r.size() + k_initial_probes - 1) / k_initial_probes);
                // Runs already found through another shard are outside these gaps.
                gaps(v, i, g);
                for (const sa_range & gap : g) {
                    probe_gap(v, i, gap, s);
                }
            }
        }
        push_placeholder(v);
    }

    void refine(std::int32_t v) {
        if (out_.n_probes >= p_.n_probe_max) {
            out_.cut = true;
            return;
        }
        std::vector<sa_range> g;
        for (std::size_t i = 0; i < roots_.size(); ++i) {
            gaps(v, i, g);
            std::uint64_t widest = 0;
            for (const sa_range & gap : g) {
                widest = std::max(widest, gap.size());
            }
            if (widest == 0) {
                continue;
            }
            const std::uint64_t s = std::max<std::uint64_t>(1, widest / 2);
            for (const sa_range & gap : g) {
                if (gap.size() >= s) {
                    probe_gap(v, i, gap, s);
                }
            }
        }
        push_placeholder(v);
    }
};

tree_expander::tree_expander() : impl_(std::make_unique<impl>()) {}
tree_expander::~tree_expander() = default;
tree_expander::tree_expander(tree_expander &&) noexcept = default;
tree_expander & tree_expander::operator=(tree_expander &&) noexcept = default;

const cand_tree & tree_expander::expand_sa(std::span<const sa_root> roots, std::uint32_t depth0,
                                           const expand_params & p) {
    impl_->begin(roots, depth0, p);
    return impl_->run_sa();
}

const cand_tree & tree_expander::expand_rows(std::span<const token_id> rows, std::size_t width,
                                             const expand_params & p) {
    impl_->begin({}, 0, p);
    return impl_->run_rows(rows, width);
}

const cand_tree & tree_expander::none() {
    impl_->begin({}, 0, expand_params{});
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
