// The drafter end to end (datastore shards + context + history, merged under a budget) against a brute-force
// reference, plus tree invariants and determinism under random inputs.
#include "rest/drafter.h"
#include "rest/history-store.h"

#include "ref/ref-draft.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <sstream>

using namespace rest;
using rest_ref::memory_datastore;
using rest_ref::ref_shard;

namespace {

struct ref_source {
    std::vector<rest_ref::node> all;  // every node of the source's trie, scored
    int                         match_len = 0;
};

ref_source ref_sa_source(const std::vector<const std::vector<token_id> *> & texts, std::span<const token_id> ctx,
                         const drafter_params & p, double alpha) {
    ref_source s;
    const int  k = rest_ref::longest_suffix(texts, ctx, p.n_match_max);
    if (k < p.n_match_min) {
        return s;
    }
    s.match_len = k;
    const auto conts =
        rest_ref::sample_continuations(texts, ctx.last(static_cast<std::size_t>(k)), p.depth_max, p.scan_max);
    s.all = rest_ref::score_all(rest_ref::count_prefixes(conts, p.depth_max), conts.n_total, alpha);
    return s;
}

ref_source ref_context_source(std::span<const token_id> ctx, const drafter_params & p) {
    ref_source s;
    const auto m = rest_ref::match_context({ctx.begin(), ctx.end()}, p.n_match_min, p.n_match_max,
                                           p.n_context_occ_max, p.depth_max);
    if (m.len == 0) {
        return s;
    }
    s.match_len = m.len;
    s.all = rest_ref::score_all(rest_ref::count_prefixes(m.conts, p.depth_max), m.conts.size(), p.alpha_context);
    return s;
}

struct ref_out {
    rest_ref::path_t path;
    float            score;
    std::uint8_t     mask;
};

// Union of the sources' complete tries, each node scored by its best weighted source score; the mask names the
// sources whose own top n (by weighted score) holds the node.
std::vector<ref_out> ref_merge(const std::vector<std::pair<ref_source, std::pair<draft_source, double>>> & sources,
                               int n) {
    std::map<rest_ref::path_t, double>       best;
    std::map<rest_ref::path_t, std::uint8_t> mask;
    for (const auto & [src, meta] : sources) {
        std::vector<rest_ref::node> weighted = src.all;
        for (auto & nd : weighted) {
            nd.score = meta.second * nd.score;
            double & b = best[nd.path];
            b          = std::max(b, nd.score);
        }
        for (const auto & nd : rest_ref::top(weighted, n)) {
            mask[nd.path] |= static_cast<std::uint8_t>(meta.first);
        }
    }
    std::vector<rest_ref::node> all;
    for (const auto & [p, s] : best) {
        all.push_back({p, 0, s});
    }
    std::vector<ref_out> out;
    for (const auto & nd : rest_ref::top(all, n)) {
        out.push_back({nd.path, static_cast<float>(nd.score), mask[nd.path]});
    }
    return out;
}

std::vector<ref_out> as_out(const draft_tree & t) {
    std::vector<ref_out> out;
    for (std::size_t i = 0; i < t.size(); ++i) {
        rest_ref::path_t p = t.parents[i] < 0 ? rest_ref::path_t{} : out[static_cast<std::size_t>(t.parents[i])].path;
        p.push_back(t.tokens[i]);
        out.push_back({p, t.scores[i], t.sources[i]});
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

// Nodes near index i side by side, with full-precision scores and source masks.
std::string show_around(const std::vector<ref_out> & got, const std::vector<ref_out> & want, std::size_t i) {
    std::ostringstream os;
    os.precision(17);
    for (std::size_t j = i > 3 ? i - 3 : 0; j < std::max(got.size(), want.size()) && j < i + 4; ++j) {
        os << j << ": got ";
        if (j < got.size()) {
            os << show(got[j].path) << got[j].score << " mask " << +got[j].mask;
        }
        os << " | want ";
        if (j < want.size()) {
            os << show(want[j].path) << want[j].score << " mask " << +want[j].mask;
        }
        os << "\n";
    }
    return os.str();
}

// Tokens that mostly follow one of the texts (so every source matches sometimes).
token_id next_token(std::mt19937 & rng, const std::vector<token_id> & text, std::size_t & pos, int n_vocab) {
    const unsigned r = rng() % 100;
    if (r < 70 && pos < text.size() && text[pos] != k_doc_end) {
        return text[pos++];
    }
    if (r < 95) {
        pos = rng() % text.size();
    }
    return static_cast<token_id>(rng() % static_cast<unsigned>(n_vocab));
}

void check_invariants(const draft_tree & t, int n_budget, const drafter_params & p, const std::string & where) {
    ASSERT_EQ(t.check_integrity(), "") << where;
    ASSERT_LE(t.size(), static_cast<std::size_t>(std::min(n_budget, p.n_budget_max))) << where;
    for (std::size_t i = 0; i < t.size(); ++i) {
        ASSERT_LE(t.depths[i], p.depth_max) << where << " node " << i;
        ASSERT_GT(t.scores[i], 0.0f) << where << " node " << i;
    }
}

}  // namespace

TEST(draft_drafter, merged_tree_equals_brute_force) {
    std::mt19937 rng(21);
    int          n_steps = 0, n_nonempty = 0;
    int          n_by_source[3] = {0, 0, 0};
    for (int round = 0; round < 12; ++round) {
        const int        n_vocab = std::vector<int>{3, 6, 20}[round % 3];
        memory_datastore ds(rng, 1 + round % 2, 12, 80, n_vocab);
        history_store    hist({.n_tokens_max = 1u << 20});
        std::vector<std::vector<token_id>> hist_docs = rest_ref::random_documents(rng, 6, 60, n_vocab);
        for (const auto & d : hist_docs) {
            hist.add(d);
        }
        // The store's segments in order: a sampled selection reads occurrences segment by segment.
        std::vector<std::vector<token_id>>       hist_seg_texts;
        std::vector<const std::vector<token_id> *> hist_texts;
        for (const auto & seg : hist.snapshot()->segments) {
            hist_seg_texts.push_back(rest_ref::join_documents(seg->documents()));
        }
        for (const auto & t : hist_seg_texts) hist_texts.push_back(&t);

        drafter_params p;
        p.n_match_max       = std::vector<int>{2, 4, 16}[round % 3];
        p.n_match_min       = std::min(p.n_match_max, 1 + round % 3);
        p.depth_max         = std::vector<int>{1, 4, 10}[(round / 3) % 3];
        p.n_budget_max      = 48;
        p.alpha_datastore   = (round % 4 == 1) ? 0.7 : 0.0;
        p.alpha_context     = (round % 3 == 1) ? 0.5 : 0.0;
        p.alpha_history     = (round % 2 == 1) ? 1.5 : 0.0;
        p.weight_context    = (round % 4 == 2) ? 0.5 : 1.0;
        p.weight_history    = (round % 4 == 3) ? 0.8 : 1.0;
        p.n_context_occ_max = (round % 5 == 0) ? 3 : 256;
        p.scan_max          = (round % 2) ? 0 : 64;
        p.cache_min         = (round % 3 == 0) ? 0 : 256;  // 0: every selection goes through the cache
        drafter dr(&ds, &hist, p);

        const auto  texts = ds.texts();
        std::size_t pos   = 0;
        std::vector<token_id> ctx;
        for (int i = 0; i < 1 + static_cast<int>(rng() % 10); ++i) {
            ctx.push_back(next_token(rng, *texts[0], pos, n_vocab));
        }
        dr.reset(ctx);
        for (int step = 0; step < 60; ++step) {
            const int   n_budget = 1 + static_cast<int>(rng() % 60);
            draft_stats st;
            const draft_tree tree = dr.draft(n_budget, &st);
            const std::string where = "round " + std::to_string(round) + " step " + std::to_string(step);
            check_invariants(tree, n_budget, p, where);

            const int n = std::min(n_budget, p.n_budget_max);
            const ref_source r_ds   = ref_sa_source(texts, ctx, p, p.alpha_datastore);
            const ref_source r_ctx  = ref_context_source(ctx, p);
            const ref_source r_hist = ref_sa_source(hist_texts, ctx, p, p.alpha_history);
            ASSERT_EQ(st.match_len_datastore, r_ds.match_len) << where;
            ASSERT_EQ(st.match_len_context, r_ctx.match_len) << where;
            ASSERT_EQ(st.match_len_history, r_hist.match_len) << where;
            const auto want = ref_merge({{r_ds, {draft_source::datastore, p.weight_datastore}},
                                         {r_ctx, {draft_source::context, p.weight_context}},
                                         {r_hist, {draft_source::history, p.weight_history}}},
                                        n);
            const auto got = as_out(tree);
            for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
                ASSERT_EQ(show(got[i].path), show(want[i].path))
                    << where << ": first difference at node " << i << "\n" << show_around(got, want, i);
                ASSERT_EQ(got[i].score, want[i].score) << where << ": score of node " << i;
                ASSERT_EQ(+got[i].mask, +want[i].mask) << where << ": sources of node " << i;
            }
            ASSERT_EQ(got.size(), want.size()) << where;
            ++n_steps;
            n_nonempty += !tree.empty();
            n_by_source[0] += st.n_nodes_datastore > 0;
            n_by_source[1] += st.n_nodes_context > 0;
            n_by_source[2] += st.n_nodes_history > 0;

            std::vector<token_id> add;
            for (std::size_t k = 1 + rng() % 4; k > 0; --k) {
                add.push_back(next_token(rng, *texts[0], pos, n_vocab));
            }
            ctx.insert(ctx.end(), add.begin(), add.end());
            dr.accept(add);
        }
        EXPECT_EQ(std::vector<token_id>(dr.context().begin(), dr.context().end()), ctx);
    }
    EXPECT_GT(n_nonempty, n_steps / 2);
    for (const int c : n_by_source) {
        EXPECT_GT(c, n_steps / 10) << "every source should contribute in some steps";
    }
}

TEST(draft_drafter, invariants_determinism_and_prefixes) {
    std::mt19937 rng(22);
    for (int round = 0; round < 20; ++round) {
        const int        n_vocab = 2 + static_cast<int>(rng() % 30);
        memory_datastore ds(rng, 1 + round % 3, 20, 200, n_vocab);
        drafter_params   p;
        p.depth_max    = 1 + static_cast<int>(rng() % 12);
        p.n_budget_max = 64;
        p.scan_max     = rng() % 80;
        drafter a(&ds, nullptr, p), b(&ds, nullptr, p);
        const auto  texts = ds.texts();
        std::size_t pos   = 0;
        std::vector<token_id> prompt;
        for (int i = 0; i < 30; ++i) {
            prompt.push_back(next_token(rng, *texts[0], pos, n_vocab));
        }
        a.reset(prompt);
        b.reset(prompt);
        for (int step = 0; step < 40; ++step) {
            const int         n_budget = static_cast<int>(rng() % 80);
            const draft_tree  ta = a.draft(n_budget);
            const draft_tree  tb = b.draft(64);
            const std::string where = "round " + std::to_string(round) + " step " + std::to_string(step);
            check_invariants(ta, n_budget, p, where);
            check_invariants(tb, 64, p, where);
            // The budget only truncates: the smaller tree is a prefix of the larger one (same order, same scores).
            ASSERT_LE(ta.size(), tb.size()) << where;
            for (std::size_t i = 0; i < ta.size(); ++i) {
                ASSERT_EQ(ta.tokens[i], tb.tokens[i]) << where << " node " << i;
                ASSERT_EQ(ta.parents[i], tb.parents[i]) << where << " node " << i;
                ASSERT_EQ(ta.scores[i], tb.scores[i]) << where << " node " << i;
            }
            const draft_tree again = b.draft(64);  // no new tokens: same tree
            ASSERT_EQ(again.tokens, tb.tokens) << where;
            ASSERT_EQ(again.parents, tb.parents) << where;
            std::vector<token_id> add;
            for (std::size_t k = 1 + rng() % 3; k > 0; --k) {
                add.push_back(next_token(rng, *texts[0], pos, n_vocab));
            }
            a.accept(add);
            b.accept(add);
        }
    }
}

TEST(draft_drafter, finish_feeds_the_history_store) {
    history_store  hist({.n_tokens_max = 1000});
    drafter_params p;
    p.use_datastore = false;
    p.use_context   = false;
    p.alpha_history = 0;  // plain count ratios: a single occurrence predicts with probability 1
    drafter dr(nullptr, &hist, p);
    const std::vector<token_id> prompt = {1, 2, 3};
    const std::vector<token_id> output = {7, 8, 9, 10, 11};
    dr.reset(prompt);
    EXPECT_TRUE(dr.draft(8).empty());
    dr.accept(output);
    dr.finish();
    dr.finish();  // a second finish adds nothing
    EXPECT_EQ(hist.n_tokens(), output.size());
    EXPECT_EQ(hist.n_documents(), 1u);

    dr.reset(std::vector<token_id>{5, 7, 8});  // "7 8" was output before: the history proposes "9 10 11 ..."
    draft_stats      st;
    const draft_tree t = dr.draft(8, &st);
    EXPECT_EQ(st.match_len_history, 2);
    ASSERT_EQ(t.size(), 3u);
    EXPECT_EQ(t.tokens, (std::vector<token_id>{9, 10, 11}));
    EXPECT_EQ(t.sources[0], static_cast<std::uint8_t>(draft_source::history));
    EXPECT_FLOAT_EQ(t.scores[2], 1.0f);
}

TEST(draft_drafter, no_sources_and_bad_params) {
    drafter_params p;
    drafter        dr(nullptr, nullptr, p);
    dr.reset(std::vector<token_id>{1, 2, 1, 2, 1});
    const draft_tree t = dr.draft(10);  // only the context: "1 2 1" -> "2 1 ..."
    ASSERT_FALSE(t.empty());
    EXPECT_EQ(t.tokens[0], 2);
    EXPECT_EQ(dr.draft(0).size(), 0u);
    p.n_match_min = 0;
    EXPECT_THROW(drafter(nullptr, nullptr, p), std::invalid_argument);
    p = {};
    p.weight_context = 0;
    EXPECT_THROW(drafter(nullptr, nullptr, p), std::invalid_argument);
}
