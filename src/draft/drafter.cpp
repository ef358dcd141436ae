#include "rest/drafter.h"

#include "context-matcher.h"
#include "expand-cache.h"
#include "prediction-source.h"
#include "sa-backoff.h"
#include "sa-search.h"
#include "tree-expand.h"
#include "tree-merge.h"

#include "rest/history-store.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace rest {

namespace {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// Per-shard longest matches of one suffix-array source (datastore shards or history segments).
struct sa_source {
    std::span<const index_shard> shards;
    std::vector<sa_match>        matches;
    std::vector<sa_bigram_memo>  memos;  // per shard; kept across requests while the shards stay the same
    std::size_t                  n_seen = 0;

    void reset(std::span<const index_shard> s, bool same_shards) {
        if (!same_shards || s.size() != memos.size()) {
            memos.assign(s.size(), sa_bigram_memo{});
        }
        shards = s;
        matches.assign(s.size(), sa_match{});
        n_seen = 0;
    }

    // Updates every shard (exactly where it can reach the longest match: sa_match_update_longest()) and returns the
    // roots of the longest match (those shards where it is longest).
    int update(std::span<const token_id> ctx, const drafter_params & p, std::vector<sa_root> & roots,
               sa_match_counters & counters) {
        const int n_min = std::max(p.n_match_min, 1);
        const int best  = sa_match_update_longest(shards, matches, ctx, n_seen, p.n_match_max, n_min, &counters, memos);
        n_seen = ctx.size();
        roots.clear();
        if (best < n_min) {
            return 0;
        }
        for (std::size_t i = 0; i < shards.size(); ++i) {
            if (matches[i].len == best) {
                roots.push_back({&shards[i], matches[i].range});
            }
        }
        return best;
    }
};

const cand_tree & expand_cached(tree_expander & x, expand_cache & cache, std::span<const sa_root> roots,
                                std::uint32_t depth0, const expand_params & ep, std::uint64_t cache_min) {
    std::uint64_t count = 0;
    for (const sa_root & r : roots) {
        count += r.range.size();
    }
    if (count <= cache_min) {
        return x.expand_sa(roots, depth0, ep);
    }
    if (const cand_tree * hit = cache.find(roots, depth0, ep.n_top)) {
        return *hit;
    }
    const cand_tree & t = x.expand_sa(roots, depth0, ep);
    cache.put(roots, depth0, ep.n_top, t);
    return t;
}

}  // namespace

struct drafter::impl {
    const datastore * ds;
    history_store *   history;
    drafter_params    p;

    context_matcher                         ctx;
    std::size_t                             n_prompt = 0;
    bool                                    finished = true;
    sa_source                               ds_src;
    std::shared_ptr<const history_snapshot> hsnap;
    sa_source                               hist_src;
    std::vector<sa_root>                    roots;
    tree_expander                           x_ds, x_ctx, x_hist;
    expand_cache                            cache_ds, cache_hist;  // for matches with > cache_min occurrences
    std::vector<token_id>                   rows;
    merge_buffers                           merge_buf;
    draft_stats                             last;
    prediction_source                       pred;
    cand_tree                               t_pred;
    // Chain growth (draft_chain): the context's tail plus the chain, and each source's state for that text.
    std::vector<token_id>                   ext;
    std::vector<sa_match>                   chain_ds, chain_hist;
    sa_backoff                              bo_ds, bo_hist;
    std::vector<std::int32_t>               chain_occ;
    std::vector<token_id>                   cands, top_buf;
    // Per request: the weight of the context's estimate against the suffix-array sources' alone (chain_weight), and
    // both estimates of the last chain's first candidates, to update it with the token that came next.
    double                                  w_ctx = 0.9;  // reset() sets params.chain_w_context
    struct first_estimate {
        token_id t;
        double   p_ctx, p_sa;
    };
    std::vector<first_estimate>             first;

    impl(const datastore * d, history_store * h, const drafter_params & params) :
        ds(d), history(h), p(params), ctx(params.n_match_min, params.n_match_max, params.n_context_occ_max, params.use_context),
        pred(params.n_match_max_prediction) {}
};

