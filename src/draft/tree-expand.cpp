#include "tree-expand.h"

#include <algorithm>
#include <numeric>

namespace rest {

namespace {

constexpr std::uint64_t k_initial_probes = 8;  // per shard range when a node is first expanded

// Materialized continuations: rows of `width` tokens, sorted, so every trie node is a contiguous row span.
struct row_block {
    std::vector<token_id> rows;
    std::size_t           width = 0;

    std::size_t n_rows() const { return width ? rows.size() / width : 0; }
    token_id at(std::size_t row, std::size_t off) const { return rows[row * width + off]; }
};

void sort_rows(row_block & b) {
    const std::size_t n = b.n_rows(), w = b.width;
    auto less = [&](std::size_t x, std::size_t y) {
        return std::lexicographical_compare(b.rows.begin() + x * w, b.rows.begin() + (x + 1) * w,
                                            b.rows.begin() + y * w, b.rows.begin() + (y + 1) * w);
    };
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    if (std::is_sorted(order.begin(), order.end(), less)) {
        return;
    }
    std::sort(order.begin(), order.end(), less);
    std::vector<token_id> sorted(b.rows.size());
    for (std::size_t i = 0; i < n; ++i) {
        std::copy_n(b.rows.begin() + order[i] * w, w, sorted.begin() + i * w);
    }
    b.rows.swap(sorted);
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

class engine {
  public:
    engine(std::span<const sa_root> roots, std::uint32_t depth0, const expand_params & p) :
        roots_(roots), depth0_(depth0), p_(p) {}

    cand_tree run_sa() {
        enode root;
        root.score     = 1.0;
        root.key       = p_.weight;
        root.ranges_at = 0;
        for (const sa_root & r : roots_) {
            ranges_.push_back(r.range);
            root.count += r.range.size();
        }
        nodes_.push_back(root);
        return run();
    }

    cand_tree run_rows(std::vector<token_id> rows, std::size_t width) {
        row_block blk;
        blk.width = width;
        blk.rows  = std::move(rows);
        if (width == 0) {
            blk.rows.clear();
        }
        sort_rows(blk);
        enode root;
        root.score = 1.0;
        root.key   = p_.weight;
        root.count = blk.n_rows();
        root.block = 0;
        root.b     = static_cast<std::uint32_t>(blk.n_rows());
        blocks_.push_back(std::move(blk));
        nodes_.push_back(root);
        return run();
    }

  private:
    cand_tree run() {
        out_.root_count = nodes_[0].count;
        const std::size_t n_top = static_cast<std::size_t>(std::max(p_.n_top, 0));
        if (nodes_[0].count == 0 || n_top == 0 || p_.depth_max <= 0) {
            return std::move(out_);
        }
        expand(0);
        while (out_.nodes.size() < n_top && !heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), heap_less_);
            const item it = heap_.back();
            heap_.pop_back();
            if (it.placeholder) {
                refine(it.node);
                continue;
            }
            enode & v = nodes_[it.node];
            v.out = static_cast<std::int32_t>(out_.nodes.size());
            cand_node c;
            c.token  = v.token;
            c.parent = v.parent == 0 ? -1 : nodes_[v.parent].out;
            c.depth  = v.depth;
            c.count  = v.count;
            c.score  = v.key;
            out_.nodes.push_back(c);
            if (v.depth < p_.depth_max && out_.nodes.size() < n_top) {
                expand(it.node);
            }
        }
        return std::move(out_);
    }

    // Lexicographic order of two distinct paths of equal depth: climb to the common parent.
    int path_cmp(std::int32_t a, std::int32_t b) const {
        while (nodes_[a].parent != nodes_[b].parent) {
            a = nodes_[a].parent;
            b = nodes_[b].parent;
        }
        return nodes_[a].token < nodes_[b].token ? -1 : (nodes_[a].token > nodes_[b].token ? 1 : 0);
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
        const enode & a = nodes_[x.node];
        const enode & b = nodes_[y.node];
        if (a.depth != b.depth) {
            return a.depth < b.depth;
        }
        return path_cmp(x.node, y.node) < 0;
    }

