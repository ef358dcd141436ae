// Best-first selection (expand_sa over suffix-array shards, expand_rows over explicit rows) against brute force:
// every continuation (or the same even sample of them) enumerated, every prefix counted and scored, sorted, cut to n.
#include "draft/sa-search.h"
#include "draft/tree-expand.h"
#include "ref/ref-draft.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <sstream>

using namespace rest;
using rest_ref::ref_shard;

namespace {

std::vector<rest_ref::node> as_nodes(const cand_tree & t) {
    std::vector<rest_ref::node> out;
    for (const cand_node & c : t.nodes) {
        rest_ref::path_t p = c.parent < 0 ? rest_ref::path_t{} : out[static_cast<std::size_t>(c.parent)].path;
        p.push_back(c.token);
        EXPECT_EQ(static_cast<std::size_t>(c.depth), p.size());
        out.push_back({p, c.count, c.score});
    }
    return out;
}

std::string show(const rest_ref::path_t & p) {
    std::ostringstream os;
    for (const token_id t : p) {
        os << t << ' ';
    }
    return os.str();
}

// Element-by-element comparison; reports the first differing index.
void expect_same(const std::vector<rest_ref::node> & got, const std::vector<rest_ref::node> & want,
                 const std::string & where) {
    for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
        ASSERT_EQ(show(got[i].path), show(want[i].path)) << where << ": first difference at node " << i;
        ASSERT_EQ(got[i].count, want[i].count) << where << ": count of node " << i;
        ASSERT_EQ(got[i].score, want[i].score) << where << ": score of node " << i;
    }
    ASSERT_EQ(got.size(), want.size()) << where << ": node count";
}

struct shard_set {
    std::vector<std::unique_ptr<ref_shard>> shards;
    std::vector<index_shard>                views;
    std::vector<const std::vector<token_id> *> texts;
};

shard_set make_shards(std::mt19937 & rng, int n_shards, int n_docs, int len_max, int n_vocab) {
    shard_set s;
    for (int i = 0; i < n_shards; ++i) {
        const auto docs = rest_ref::random_documents(rng, n_docs, len_max, n_vocab);
        s.shards.push_back(std::make_unique<ref_shard>(rest_ref::join_documents(docs), (i % 2) ? 4 : 2));
    }
    for (const auto & sh : s.shards) {
        s.views.push_back(sh->view());
        s.texts.push_back(&sh->text);
    }
    return s;
}

}  // namespace

TEST(draft_expand, sa_selection_equals_brute_force) {
    std::mt19937 rng(11);
    int          n_checked = 0, n_sampled = 0;
    for (const int n_vocab : {2, 3, 6, 40}) {
        for (const int n_shards : {1, 3}) {
            const shard_set set = make_shards(rng, n_shards, 30, 120, n_vocab);
            for (int trial = 0; trial < 40; ++trial) {
                // A pattern taken from the corpus (length 1..3, so ranges are large with small alphabets).
                const auto &          text = *set.texts[rng() % set.texts.size()];
                std::vector<token_id> pat;
                std::size_t           p   = rng() % text.size();
                const std::size_t     len = 1 + rng() % 3;
                while (pat.size() < len && p < text.size() && text[p] != k_doc_end) {
                    pat.push_back(text[p++]);
                }
                if (pat.empty()) {
                    continue;
                }
                std::vector<sa_root> roots;
                for (const index_shard & v : set.views) {
                    roots.push_back({&v, v.find(pat)});
                }
                expand_params ep;
                ep.n_top     = std::vector<int>{1, 5, 16, 64}[rng() % 4];
                ep.depth_max = std::vector<int>{1, 3, 10}[rng() % 3];
                ep.alpha     = (trial % 2) ? 1.5 : 0.0;
                ep.scan_max  = std::vector<std::uint64_t>{0, 4, 64, 100000}[rng() % 4];
                const cand_tree got = expand_sa(roots, static_cast<std::uint32_t>(pat.size()), ep);
                const auto conts = rest_ref::sample_continuations(set.texts, pat, ep.depth_max, ep.scan_max);
                const auto counts = rest_ref::count_prefixes(conts, ep.depth_max);
                const auto want   = rest_ref::top(rest_ref::score_all(counts, conts.n_total, ep.alpha), ep.n_top);
                EXPECT_EQ(got.root_count, conts.n_total);
                EXPECT_EQ(got.n_probes, conts.conts.size());
                std::ostringstream where;
                where << "vocab " << n_vocab << " shards " << n_shards << " trial " << trial << " pattern "
                      << show(pat) << "n_top " << ep.n_top << " depth " << ep.depth_max << " scan " << ep.scan_max;
                expect_same(as_nodes(got), want, where.str());
                ++n_checked;
                n_sampled += got.n_probes < got.root_count;
            }
        }
    }
    EXPECT_GT(n_checked, 200);
    EXPECT_GT(n_sampled, 50) << "the trials should often read a sample";
}