drafter::drafter(const datastore * ds, history_store * history, drafter_params params) {
    if (params.n_match_min < 1 || params.n_match_max < params.n_match_min || params.depth_max < 1 ||
        params.n_budget_max < 0 || params.alpha_datastore < 0 || params.alpha_context < 0 || params.alpha_history < 0) {
        throw std::invalid_argument("drafter: need 1 <= n_match_min <= n_match_max, depth_max >= 1, "
                                    "n_budget_max >= 0 and alpha >= 0");
    }
    for (const double w : {params.weight_datastore, params.weight_context, params.weight_history}) {
        if (!(w > 0 && w <= 1)) {
            throw std::invalid_argument("drafter: source weights must lie in (0, 1]");
        }
    }
    impl_ = std::make_unique<impl>(ds, history, params);
    reset({});
}

drafter::~drafter() = default;
drafter::drafter(drafter &&) noexcept = default;
drafter & drafter::operator=(drafter &&) noexcept = default;

void drafter::reset(std::span<const token_id> prompt) {
    impl & d = *impl_;
    d.ctx.reset(prompt);
    d.n_prompt = prompt.size();
    d.finished = false;
    d.ds_src.reset(d.ds ? d.ds->shards() : std::span<const index_shard>{}, true);  // a datastore never changes
    auto snap = d.history ? d.history->snapshot() : nullptr;
    const bool same = snap == d.hsnap;
    d.hsnap = std::move(snap);
    d.hist_src.reset(d.hsnap ? std::span<const index_shard>(d.hsnap->shards) : std::span<const index_shard>{}, same);
    if (!same) {
        d.cache_hist.clear();  // another snapshot: its ranges mean other things
        d.bo_hist.forget();
    }
    d.pred.reset({});
    d.w_ctx = std::clamp(d.p.chain_w_context, 0.02, 0.98);
    d.first.clear();
    d.last = draft_stats{};
}

void drafter::accept(std::span<const token_id> tokens) {
    impl & d = *impl_;
    if (!d.first.empty() && !tokens.empty()) {
        // Bayes' rule on which estimate predicted the next token (tokens no candidate had: a small floor for both).
        double p_ctx = 1e-3, p_sa = 1e-3;
        for (const auto & f : d.first) {
            if (f.t == tokens[0]) {
                p_ctx = std::max(p_ctx, f.p_ctx);
                p_sa  = std::max(p_sa, f.p_sa);
            }
        }
        const double w = d.w_ctx * p_ctx / (d.w_ctx * p_ctx + (1 - d.w_ctx) * p_sa);
        d.w_ctx        = std::clamp(w, 0.02, 0.98);
    }
    d.first.clear();
    d.ctx.append(tokens);
    d.pred.append(tokens);
}

void drafter::reserve(std::size_t n_tokens) {
    impl_->ctx.reserve(n_tokens);
}

void drafter::set_prediction(std::span<const token_id> prediction) {
    impl_->pred.reset(prediction);
}

bool drafter::has_prediction() const {
    // Used up (the output passed its end), a prediction drafts nothing more: the pass is an ordinary one again.
    return impl_->pred.active() && impl_->pred.start() < (std::int64_t) impl_->pred.size();
}

