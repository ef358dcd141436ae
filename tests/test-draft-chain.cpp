// Chains grown token by token (drafter::draft_chain) and the back-off estimate they use (src/draft/sa-backoff.h),
// each against a brute-force reference: counts by scanning plain token vectors, the chain by re-deriving every
// source's match for the context plus the chain so far at every step.
#include "rest/drafter.h"

#include "../src/draft/sa-backoff.h"
#include "ref/ref-draft.h"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <memory>
#include <sstream>

using namespace rest;
using rest_ref::memory_datastore;
using rest_ref::ref_shard;

namespace {

using texts_t = std::vector<const std::vector<token_id> *>;

// Occurrences of pattern over all texts, and of those the ones followed by each token.
struct naive_counts {
    std::uint64_t                     total = 0;
    std::map<token_id, std::uint64_t> next;
};

naive_counts count_naive(const texts_t & texts, std::span<const token_id> pattern) {
    naive_counts c;
    for (const auto * t : texts) {
        for (const std::size_t pos : rest_ref::occurrences(*t, pattern)) {
            c.total++;
            const std::size_t j = pos + pattern.size();
            if (j < t->size() && (*t)[j] != k_doc_end) c.next[(*t)[j]]++;
        }
    }
    return c;
}

// The most frequent next token (ties: the smaller), or -1.
token_id top_of(const std::map<token_id, std::uint64_t> & next) {
    token_id      best = -1;
    std::uint64_t n    = 0;
    for (const auto & [t, k] : next) {
        if (k > n) {
            best = t;
            n    = k;
        }
    }
    return best;
}

// The candidate a level offers: its most frequent next token, exactly up to scan_max occurrences, else the most
// frequent in the even sample of scan_max of them that the tree expander reads (ties: the smaller token).
token_id level_top(const texts_t & texts, std::span<const token_id> pattern, const naive_counts & c,
                   std::uint64_t scan_max) {
    if (c.total <= scan_max) return top_of(c.next);
    std::map<token_id, std::uint64_t> sampled;
    for (const auto & cont : rest_ref::sample_continuations(texts, pattern, 1, scan_max).conts) {
        if (!cont.empty()) sampled[cont[0]]++;
    }
    return top_of(sampled);
}

// sa-backoff.h's definition, from naive counts: levels L, L/2, ... while a level has few occurrences.
struct naive_backoff {
    std::vector<int>          lens;    // longest first
    std::vector<naive_counts> levels;
    std::vector<token_id>     tops;    // level_top() of each level
    double                    alpha = 1;
    std::uint64_t             scan_max = 0;