// A sample's counts are estimates: in each shard a node's occurrences are one run of ranks, which holds its share
// of the evenly spaced rows to within one row, so every count is within one row's share (n / scan_max) per shard of
// the truth.
TEST(draft_expand, sampled_counts_are_within_a_row_per_shard_of_exact) {
    std::mt19937 rng(12);
    int          n_nodes = 0;
    for (const int n_shards : {1, 3}) {
        const shard_set set = make_shards(rng, n_shards, 200 / n_shards, 200, 30);
        for (const token_id first : {0, 1, 2, 3}) {
            const token_id       pat[] = {first};
            std::vector<sa_root> roots;
            for (const index_shard & v : set.views) {
                roots.push_back({&v, v.find(pat)});
            }
            expand_params ep;
            ep.n_top    = 64;
            ep.scan_max = 32;
            const cand_tree got = expand_sa(roots, 1, ep);
            ASSERT_GT(got.root_count, 10 * ep.scan_max) << "the test wants a match much larger than the sample";
            const auto counts =
                rest_ref::count_prefixes(rest_ref::continuations(set.texts, pat, ep.depth_max), ep.depth_max);
            const double row = static_cast<double>(got.root_count) / static_cast<double>(ep.scan_max);
            for (const rest_ref::node & n : as_nodes(got)) {
                EXPECT_LE(std::abs(static_cast<double>(n.count) - static_cast<double>(counts.at(n.path))),
                          n_shards * row + 1)
                    << n_shards << " shards, path " << show(n.path);
                ++n_nodes;
            }
        }
    }
    EXPECT_GT(n_nodes, 200);
}

TEST(draft_expand, rows_selection_equals_brute_force) {
    std::mt19937 rng(13);
    for (int trial = 0; trial < 300; ++trial) {
        const std::size_t            width = 1 + rng() % 6;
        const std::size_t            n     = rng() % 40;
        const int                    vocab = 1 + static_cast<int>(rng() % 5);
        std::vector<token_id>        rows;
        std::vector<rest_ref::path_t> conts;
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t len = rng() % (width + 1);
            rest_ref::path_t  c;
            for (std::size_t k = 0; k < width; ++k) {
                const token_id t = k < len ? static_cast<token_id>(rng() % static_cast<unsigned>(vocab)) : k_doc_end;
                rows.push_back(t);
                if (t != k_doc_end) {
                    c.push_back(t);
                }
            }
            conts.push_back(c);
        }
        expand_params ep;
        ep.n_top     = 1 + static_cast<int>(rng() % 20);
        ep.depth_max = 1 + static_cast<int>(rng() % 8);
        ep.alpha     = (trial % 3) * 0.5;
        const cand_tree got  = expand_rows(rows, width, ep);
        const auto      want = rest_ref::top(
            rest_ref::score_all(rest_ref::count_prefixes(conts, ep.depth_max), conts.size(), ep.alpha), ep.n_top);
        EXPECT_EQ(got.root_count, n);
        expect_same(as_nodes(got), want, "trial " + std::to_string(trial));
    }
}

TEST(draft_expand, empty_inputs) {
    expand_params ep;
    EXPECT_TRUE(expand_rows({}, 4, ep).nodes.empty());
    EXPECT_TRUE(expand_sa({}, 0, ep).nodes.empty());
    ep.n_top = 0;
    EXPECT_TRUE(expand_rows(std::vector<token_id>{1, 2}, 2, ep).nodes.empty());
    // Nothing asked for: no rows read, but the match's size is still reported.
    const ref_shard   shard(rest_ref::join_documents({{1, 2, 1, 3}}), 2);
    const index_shard v       = shard.view();
    const token_id    one[]   = {1};
    const sa_root     root{&v, v.find(one)};
    for (const auto & [n_top, depth_max] : {std::pair{0, 3}, std::pair{4, 0}}) {
        ep.n_top     = n_top;
        ep.depth_max = depth_max;
        const cand_tree t = expand_sa({&root, 1}, 1, ep);
        EXPECT_TRUE(t.nodes.empty());
        EXPECT_EQ(t.root_count, 2u);
        EXPECT_EQ(t.n_probes, 0u);
    }
}