draft_tree drafter::draft(int n_budget, draft_stats * stats) {
    impl &             d  = *impl_;
    const auto         t0 = clock_type::now();
    draft_stats        st;
    const std::span    context = d.ctx.tokens();
    sa_match_counters  counters;
    expand_params      ep;
    ep.n_top       = std::clamp(n_budget, 0, d.p.n_budget_max);
    ep.depth_max   = d.p.depth_max;
    ep.scan_max    = d.p.scan_max;

    const cand_tree * t_ds   = &d.x_ds.none();
    const cand_tree * t_ctx  = &d.x_ctx.none();
    const cand_tree * t_hist = &d.x_hist.none();
    double            t_match = 0;
    // The datastore and the history are both suffix-array sources: update the longest match, then expand it
    // (through the selection cache) with the source's weight and smoothing. Returns the match length.
    auto sa_draft = [&](sa_source & src, tree_expander & x, expand_cache & cache, double weight, double alpha,
                        const cand_tree *& out) {
        const auto tm = clock_type::now();
        const int  m  = src.update(context, d.p, d.roots, counters);
        t_match += us_since(tm);
        if (m > 0) {
            ep.weight = weight;
            ep.alpha  = alpha;
            out       = &expand_cached(x, cache, d.roots, static_cast<std::uint32_t>(m), ep, d.p.cache_min);
        }
        return m;
    };
    if (d.p.use_datastore && d.ds) {
        st.match_len_datastore   = sa_draft(d.ds_src, d.x_ds, d.cache_ds, d.p.weight_datastore, d.p.alpha_datastore, t_ds);
        st.match_count_datastore = t_ds->root_count;
    }
    if (d.p.use_context) {
        const auto tm = clock_type::now();
        d.ctx.update();
        t_match += us_since(tm);
        if (d.ctx.match_len() >= d.p.n_match_min) {
            const auto w = static_cast<std::size_t>(d.p.depth_max);
            d.ctx.continuation_rows(w, d.rows);
            ep.weight              = d.p.weight_context;
            ep.alpha               = d.p.alpha_context;
            t_ctx                  = &d.x_ctx.expand_rows(d.rows, w, ep);
            st.match_len_context   = d.ctx.match_len();
            st.match_count_context = t_ctx->root_count;
        }
    }
    if (d.p.use_history && d.hsnap) {
        st.match_len_history   = sa_draft(d.hist_src, d.x_hist, d.cache_hist, d.p.weight_history, d.p.alpha_history, t_hist);
        st.match_count_history = t_hist->root_count;
    }

    static const cand_tree no_prediction;
    const cand_tree *      t_pred = &no_prediction;
    if (d.pred.active()) {
        t_pred                  = &d.pred.draft(ep.n_top, d.t_pred);
        st.match_len_prediction = d.pred.match_len();
    }

    const weighted_source srcs[] = {
        {t_ds, draft_source::datastore},
        {t_ctx, draft_source::context},
        {t_hist, draft_source::history},
        {t_pred, draft_source::prediction},
    };
    draft_tree tree = merge_trees(srcs, ep.n_top, &d.merge_buf);

    for (const std::uint8_t m : tree.sources) {
        st.n_nodes_datastore += (m & static_cast<std::uint8_t>(draft_source::datastore)) != 0;
        st.n_nodes_context += (m & static_cast<std::uint8_t>(draft_source::context)) != 0;
        st.n_nodes_history += (m & static_cast<std::uint8_t>(draft_source::history)) != 0;
        st.n_nodes_prediction += (m & static_cast<std::uint8_t>(draft_source::prediction)) != 0;
    }
    st.n_probes    = t_ds->n_probes + t_hist->n_probes;
    st.n_extend    = counters.n_extend;
    st.n_find      = counters.n_find;
    st.t_draft_us  = us_since(t0);
    st.t_match_us  = t_match;
    st.t_select_us = st.t_draft_us - t_match;
    d.last         = st;
    if (stats) {
        *stats = st;
    }
    return tree;
}

namespace {

// The context source along a chain: the occurrences (end positions in the context) of its match, which grows by
// every chain token while occurrences remain and all are known (fewer than the matcher's cap; no cap on the
// length), else is searched for again (the longest suffix of the extended text, n_min..n_max tokens). A search
// that finds nothing silences the source for the rest of the chain (the match at the chain's start counts as one).
struct chain_context {
    const context_matcher *       m;
    std::vector<std::int32_t> &   occ;
    int                           len = 0;