    void push(const item & it) {
        heap_.push_back(it);
        std::push_heap(heap_.begin(), heap_.end(), heap_less_);
    }

    std::int32_t add_child(std::int32_t v, token_id t, std::uint64_t count) {
        enode c;
        c.token  = t;
        c.parent = v;
        c.depth  = nodes_[v].depth + 1;
        c.count  = count;
        c.score  = child_score(nodes_[v].score, count, nodes_[v].count, p_.alpha);
        c.key    = p_.weight * c.score;
        nodes_.push_back(c);
        const auto idx = static_cast<std::int32_t>(nodes_.size() - 1);
        push({c.key, idx, false});
        return idx;
    }

    void expand(std::int32_t v) {
        if (nodes_[v].block >= 0) {
            expand_rows(v);
        } else if (nodes_[v].count <= p_.scan_max) {
            materialize(v);
            expand_rows(v);
        } else {
            discover_init(v);
        }
    }

    void expand_rows(std::int32_t v) {
        const std::int32_t  blk = nodes_[v].block;
        const std::uint32_t col = nodes_[v].col, a = nodes_[v].a, b = nodes_[v].b;
        if (col >= blocks_[blk].width) {
            return;
        }
        for (std::uint32_t g0 = a; g0 < b;) {
            const token_id t  = blocks_[blk].at(g0, col);
            std::uint32_t  g1 = g0 + 1;
            while (g1 < b && blocks_[blk].at(g1, col) == t) {
                ++g1;
            }
            if (t >= 0) {
                const std::int32_t c = add_child(v, t, g1 - g0);
                nodes_[c].block = blk;
                nodes_[c].a     = g0;
                nodes_[c].b     = g1;
                nodes_[c].col   = col + 1;
            }
            g0 = g1;
        }
    }

    // Reads every occurrence's continuation below v (one random access each) and switches v to rows mode.
    void materialize(std::int32_t v) {
        row_block blk;
        blk.width = static_cast<std::size_t>(p_.depth_max - nodes_[v].depth);
        const std::uint64_t d = depth0_ + static_cast<std::uint64_t>(nodes_[v].depth);
        blk.rows.assign(nodes_[v].count * blk.width, k_doc_end);
        std::size_t row = 0;
        for (std::size_t i = 0; i < roots_.size(); ++i) {
            const index_shard & sh = *roots_[i].shard;
            const sa_range      r  = ranges_[nodes_[v].ranges_at + i];
            // Two passes: the first touches every occurrence once with independent loads (their cache misses
            // overlap), the second reads the rest of each row from lines that are now cached.
            for (std::uint64_t rank = r.lo; rank < r.hi; ++rank) {
                blk.rows[(row + (rank - r.lo)) * blk.width] = sh.token_at(sh.suffix(rank) + d);
            }
            for (std::uint64_t rank = r.lo; rank < r.hi; ++rank, ++row) {
                const std::uint64_t pos = sh.suffix(rank) + d;
                token_id *          out = blk.rows.data() + row * blk.width;
                for (std::size_t k = 1; k < blk.width && out[k - 1] != k_doc_end; ++k) {
                    out[k] = sh.token_at(pos + k);
                }
            }
            out_.n_probes += r.size();
        }
        sort_rows(blk);
        nodes_[v].block = static_cast<std::int32_t>(blocks_.size());
        nodes_[v].a     = 0;
        nodes_[v].b     = static_cast<std::uint32_t>(blk.n_rows());
        nodes_[v].col   = 0;
        blocks_.push_back(std::move(blk));
    }

    sa_range range_of(std::int32_t v, std::size_t shard) const { return ranges_[nodes_[v].ranges_at + shard]; }
    std::vector<sa_range> & covered(std::int32_t v, std::size_t shard) {
        return covered_[static_cast<std::size_t>(nodes_[v].disc) * roots_.size() + shard];
    }

    static void insert_run(std::vector<sa_range> & runs, sa_range run) {
        auto it = std::upper_bound(runs.begin(), runs.end(), run.lo,
                                   [](std::uint64_t lo, const sa_range & r) { return lo < r.lo; });
        runs.insert(it, run);
    }