    naive_backoff() = default;
    naive_backoff(const texts_t & texts, std::span<const token_id> text, int n_min, int n_max, const backoff_params & p) :
        alpha(p.alpha), scan_max(p.scan_max) {
        const int L = rest_ref::longest_suffix(texts, text, n_max);
        if (L < n_min) return;
        int k = L;
        for (;;) {
            lens.push_back(k);
            levels.push_back(count_naive(texts, text.last(static_cast<std::size_t>(k))));
            tops.push_back(level_top(texts, text.last(static_cast<std::size_t>(k)), levels.back(), scan_max));
            if (levels.back().total >= p.n_confident || static_cast<int>(levels.size()) >= p.n_levels_max) break;
            const int k2 = std::max(n_min, k / 2);
            if (k2 >= k) break;
            k = k2;
        }
    }
    // The same levels one token longer each (the text grew by one token); levels without occurrences dropped.
    naive_backoff grown(const texts_t & texts, std::span<const token_id> text) const {
        naive_backoff g;
        g.alpha    = alpha;
        g.scan_max = scan_max;
        for (const int k : lens) {
            naive_counts c = count_naive(texts, text.last(static_cast<std::size_t>(k + 1)));
            if (c.total > 0) {
                g.lens.push_back(k + 1);
                g.tops.push_back(level_top(texts, text.last(static_cast<std::size_t>(k + 1)), c, scan_max));
                g.levels.push_back(std::move(c));
            }
        }
        return g;
    }
    double prob(token_id t) const {
        double prior = 0;
        for (std::size_t j = levels.size(); j-- > 0;) {
            const auto   it = levels[j].next.find(t);
            const double c  = it == levels[j].next.end() ? 0.0 : static_cast<double>(it->second);
            prior           = (c + alpha * prior) / (static_cast<double>(levels[j].total) + alpha);
        }
        return prior;
    }
    std::vector<token_id> candidates() const {
        std::vector<token_id> out;
        for (const token_id t : tops) {
            if (t >= 0 && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
        }
        return out;
    }
};

// Tokens that mostly follow one of the texts (so that long matches happen), with random jumps and tokens.
std::vector<token_id> random_context(std::mt19937 & rng, const std::vector<token_id> & text, int n, int n_vocab) {
    std::vector<token_id> c;
    std::size_t           pos = rng() % text.size();
    while (static_cast<int>(c.size()) < n) {
        const unsigned r = rng() % 100;
        if (r < 80 && pos < text.size() && text[pos] != k_doc_end) {
            c.push_back(text[pos++]);
        } else {
            if (r < 95) pos = rng() % text.size();
            c.push_back(static_cast<token_id>(rng() % static_cast<unsigned>(n_vocab)));
        }
    }
    return c;
}

}  // namespace

TEST(draft_chain, backoff_estimate_equals_naive_counts) {
    std::mt19937 rng(7);
    int          n_checked = 0, n_backed_off = 0;
    for (int round = 0; round < 40; ++round) {
        const int        n_vocab = std::vector<int>{3, 8, 30}[round % 3];
        memory_datastore ds(rng, 1 + round % 3, 10, 60, n_vocab);
        const auto       texts = ds.texts();
        backoff_params   p;
        p.n_min        = 1 + round % 3;
        p.alpha        = std::vector<double>{1.0, 0.5, 3.0, 0.0}[round % 4];
        p.n_confident  = std::vector<std::uint64_t>{1, 4, 8, 100}[(round / 4) % 4];
        p.n_levels_max = 1 + (round / 2) % 4;
        p.scan_max     = round % 2 ? 64 : 2;  // small: most levels are probed rather than read in full
        const int n_max = 4 + round % 13;
        std::vector<sa_bigram_memo> memos(ds.shards().size());
        tree_expander               x;
        sa_backoff                  kept;  // across queries: continuations of frequent levels are remembered
        for (int q = 0; q < 20; ++q) {
            const auto text = random_context(rng, *texts[rng() % texts.size()], 1 + static_cast<int>(rng() % 24), n_vocab);
            std::vector<sa_match> ms(ds.shards().size());
            int                   len = 0;
            for (std::size_t i = 0; i < ms.size(); ++i) {
                sa_match_update(ds.shards()[i], ms[i], text, 0, n_max, nullptr, &memos[i]);
                len = std::max(len, ms[i].len);
            }
            sa_backoff bo;
            bo.set(ds.shards(), ms, len, text, p, memos);
            const naive_backoff want(texts, text, p.n_min, n_max, p);
            ASSERT_EQ(bo.n_levels(), static_cast<int>(want.levels.size())) << "round " << round << " query " << q;
            for (int j = 0; j < bo.n_levels(); ++j) {
                ASSERT_EQ(bo.count(j), want.levels[static_cast<std::size_t>(j)].total) << "level " << j;
            }
            for (token_id t = 0; t < n_vocab; ++t) {
                ASSERT_DOUBLE_EQ(bo.prob(t), want.prob(t)) << "round " << round << " query " << q << " token " << t;
            }
            std::vector<token_id> cands;
            bo.candidates(cands, x);
            ASSERT_EQ(cands, want.candidates()) << "round " << round << " query " << q;
            for (int rep = 0; rep < 2; ++rep) {  // the second time from what it remembered
                kept.set(ds.shards(), ms, len, text, p, memos);
                cands.clear();
                kept.candidates(cands, x);
                ASSERT_EQ(cands, want.candidates()) << "remembered, round " << round << " query " << q;
            }
            n_checked++;
            n_backed_off += bo.n_levels() > 1;
        }
    }
    EXPECT_GT(n_backed_off, 50);  // the reference exercised more than one level often
    EXPECT_EQ(n_checked, 800);
}

TEST(draft_chain, backoff_forgets_continuations_of_other_shards) {
    // Two shards where "0" has the same suffix-array range (the smallest token, 50 times in each) and another next
    // token: a continuation remembered from one must not answer for the other.
    std::vector<token_id> ta, tb;
    for (int i = 0; i < 50; ++i) {
        ta.insert(ta.end(), {0, 1});
        tb.insert(tb.end(), {0, 2});
    }
    const ref_shard a(ta, 2), b(tb, 2);
    const std::array<index_shard, 1> sa{a.view()}, sb{b.view()};
    backoff_params p;
    p.n_min    = 1;
    p.scan_max = 1;  // a frequent level: its continuation is remembered
    const std::vector<token_id> text{0};
    tree_expander x;
    sa_backoff    kept;
    std::vector<token_id> got;
    for (const auto & [shards, want] : {std::pair{&sa, 1}, std::pair{&sb, 2}, std::pair{&sa, 1}}) {
        std::vector<sa_match> ms(1);
        sa_match_update((*shards)[0], ms[0], text, 0, 4);
        ASSERT_EQ(ms[0].len, 1);
        ASSERT_EQ(ms[0].range, (sa_range{0, 50}));
        kept.set(*shards, ms, 1, text, p, {});
        got.clear();
        kept.candidates(got, x);
        EXPECT_EQ(got, std::vector<token_id>{want});
    }
    // The same shard table given other contents (a history snapshot grown in place): forget() clears it.
    ref_shard                  c(ta, 2);
    std::array<index_shard, 1> sc{c.view()};
    auto candidates_of_c = [&] {
        std::vector<sa_match> ms(1);
        sa_match_update(sc[0], ms[0], text, 0, 4);
        kept.set(sc, ms, 1, text, p, {});
        got.clear();
        kept.candidates(got, x);
        return got;
    };
    EXPECT_EQ(candidates_of_c(), std::vector<token_id>{1});
    c     = ref_shard(tb, 2);
    sc[0] = c.view();
    kept.forget();
    EXPECT_EQ(candidates_of_c(), std::vector<token_id>{2});
}

TEST(draft_chain, backoff_with_a_confident_match_is_the_tree_estimate) {
    std::mt19937     rng(3);
    memory_datastore ds(rng, 1, 20, 80, 4);
    const auto       texts = ds.texts();
    backoff_params   p;
    p.n_confident = 1;  // any match is confident: one level, c / (C + alpha) as expand_sa scores depth 1
    for (int q = 0; q < 50; ++q) {
        const auto            text = random_context(rng, *texts[0], 6, 4);
        std::vector<sa_match> ms(1);
        sa_match_update(ds.shards()[0], ms[0], text, 0, 8);
        sa_backoff bo;
        bo.set(ds.shards(), ms, ms[0].len, text, p, {});
        if (ms[0].len < p.n_min) continue;
        ASSERT_EQ(bo.n_levels(), 1);
        const sa_root root{&ds.shards()[0], ms[0].range};
        expand_params ep;
        ep.n_top = 100, ep.depth_max = 1, ep.alpha = p.alpha;
        ep.scan_max = UINT64_MAX;  // every occurrence read: the tree's counts exact, as the back-off's are
        for (const cand_node & c : expand_sa({&root, 1}, static_cast<std::uint32_t>(ms[0].len), ep).nodes) {
            ASSERT_DOUBLE_EQ(bo.prob(c.token), c.score);
        }
    }
}

namespace {

// The chain drafter::draft_chain grows, by brute force (datastore and context sources, default weights).
struct ref_link {
    token_id     token;
    float        score;
    std::uint8_t mask;
};

// The context's weight against the datastore's estimate alone, learned per request by Bayes' rule from the token
// that follows each chain's start (first: both estimates of that step's candidates).
struct ref_weight {
    double                                   w = 0.9;
    std::vector<std::array<double, 3>>       first;  // token, context's estimate, datastore's
    void update(token_id x) {
        if (!first.empty()) {
            double p_ctx = 1e-3, p_sa = 1e-3;
            for (const auto & f : first) {
                if (static_cast<token_id>(f[0]) == x) {
                    p_ctx = std::max(p_ctx, f[1]);
                    p_sa  = std::max(p_sa, f[2]);
                }
            }
            w = std::clamp(w * p_ctx / (w * p_ctx + (1 - w) * p_sa), 0.02, 0.98);
        }
        first.clear();
    }
};

std::vector<ref_link> ref_chain(const texts_t & texts, const std::vector<token_id> & ctx, const drafter_params & p,
                                ref_weight & rw,
                                int n_max, int want, float score_min) {
    std::vector<ref_link> out;
    std::vector<token_id> ext = ctx;
    rw.first.clear();
    backoff_params        bp;
    bp.n_min        = p.n_match_min;
    bp.alpha        = p.alpha_datastore;
    bp.n_confident  = p.backoff_confident;
    bp.n_levels_max = p.backoff_levels;
    const std::size_t n = ctx.size();
    double            score = 1;
    naive_backoff     ds;
    bool              ds_dead = false, ctx_dead = false;
    std::vector<std::size_t> occ;
    for (int i = 0; i < n_max; ++i) {
        std::vector<token_id> cands;
        // The datastore's levels: grown by the last chain token, chosen anew (from the longest match) where none is
        // left; a search that finds nothing (the first one included) silences the source for the rest of the chain.
        if (i > 0) ds = ds.grown(texts, ext);
        if (ds.levels.empty() && p.use_datastore && !ds_dead) {
            ds      = naive_backoff(texts, ext, p.n_match_min, p.n_match_max, bp);
            ds_dead = ds.levels.empty();
        }
        if (p.use_datastore) cands = ds.candidates();
        // Context: its occurrences (end positions e <= n - 2 in ctx) grow with the chain while some remain and all
        // are known; else the largest k in [n_min, n_max] whose last k tokens of ext occur so, the most recent
        // n_context_occ_max of them.
        bool grew = false;
        if (i > 0 && !occ.empty() && occ.size() < p.n_context_occ_max) {
            std::vector<std::size_t> next;
            for (const std::size_t e : occ) {
                if (e + 3 <= n && ctx[e + 1] == ext.back()) next.push_back(e + 1);
            }
            occ  = next;
            grew = !occ.empty();
        }
        if (!grew && p.use_context && !ctx_dead) {
            occ.clear();
            for (int k = std::min<int>(p.n_match_max, static_cast<int>(ext.size())); k >= p.n_match_min && occ.empty(); --k) {
                for (std::size_t e = static_cast<std::size_t>(k) - 1; e + 2 <= n; ++e) {
                    if (std::equal(ctx.begin() + static_cast<std::ptrdiff_t>(e + 1 - static_cast<std::size_t>(k)),
                                   ctx.begin() + static_cast<std::ptrdiff_t>(e + 1), ext.end() - k)) {
                        occ.push_back(e);
                    }
                }
            }
            if (occ.size() > p.n_context_occ_max) occ.erase(occ.begin(), occ.end() - static_cast<std::ptrdiff_t>(p.n_context_occ_max));
            ctx_dead = occ.empty();
        }
        std::map<token_id, std::uint64_t> ctx_next;
        for (const std::size_t e : occ) ctx_next[ctx[e + 1]]++;
        if (const token_id t = top_of(ctx_next); t >= 0 && std::find(cands.begin(), cands.end(), t) == cands.end()) {
            cands.push_back(t);
        }
        token_id     best = -1;
        double       best_p = 0;
        std::uint8_t mask = 0;
        for (const token_id t : cands) {
            const double p_ds = p.use_datastore ? ds.prob(t) : 0.0;
            const double c    = occ.empty() ? 0.0 : static_cast<double>(ctx_next[t]);
            const double mix  = occ.empty() ? p_ds
                                            : (c + p.alpha_context * p_ds) / (static_cast<double>(occ.size()) + p.alpha_context);
            const double pr   = rw.w * mix + (1 - rw.w) * p_ds;
            if (i == 0 && !occ.empty()) rw.first.push_back({static_cast<double>(t), mix, p_ds});
            if (pr > best_p || (pr == best_p && pr > 0 && t < best)) {
                best   = t;
                best_p = pr;
                mask   = static_cast<std::uint8_t>((p_ds > 0 ? 1 : 0) | (c > 0 ? 2 : 0));
            }
        }
        // The first `want` nodes are kept whatever their score (the budget's to choose); past them, the threshold.
        if (best < 0 || best_p <= 0 || (i >= std::max(want, 1) && score * best_p < score_min)) break;
        score *= best_p;
        out.push_back({best, static_cast<float>(score), mask});
        ext.push_back(best);
    }
    return out;
}

}  // namespace

TEST(draft_chain, chain_equals_brute_force) {
    std::mt19937 rng(11);
    int          n_chains = 0, n_long = 0, n_cut_by_score = 0, n_first_only = 0;
    for (int round = 0; round < 24; ++round) {
        const int        n_vocab = std::vector<int>{3, 6, 20}[round % 3];
        memory_datastore ds(rng, 1 + round % 2, 12, 80, n_vocab);
        const auto       texts = ds.texts();
        drafter_params   p;
        p.use_history       = false;
        p.use_datastore     = round % 4 != 1;
        p.use_context       = round % 4 != 2;
        p.n_match_min       = 1 + round % 3;
        p.n_match_max       = 3 + round % 9;
        p.n_context_occ_max = round % 5 == 0 ? 3 : 64;
        p.backoff_confident = std::vector<std::uint64_t>{1, 4, 8}[round % 3];
        p.backoff_levels    = 1 + round % 4;
        p.alpha_context     = round % 2 ? 0.5 : 2.0;
        drafter    dr(&ds, nullptr, p);
        ref_weight rw;
        const auto & base = *texts[rng() % texts.size()];
        std::vector<token_id> ctx = random_context(rng, base, 1 + static_cast<int>(rng() % 20), n_vocab);
        dr.reset(ctx);
        for (int step = 0; step < 30; ++step) {
            const int   cap       = 1 + static_cast<int>(rng() % 20);
            const int   want      = 1 + static_cast<int>(rng() % 12);
            // 2: above every score, so only the first `want` nodes (kept whatever their score) are left.
            const float score_min = std::vector<float>{0.0f, 0.05f, 0.3f, 2.0f}[rng() % 4];
            const int   n_max     = std::min({cap, 2 * want, p.n_budget_max});
            const draft_tree got  = dr.draft_chain(cap, want, INT32_MAX, score_min);
            const auto       want_chain = ref_chain(texts, ctx, p, rw, n_max, want, score_min);
            std::ostringstream where;
            where << "round " << round << " step " << step << " context " << ctx.size();
            ASSERT_EQ(got.check_integrity(), "") << where.str();
            ASSERT_EQ(got.size(), want_chain.size()) << where.str();
            for (std::size_t i = 0; i < got.size(); ++i) {
                ASSERT_EQ(got.parents[i], static_cast<std::int32_t>(i) - 1) << where.str();
                ASSERT_EQ(got.tokens[i], want_chain[i].token) << where.str() << " node " << i;
                ASSERT_FLOAT_EQ(got.scores[i], want_chain[i].score) << where.str() << " node " << i;
                ASSERT_EQ(got.sources[i], want_chain[i].mask) << where.str() << " node " << i;
            }
            n_chains++;
            n_long += got.size() >= 6;
            n_cut_by_score += score_min > 0 && static_cast<int>(got.size()) < n_max;
            if (score_min > 1) {
                ASSERT_LE(got.size(), static_cast<std::size_t>(want)) << where.str();
                n_first_only += got.size() == static_cast<std::size_t>(std::min(want, n_max));
            }
            // The output goes on: mostly the chain's first tokens, sometimes something else.
            std::vector<token_id> emit;
            for (std::size_t i = 0; i < got.size() && rng() % 4 != 0; ++i) emit.push_back(got.tokens[i]);
            emit.push_back(random_context(rng, base, 1, n_vocab)[0]);
            ctx.insert(ctx.end(), emit.begin(), emit.end());
            dr.accept(emit);
            rw.update(emit[0]);
        }
    }
    EXPECT_EQ(n_chains, 24 * 30);
    EXPECT_GT(n_long, 50);          // chains past a few tokens are exercised
    EXPECT_GT(n_cut_by_score, 20);  // and chains the score threshold ended
    EXPECT_GT(n_first_only, 20);    // and the nodes the budget may take kept below it
}

TEST(draft_chain, off_is_the_best_path_of_a_tree) {
    std::mt19937     rng(5);
    memory_datastore ds(rng, 2, 12, 80, 6);
    drafter_params   p;
    p.chain_grow = false;
    drafter      a(&ds, nullptr, p);
    drafter      b(&ds, nullptr, p);
    const auto   ctx = random_context(rng, *ds.texts()[0], 12, 6);
    a.reset(ctx);
    b.reset(ctx);
    draft_tree t = b.draft(chain_tree_nodes(5, INT32_MAX));
    t.keep_best_path();
    t.truncate(7);
    const draft_tree c = a.draft_chain(7, 5, INT32_MAX, 0.0f);
    EXPECT_EQ(c.tokens, t.tokens);
    EXPECT_EQ(c.scores, t.scores);
}