    void start() {
        len = m->match_len() >= m->n_min() ? m->match_len() : 0;
        occ.assign(m->occurrences().begin(), m->occurrences().end());
        if (len == 0) {
            occ.clear();
        }
    }
    void advance(token_id t, std::span<const token_id> ext) {
        const std::span<const token_id> c = m->tokens();
        const std::size_t               n = c.size();
        if (len == 0) {
            return;  // no match where it was last searched for: silent for the rest of the chain
        }
        if (occ.size() < m->n_occ_max()) {
            std::size_t k = 0;
            for (const std::int32_t p : occ) {
                if (static_cast<std::size_t>(p) + 3 <= n && c[static_cast<std::size_t>(p) + 1] == t) {
                    occ[k++] = p + 1;
                }
            }
            occ.resize(k);
            if (k > 0) {
                len++;
                return;
            }
        }
        len = m->longest(ext);
        occ.clear();
        if (len > 0) {
            m->find(ext.last(static_cast<std::size_t>(len)), occ);
        }
    }
    std::uint64_t count(token_id t) const {
        std::uint64_t k = 0;
        for (const std::int32_t p : occ) {
            k += m->tokens()[static_cast<std::size_t>(p) + 1] == t;
        }
        return k;
    }
    // The most frequent continuation (ties: the smaller token), or -1.
    token_id top(std::vector<token_id> & buf) const {
        buf.clear();
        for (const std::int32_t p : occ) {
            buf.push_back(m->tokens()[static_cast<std::size_t>(p) + 1]);
        }
        std::sort(buf.begin(), buf.end());
        token_id    best = -1;
        std::size_t n    = 0;
        for (std::size_t i = 0; i < buf.size();) {
            std::size_t j = i;
            while (j < buf.size() && buf[j] == buf[i]) ++j;
            if (j - i > n) {
                best = buf[i];
                n    = j - i;
            }
            i = j;
        }
        return best;
    }
};

}  // namespace

void drafter::extend_along_prediction(draft_tree & chain, std::int32_t n_max) {
    // The chain a tree's best path gives is as long as the policy's recent choices (its hint) allow: after a run of
    // short or no choices it offers 1-4 nodes. Where rows cost nearly linearly only long chains of sure tokens pay
    // (stories260K at one thread on a Zen 5: t(1) 113 us and 88 more per row, so 4 sure nodes about break even
    // while 16 gain 1.25x), so the policy, never shown a long chain, kept choosing plain for whole requests with an
    // exact prediction (30 of 106 in one bench). The prediction's own chain costs nothing to draft: a chain that
    // follows it goes on along it, each node with the prediction's conditional score, and the policy picks the
    // prefix that pays.
    impl & d = *impl_;
    const std::size_t k = chain.size();
    if (n_max <= 0 || k >= (std::size_t) n_max) return;
    const cand_tree & p = d.pred.draft(n_max, d.t_pred);
    if (p.nodes.size() <= k) return;
    for (std::size_t i = 0; i < k; ++i) {
        if (chain.tokens[i] != p.nodes[i].token) return;  // the chain left the prediction
    }
    for (std::size_t i = k; i < p.nodes.size(); ++i) {
        const double cond = d.pred.conditional_score(d.pred.run() + (std::int64_t) i);
        const float  s    = (float) ((i == 0 ? 1.0 : (double) chain.scores[i - 1]) * cond);
        chain.add(p.nodes[i].token, (std::int32_t) i - 1, s, static_cast<std::uint8_t>(draft_source::prediction));
    }
}