    // Gaps of v's range in a shard that no discovered run covers.
    std::vector<sa_range> gaps(std::int32_t v, std::size_t shard) {
        std::vector<sa_range> g;
        const sa_range        r   = range_of(v, shard);
        std::uint64_t         pos = r.lo;
        for (const sa_range & run : covered(v, shard)) {
            if (run.lo > pos) {
                g.push_back({pos, run.lo});
            }
            pos = std::max(pos, run.hi);
        }
        if (r.hi > pos) {
            g.push_back({pos, r.hi});
        }
        return g;
    }

    // Any child not yet discovered lies in one gap per shard, so its count is at most the sum of the largest gaps.
    std::uint64_t bound(std::int32_t v) {
        std::uint64_t b = 0;
        for (std::size_t i = 0; i < roots_.size(); ++i) {
            std::uint64_t g = 0;
            for (const sa_range & gap : gaps(v, i)) {
                g = std::max(g, gap.size());
            }
            b += g;
        }
        return b;
    }

    // Discovers the run at `rank` in one shard and, for a real token, the child's runs in every other shard.
    sa_range probe(std::int32_t v, std::size_t shard, std::uint64_t rank) {
        const index_shard & sh = *roots_[shard].shard;
        const auto          d  = static_cast<std::uint32_t>(depth0_ + static_cast<std::uint64_t>(nodes_[v].depth));
        const token_id      t  = sh.next_token(rank, d);
        const sa_range      run = sh.run_at(range_of(v, shard), d, rank);
        out_.n_probes++;
        insert_run(covered(v, shard), run);
        if (t < 0) {
            return run;
        }
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
        nodes_[c].ranges_at  = at;
        return run;
    }

    // Probes a gap at stride s: every run of length >= s inside it contains a probe.
    void probe_gap(std::int32_t v, std::size_t shard, sa_range gap, std::uint64_t s) {
        std::uint64_t next_free = gap.lo;
        for (std::uint64_t pos = gap.lo + s - 1; pos < gap.hi; pos += s) {
            if (pos >= next_free) {
                next_free = probe(v, shard, pos).hi;
            }
        }
    }

    void push_placeholder(std::int32_t v) {
        const std::uint64_t b = bound(v);
        if (b > 0) {
            push({p_.weight * child_score(nodes_[v].score, b, nodes_[v].count, p_.alpha), v, true});
        }
    }

    void discover_init(std::int32_t v) {
        nodes_[v].disc = static_cast<std::int32_t>(covered_.size() / std::max<std::size_t>(roots_.size(), 1));
        covered_.resize(covered_.size() + roots_.size());
        for (std::size_t i = 0; i < roots_.size(); ++i) {
            const sa_range r = range_of(v, i);
            if (!r.empty()) {
                const std::uint64_t s = std::max<std::uint64_t>(1, (r.size() + k_initial_probes - 1) / k_initial_probes);
                // Runs already found through another shard are skipped inside probe_gap's gaps below.
                for (const sa_range & gap : gaps(v, i)) {
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
        for (std::size_t i = 0; i < roots_.size(); ++i) {
            const std::vector<sa_range> g = gaps(v, i);
            std::uint64_t               widest = 0;
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

    std::span<const sa_root>           roots_;
    std::uint64_t                      depth0_ = 0;
    expand_params                      p_;
    std::vector<enode>                 nodes_;
    std::vector<sa_range>              ranges_;
    std::vector<std::vector<sa_range>> covered_;  // [disc * n_roots + shard]: runs found, sorted by lo
    std::vector<row_block>             blocks_;
    std::vector<item>                  heap_;
    cand_tree                          out_;
    // std heaps keep the largest on top: "less" means "pops later".
    struct heap_less {
        const engine * e;
        bool operator()(const item & x, const item & y) const { return e->before(y, x); }
    } heap_less_{this};
};

}  // namespace

cand_tree expand_sa(std::span<const sa_root> roots, std::uint32_t depth0, const expand_params & p) {
    return engine(roots, depth0, p).run_sa();
}

cand_tree expand_rows(std::vector<token_id> rows, std::size_t width, const expand_params & p) {
    return engine({}, 0, p).run_rows(std::move(rows), width);
}

}  // namespace rest