draft_tree drafter::draft_chain(std::int32_t cap, std::int32_t want, std::int32_t room, float score_min) {
    impl & d = *impl_;
    if (d.pred.active()) {
        draft_tree tree = draft_provider::draft_chain(cap, want, room, score_min);
        extend_along_prediction(tree, std::min({cap, room, d.p.n_budget_max, k_chain_nodes_max}));
        return tree;
    }
    if (!d.p.chain_grow) {
        return draft_provider::draft_chain(cap, want, room, score_min);
    }
    const auto         t0      = clock_type::now();
    draft_stats        st;
    draft_tree         tree;
    const std::span    context = d.ctx.tokens();
    sa_match_counters  counters;
    d.first.clear();
    const auto         grow  = static_cast<std::int32_t>(std::min<std::int64_t>(2 * static_cast<std::int64_t>(std::max(want, 1)), INT32_MAX));
    const std::int32_t n_max = std::min({cap, room, grow, d.p.n_budget_max, k_chain_nodes_max});
    if (n_max <= 0 || context.empty()) {
        d.last = st;
        return tree;
    }
    // Every source's match for the context itself, as draft() keeps them.
    const bool use_ds   = d.p.use_datastore && d.ds;
    const bool use_hist = d.p.use_history && d.hsnap;
    int        len_ds = 0, len_hist = 0;
    if (use_ds) {
        len_ds = d.ds_src.update(context, d.p, d.roots, counters);
    }
    if (use_hist) {
        len_hist = d.hist_src.update(context, d.p, d.roots, counters);
    }
    if (d.p.use_context) {
        d.ctx.update();
    }
    st.t_match_us = us_since(t0);
    const std::size_t tail = std::min<std::size_t>(context.size(), static_cast<std::size_t>(d.p.n_match_max));
    d.ext.assign(context.end() - static_cast<std::ptrdiff_t>(tail), context.end());
    d.chain_ds   = d.ds_src.matches;
    d.chain_hist = d.hist_src.matches;
    backoff_params bp;
    bp.n_min        = d.p.n_match_min;
    bp.n_confident  = d.p.backoff_confident;
    bp.n_levels_max = d.p.backoff_levels;
    bp.scan_max     = d.p.scan_max;
    backoff_params bp_ds = bp, bp_hist = bp;
    bp_ds.alpha   = d.p.alpha_datastore;
    bp_hist.alpha = d.p.alpha_history;
    auto set_levels = [&](sa_backoff & bo, const sa_source & src, std::span<const sa_match> ms, int len,
                          const backoff_params & b, std::vector<sa_bigram_memo> & memos) {
        bo.set(src.shards, ms, len, d.ext, b, memos);
    };
    if (use_ds) set_levels(d.bo_ds, d.ds_src, d.chain_ds, len_ds, bp_ds, d.ds_src.memos);
    if (use_hist) set_levels(d.bo_hist, d.hist_src, d.chain_hist, len_hist, bp_hist, d.hist_src.memos);
    chain_context cc{&d.ctx, d.chain_occ};
    if (d.p.use_context) cc.start();
    st.match_len_datastore   = use_ds ? len_ds : 0;
    st.match_count_datastore = use_ds && d.bo_ds.n_levels() ? d.bo_ds.count() : 0;
    st.match_len_history     = use_hist ? len_hist : 0;
    st.match_count_history   = use_hist && d.bo_hist.n_levels() ? d.bo_hist.count() : 0;
    st.match_len_context     = cc.len;
    st.match_count_context   = cc.occ.size();

    // The longest match of the extended text in a suffix-array source, searched for from scratch (a chain's levels
    // died); the lengths found, >= n_match_min, or 0.
    auto search_sa = [&](const sa_source & src, std::vector<sa_match> & ms, std::vector<sa_bigram_memo> & memos) {
        const int n_min = std::max(d.p.n_match_min, 1);
        const int best  = sa_match_update_longest(src.shards, ms, d.ext, 0, d.p.n_match_max, n_min, &counters, memos);
        return best >= n_min ? best : 0;
    };
    double score = 1.0;
    for (std::int32_t i = 0; i < n_max; ++i) {
        d.cands.clear();
        if (use_ds) d.bo_ds.candidates(d.cands, d.x_ds);
        if (use_hist) d.bo_hist.candidates(d.cands, d.x_hist);
        if (cc.len > 0) {
            const token_id t = cc.top(d.top_buf);
            if (t >= 0 && std::find(d.cands.begin(), d.cands.end(), t) == d.cands.end()) d.cands.push_back(t);
        }
        token_id     best   = -1;
        double       best_p = 0;
        std::uint8_t mask   = 0;
        for (const token_id t : d.cands) {
            const double p_ds   = use_ds ? d.p.weight_datastore * d.bo_ds.prob(t) : 0.0;
            const double p_hist = use_hist ? d.p.weight_history * d.bo_hist.prob(t) : 0.0;
            // The context's counts with the suffix-array sources' estimate as their prior (alpha_context
            // pseudo-occurrences of it), mixed with that estimate alone by the request's learned weight.
            const double prior = std::max(p_ds, p_hist);
            const double c_ctx = cc.len > 0 ? static_cast<double>(cc.count(t)) : 0.0;
            const double p_mix = cc.len > 0 ? d.p.weight_context * (c_ctx + d.p.alpha_context * prior) /
                                                  (static_cast<double>(cc.occ.size()) + d.p.alpha_context)
                                            : prior;
            const double p = d.w_ctx * p_mix + (1 - d.w_ctx) * prior;
            if (i == 0 && cc.len > 0) d.first.push_back({t, p_mix, prior});
            if (p > best_p || (p == best_p && p > 0 && t < best)) {
                best   = t;
                best_p = p;
                mask   = static_cast<std::uint8_t>((p_ds > 0 ? static_cast<int>(draft_source::datastore) : 0) |
                                                   (p_hist > 0 ? static_cast<int>(draft_source::history) : 0) |
                                                   (c_ctx > 0 ? static_cast<int>(draft_source::context) : 0));
            }
        }
        // The first `want` nodes are kept whatever their score: whether to verify them is the budget's choice, and a
        // policy that keeps its pass's shape verifies padding where a chain was cut short (on an H200 the automatic
        // budget verified 16.3 rows a step of which 14.2 were drafted: M 4.64 where 16 drafted nodes give 4.94).
        // Past them the chain grows only while its score stays above what another row costs.
        if (best < 0 || best_p <= 0 || (i >= std::max(want, 1) && score * best_p < score_min)) {
            break;
        }
        score *= best_p;
        tree.add(best, i - 1, static_cast<float>(score), mask);
        if (i + 1 == n_max) {
            break;
        }
        d.ext.push_back(best);
        // Every level grows by the token (no search); where none is left the longest match is searched for again
        // and the levels are chosen anew (sa-backoff.h); a search that finds nothing (the one at the chain's start
        // included) silences the source for the rest of the chain.
        auto advance_levels = [&](sa_backoff & bo, sa_source & src, std::vector<sa_match> & ms, int & len,
                                  const backoff_params & b) {
            if (len == 0) {
                return;  // the last search found nothing: silent for the rest of the chain
            }
            bo.advance(best);
            if (bo.n_levels() == 0) {
                len = search_sa(src, ms, src.memos);
                set_levels(bo, src, ms, len, b, src.memos);
            }
        };
        if (use_ds) advance_levels(d.bo_ds, d.ds_src, d.chain_ds, len_ds, bp_ds);
        if (use_hist) advance_levels(d.bo_hist, d.hist_src, d.chain_hist, len_hist, bp_hist);
        if (d.p.use_context) cc.advance(best, d.ext);
    }
    for (const std::uint8_t m : tree.sources) {
        st.n_nodes_datastore += (m & static_cast<std::uint8_t>(draft_source::datastore)) != 0;
        st.n_nodes_context += (m & static_cast<std::uint8_t>(draft_source::context)) != 0;
        st.n_nodes_history += (m & static_cast<std::uint8_t>(draft_source::history)) != 0;
    }
    st.n_extend    = counters.n_extend;
    st.n_find      = counters.n_find;
    st.t_draft_us  = us_since(t0);
    st.t_select_us = st.t_draft_us - st.t_match_us;
    d.last         = st;
    return tree;
}

const draft_stats & drafter::last_stats() const {
    return impl_->last;
}

void drafter::finish() {
    impl & d = *impl_;
    if (d.finished) {
        return;
    }
    d.finished = true;
    const std::span<const token_id> ctx = d.ctx.tokens();
    if (d.history && ctx.size() > d.n_prompt) {
        d.history->add(ctx.subspan(d.n_prompt));
    }
}

std::span<const token_id> drafter::context() const {
    return impl_->ctx.tokens();
}

}  // namespace rest
