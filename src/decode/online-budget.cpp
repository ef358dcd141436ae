#include "online-budget.h"
#include "budget-trace.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace rest {

namespace {

// An EMA that one observation moves by at most a factor of 2 either way (a preempted step cannot swing it).
double clamped_ema(double x, double obs, double a) {
    return (1 - a) * x + a * std::clamp(obs, 0.5 * x, 2.0 * x);
}

// x as the mean of its first 1 / a observations (n counts them, capped), then as an EMA of weight a.
void mean_then_ema(double & x, std::int32_t & n, double obs, double a) {
    n              = std::min(n + 1, 1 << 20);
    const double w = std::max(a, 1.0 / (double) n);
    x              = (1 - w) * x + w * obs;
}

// A node's drafter score given that its parent is accepted.
double conditional_score(const draft_tree & t, std::size_t i) {
    const double s = t.scores[i];
    const int    p = t.parents[i];
    if (p < 0) return s;
    return t.scores[p] > 0 ? s / t.scores[p] : 0.0;
}

constexpr std::size_t k_masks = 16;  // source masks: datastore | context | history | prediction

}  // namespace

online_budget::online_budget(cost_table table, online_budget_params params, const budget_state * warm) :
    table_(std::move(table)), params_(params), acceptance_(k_masks * k_bins) {
    explore_us_ = params_.explore_start_steps * std::max(0.0, table_.predict_us(1, 0));
    if (!warm) return;
    // Draft at full size until the choices say otherwise (see draft_nodes_hint).
    std::fill(recent_.begin(), recent_.begin() + k_recent_share, params_.n_max);
    // A warm start takes what an earlier run learned; anything of the wrong shape is ignored (the caller has checked
    // the version; this guards the sizes, so no state can index out of range).
    if (warm->acceptance.size() == acceptance_.size()) acceptance_ = warm->acceptance;
    for (auto & b : acceptance_) {
        if (!(b.n >= 0) || !(b.accepted >= 0) || b.accepted > b.n) b = {};
    }
    // Values are bounded by what the start-up table says a plain step costs, so no file can switch drafting off
    // (or on) for longer than the estimates take to correct themselves.
    auto         sane    = [](double r) { return r > 0.05 && r < 20; };
    const double t_plain = table_.predict_us(1, 0);
    if (sane(warm->cost_ratio_all)) ratio_all_ = warm->cost_ratio_all;
    if (warm->cold_us > 0 && warm->cold_us < 100 * t_plain) cold_.add(warm->cold_us);
    for (const auto & [rows, ratio] : warm->cost_ratio) {
        if (rows >= 1 && rows < k_rows_flat && rows <= params_.n_max + 1 && sane(ratio)) {
            cost_est & e = est_for(rows, 1);
            e.add(ratio);
            e.warm = ratio;
        }
    }
    // Shape values are tokens over the discount's horizon: at most what the largest step emits, every step.
    const double value_max = (params_.n_max + 1.0) / (1.0 - params_.value_discount);
    const auto & sv        = warm->shape_values;
    if (sv.size() <= (std::size_t) params_.n_max + 2 &&
        std::all_of(sv.begin(), sv.end(), [&](double v) { return std::isfinite(v) && std::abs(v) <= value_max; })) {
        values_ = sv;
        find_value_top();
    }
    auto bounded = [&](double v, double hi) { return v > 0 && v <= hi ? v : 0.0; };
    t_draft_us_      = bounded(warm->t_draft_us, 10 * t_plain);
    t_draft_node_us_ = bounded(warm->t_draft_node_us, 10 * t_plain);
    for (std::size_t c = 0; c < k_classes; ++c) {
        const double plain = c < warm->plain_us.size() ? warm->plain_us[c] : 0;
        const double spent = c < warm->spent_us.size() ? warm->spent_us[c] : 0;
        // Both sides are EMAs of a step's time: within a range of plain steps, and a gain within [0.1, 10].
        const double hi = 1e3 * t_plain * (double) (1u << (c % k_sizes));
        if (!(plain > 0) || !(spent > 0) || plain > hi || spent > hi || plain > 10 * spent || spent > 10 * plain) continue;
        mode & m  = mode_[c];
        m.n_off   = c < warm->n_off.size() ? std::clamp(warm->n_off[c], 0, 16) : 0;
        m.t_plain  = plain;
        m.t_spent  = spent;
        m.measured = true;
        m.steps    = params_.probe_steps;  // the gain is known: keep checking it from here
        if (plain < spent) {
            // The schedule goes on where the last run left it, so short runs still probe at the bounded rate; a run
            // that ended drafting (in a probe, or losing within the noise: none left) waits as long as its back-off
            // level says, not one step: otherwise every short run (a one-shot `rest generate`) would start with a
            // probe at a loss.
            const std::int32_t left = c < warm->off_left.size() ? warm->off_left[c] : 0;
            const std::int64_t wait = (std::int64_t) params_.off_min << m.n_off;
            m.off_left = left > 0 ? std::min(left, params_.off_max)
                                  : (std::int32_t) std::min<std::int64_t>(params_.off_max, wait);
        }
    }
}

std::size_t online_budget::bucket(std::size_t n_requests, bool predicted) {
    const auto by_size = std::min<std::size_t>(k_sizes - 1, (std::size_t) std::bit_width(std::max<std::size_t>(n_requests, 1) - 1));
    return by_size + (predicted ? k_sizes : 0);
}

// --- estimates -------------------------------------------------------------------------------------------------

const budget_state::bin & online_budget::bin_of(float conditional, std::uint8_t sources) const {
    const double s = std::clamp((double) conditional, 0.0, 1.0);
    return acceptance_[(sources & (k_masks - 1)) * k_bins + std::min(k_bins - 1, (int) (s * k_bins))];
}

budget_state::bin & online_budget::bin_of(float conditional, std::uint8_t sources) {
    return const_cast<bin &>(std::as_const(*this).bin_of(conditional, sources));
}

double online_budget::calibrated(float score, std::uint8_t sources) const {
    const double s = std::clamp((double) score, 0.0, 1.0);
    const bin &  b = bin_of(score, sources);
    return (b.accepted + params_.prior_weight * s) / (b.n + params_.prior_weight);
}

void online_budget::fill_path_probabilities(const draft_tree & t, std::vector<double> & v, std::size_t n) const {
    n = std::min(n, t.size());  // a parent comes before its children: the first n nodes are a tree
    v.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double c = calibrated((float) conditional_score(t, i), t.sources[i]);
        v[i]           = t.parents[i] < 0 ? c : v[t.parents[i]] * c;
    }
}

namespace {

// Whether a draft's first n nodes (those verified) hold the request's predicted output: exact or unrelated as a
// whole, calibrated per request (its own classes and bins), so what it realises says nothing of the other sources'
// estimates, nor they of its.
bool has_prediction(const draft_tree & t, std::size_t n) {
    const auto bit = (std::uint8_t) draft_source::prediction;
    const auto end = t.sources.begin() + (std::ptrdiff_t) std::min(n, t.sources.size());
    return std::any_of(t.sources.begin(), end, [&](std::uint8_t s) { return (s & bit) != 0; });
}

}  // namespace

double online_budget::optimism() const {
    constexpr double k_pseudo = 4.0;
    return std::clamp((realised_ + k_pseudo) / (predicted_ + k_pseudo), 0.5, 1.0);
}

std::vector<double> online_budget::path_probabilities(const draft_tree & t) const {
    std::vector<double> v;
    fill_path_probabilities(t, v);
    return v;
}

// --- the choice --------------------------------------------------------------------------------------------------

float online_budget::chain_score_min() const {
    const std::int32_t rows = 1 + draft_nodes_hint();
    const double       t1   = predict_us(1, 0);
    if (!(t1 > 0)) return 0.0f;
    return (float) std::clamp(0.5 * (predict_us(rows + 1, 0) - predict_us(rows, 0)) / t1, 0.0, 1.0);
}

std::int32_t online_budget::recent_choice() const {
    // The most nodes chosen in at least k_recent_share of the recent steps: one long choice (a lucky step) does not
    // make every step draft for it for the next k_recent steps.
    std::array<std::int32_t, k_recent> v = recent_;
    const std::size_t                  k = k_recent - k_recent_share;
    std::nth_element(v.begin(), v.begin() + (std::ptrdiff_t) k, v.end());
    return v[k];
}

std::int32_t online_budget::tree_draft_nodes() const {
    const std::int32_t recent = recent_choice();
    return std::clamp(std::max(draft_nodes_hint(), 2 + 2 * recent), 1, std::max(1, params_.n_max));
}

std::int32_t online_budget::draft_nodes_hint() const {
    const std::int32_t grow = 1 + recent_choice();
    // Where drafting is cheap next to a step (a large model), draft what the cap allows: the policy can only
    // choose among nodes it has seen. Next to a step as decoding runs (pass and drafting), not a plain pass: on
    // stories260K at two threads on a Zen 5 a plain pass (317 us) is 1.5x the 2-row passes the policy runs, and
    // the nodes it paid for were drafted (14 us a step against rest@1's 6) and not verified: 0.93-0.94 of rest@1,
    // 0.97 now.
    const double per_node   = t_draft_node_us_ > 0 ? t_draft_node_us_ : 1.0;
    const mode & m          = mode_[cur_class_];
    const double step       = m.rate_us > 0 ? m.rate_us : predict_us(1, 0);
    const double affordable = params_.draft_cost_frac * step / per_node;
    return std::clamp(std::max<std::int32_t>(grow, (std::int32_t) std::min(affordable, 1e6)), 1, std::max(1, params_.n_max));
}

void online_budget::learn_values(std::span<const double> q_stay, std::span<const std::int32_t> threads) {
    // Expected updates of a discounted value per shape, from the draft this step saw (every shape's, not only the one
    // taken): a shape is worth what its step earns plus the next step's value, from staying or from the best change
    // (priced at the rate decoding runs at, as worth() prices time). What this replaces, a home shape (the most
    // frequent lately) that other shapes paid their way back to, held the demo model at 2 rows where 3 pay more:
    // no one step's gain paid the way out, while these values carry the gain of every step after it.
    const mode & m = mode_[cur_class_];
    if (!(m.rate_us > 0) || q_stay.size() < 2) return;
    const double rate = m.rate_tokens / m.rate_us;
    // The best shape to change to, per thread count (what a change costs depends on the threads at both ends).
    std::array<std::pair<std::int32_t, double>, 4> best{};
    std::size_t                                    n_best = 0;
    for (std::size_t r = 1; r < q_stay.size(); ++r) {
        std::size_t k = 0;
        while (k < n_best && best[k].first != threads[r]) ++k;
        if (k == n_best) {
            if (n_best == best.size()) continue;  // more thread counts than passes use: not a change target
            best[n_best++] = {threads[r], q_stay[r]};
        }
        best[k].second = std::max(best[k].second, q_stay[r]);
    }
    if (values_.size() < q_stay.size()) values_.resize(q_stay.size(), 0.0);
    for (std::size_t r = 1; r < q_stay.size(); ++r) {
        double target = q_stay[r];
        for (std::size_t k = 0; k < n_best; ++k) {
            const double change = change_us(best[k].first, threads[r]) * slowdown(best[k].first);
            target              = std::max(target, best[k].second - rate * change);
        }
        if (std::isfinite(target)) values_[r] += params_.value_ema * (target - values_[r]);  // none sticks
    }
    find_value_top();
}

void online_budget::find_value_top() {
    double top = -HUGE_VAL;
    value_top_ = 0;
    for (std::size_t r = 2; r < values_.size(); ++r) {
        if (values_[r] > top) {
            top        = values_[r];
            value_top_ = (std::int32_t) r;
        }
    }
}

void online_budget::note_choice(std::int32_t n_nodes) {
    recent_[recent_at_] = n_nodes;
    recent_at_          = (recent_at_ + 1) % k_recent;
}

const online_budget::batch & online_budget::prepare(std::span<const budget_query> qs) {
    batch & b = scratch_;  // reused: the hot path allocates nothing once its vectors have grown
    double  n_past_sum = 0;
    b.lim.assign(qs.size(), 0);
    b.pad.assign(qs.size(), 0);
    b.cap.assign(qs.size(), 0);
    b.prob.resize(qs.size());
    b.lim_max = b.pad_max = 0;
    for (size_t i = 0; i < qs.size(); ++i) {
        // A request without draft nodes is not padded: its step stays a plain 1-row pass, which computes exactly
        // what plain decoding does (a padded pass takes other kernels, e.g. flash attention's split-KV path is for
        // single rows only), so outputs can differ from plain only where drafts were verified.
        const size_t n_tree = qs[i].tree ? qs[i].tree->size() : 0;
        b.cap[i] = std::min<size_t>((size_t) std::max(0, qs[i].n_max), (size_t) params_.n_max);
        b.pad[i] = n_tree == 0 ? 0 : b.cap[i];
        b.lim[i] = std::min(n_tree, b.pad[i]);
        b.prob[i].clear();
        if (b.lim[i] > 0) {
            fill_path_probabilities(*qs[i].tree, b.prob[i], b.lim[i]);
            const double f = has_prediction(*qs[i].tree, b.lim[i]) ? 1.0 : optimism();
            for (double & v : b.prob[i]) v *= f;
        }
        b.prob[i].resize(b.pad[i], 0.0);  // padding is worth nothing
        b.lim_max = std::max(b.lim_max, b.lim[i]);
        b.pad_max = std::max(b.pad_max, b.pad[i]);
        n_past_sum += qs[i].n_past;
    }
    b.n_past = (std::int32_t) (n_past_sum / (double) std::max<size_t>(1, qs.size()));
    n_live_  = std::max<std::size_t>(1, qs.size());  // what is plain (one row each) and the threads depend on it
    return b;
}

std::pair<std::size_t, std::int32_t> online_budget::exploration(std::span<const budget_query> qs, const batch & b,
                                                                double extra_us) {
    // One request explores per step (the one with the most promising first node), one node, while its bin is thin
    // and the budget covers it (what it takes from the budget).
    const size_t nq = qs.size();
    extra_us        = std::max(0.0, extra_us);
    if (!(explore_us_ >= extra_us)) return {nq, 0};
    size_t       ex = nq;
    for (size_t i = 0; i < nq; ++i) {
        if (b.lim[i] > 0 && qs[i].tree->scores[0] >= params_.explore_min_score &&
            (ex == nq || qs[i].tree->scores[0] > qs[ex].tree->scores[0])) {
            ex = i;
        }
    }
    if (ex == nq) return {nq, 0};
    const draft_tree & t = *qs[ex].tree;
    if (bin_of((float) conditional_score(t, 0), t.sources[0]).n >= params_.explore_obs) return {nq, 0};
    explore_us_ -= extra_us;
    return {ex, 1};
}

double online_budget::worth(double expected, double us) const {
    // Tokens less what the time would have earned at the rate decoding runs at: maximising it every step maximises
    // the rate over all steps. A step's own tokens per microsecond would not: it sets a higher bar for another node
    // on a step whose first nodes are sure than on one whose are doubtful, and verifies more on the doubtful ones.
    // Until a rate is measured, the step's own.
    const mode & m = mode_[cur_class_];  // the rate of batches like this one (of its size, with a prediction or not)
    return m.rate_us > 0 ? expected - m.rate_tokens / m.rate_us * us : expected / us;
}

void online_budget::choose(std::span<const budget_query> qs, std::span<std::int32_t> n_out) {
    const size_t nq = qs.size();
    exploring_      = false;
    std::fill(n_out.begin(), n_out.end(), 0);
    const batch & b = prepare(qs);
    if (b.lim_max == 0) return;
    std::vector<size_t> & next = next_;
    next.assign(nq, 0);
    // Greedy over the whole batch: add the next node (in each tree's best-first order, padding last) with the
    // highest calibrated probability, and remember the configuration worth() most.
    // The pass's sequences are counted along (a node adds one unless its parent was a leaf; padding continues the
    // last node, a leaf), so that a change of tree shape is priced like a change of rows.
    const std::int32_t rows_plain = (std::int32_t) nq, seqs_plain = (std::int32_t) nq;
    const single_price plain      = nq == 1 ? price_single(1, b.n_past, 1) : single_price{};
    const double       plain_us   = nq == 1 ? plain.steady_us + plain.change_us
                                            : step_us(rows_plain, b.n_past, 1, seqs_plain);
    std::int32_t rows      = rows_plain;
    std::int32_t seqs      = seqs_plain;
    double       expected  = (double) nq;
    // One request's shapes carry their learned values (learn_values(); once a rate is measured, as worth() needs).
    const bool   single    = nq == 1 && mode_[cur_class_].rate_us > 0;
    const double discount  = params_.value_discount;
    double       best_rate = worth(expected, plain_us) + (single ? discount * value_of(1) : 0.0);
    bool         pays      = false;
    std::vector<double> &       q_stay    = scratch_.q_stay;
    std::vector<std::int32_t> & q_threads = scratch_.q_threads;
    if (single) {
        q_stay.assign(2, worth(expected, plain.steady_us) + discount * value_of(1));  // [1]: plain ([0] unused)
        q_threads.assign(2, plain.threads);
    }
    scratch_.has_child.resize(nq);
    for (size_t i = 0; i < nq; ++i) scratch_.has_child[i].assign(b.lim[i] + 1, 0);
    while (true) {
        size_t pick = nq;
        double pv   = -1;
        for (size_t i = 0; i < nq; ++i) {
            if (next[i] < b.pad[i] && b.prob[i][next[i]] > pv) {
                pv   = b.prob[i][next[i]];
                pick = i;
            }
        }
        if (pick == nq) break;
        // One request's padding rows pay only at a shape without a change's charge (the last pass's) or of a high
        // value (value_top_): past both, the loop would price dozens of rows that cannot win (4.3 us a step on the
        // demo model).
        if (nq == 1 && next[0] >= b.lim[0] && rows >= std::max(last_rows_, value_top_)) break;
        if (const size_t j = next[pick]; j < b.lim[pick]) {
            char & parent_has_child = scratch_.has_child[pick][(size_t) (qs[pick].tree->parents[j] + 1)];
            seqs += parent_has_child ? 1 : 0;
            parent_has_child = 1;
        }
        ++next[pick];
        ++rows;
        expected += pv;
        double rate;
        if (single) {
            const single_price p      = price_single(rows, b.n_past, seqs);
            const double       steady = p.steady_us + t_draft_us_;  // drafting_step_us() in parts
            q_stay.push_back(worth(expected, steady) + discount * value_of(rows));
            q_threads.push_back(p.threads);
            rate = worth(expected, steady + p.change_us) + discount * value_of(rows);
        } else {
            rate = worth(expected, drafting_step_us(rows, b.n_past, 1, seqs));
        }
        if (rate > best_rate) {
            best_rate = rate;
            pays      = true;
            std::copy(next.begin(), next.end(), n_out.begin());
        }
    }
    if (single) learn_values(q_stay, q_threads);
    if (!pays) {
        const double explore_us = drafting_step_us(rows_plain + 1, b.n_past, 1, seqs_plain);
        const auto [ex, k]      = exploration(qs, b, explore_us - plain_us);
        if (ex < nq) n_out[ex] = k;
        exploring_ = ex < nq && k > 0;
    }
    note_choice(*std::max_element(n_out.begin(), n_out.end()));
}

std::int32_t online_budget::choose_equal(std::span<const budget_query> qs) {
    const size_t nq = qs.size();
    exploring_      = false;
    const batch & b  = prepare(qs);
    if (b.lim_max == 0) return 0;
    // Every chain length k costs 1 + min(k, cap) rows per request, whichever requests have drafts that long: the
    // decoder pads all of them, those without a draft too, since llama.cpp would otherwise split the batch into one
    // pass per distinct row count.
    double       expected  = (double) nq;
    const double plain_us  = step_us((std::int32_t) nq, b.n_past, nq, (std::int32_t) nq);
    double       best_rate = worth(expected, plain_us);
    std::int32_t k_best    = 0;
    for (size_t k = 1; k <= b.pad_max; ++k) {
        std::int32_t rows = 0;
        for (size_t i = 0; i < nq; ++i) {
            if (k <= b.lim[i]) expected += b.prob[i][k - 1];
            rows += 1 + (std::int32_t) std::min(k, b.cap[i]);
        }
        const double rate = worth(expected, drafting_step_us(rows, b.n_past, nq, (std::int32_t) nq));  // chains: one each
        if (rate > best_rate) {
            best_rate = rate;
            k_best    = (std::int32_t) k;
        }
    }
    if (k_best == 0) {
        const double explore_us = drafting_step_us(2 * (std::int32_t) nq, b.n_past, nq, (std::int32_t) nq);
        k_best                  = exploration(qs, b, explore_us - plain_us).second;
        exploring_              = k_best > 0;
    }
    note_choice(k_best);
    return k_best;
}

// --- feedback ----------------------------------------------------------------------------------------------------

void online_budget::observe_acceptance(const draft_tree & tree, std::int32_t n_verified,
                                       std::span<const std::int32_t> path) {
    // A node tells about its conditional probability only if its parent was accepted (or is the root).
    const std::int32_t n = std::min(n_verified, (std::int32_t) tree.size());
    if (n > 0 && !has_prediction(tree, (std::size_t) n)) {  // what the bins predicted, before they learn from it
        fill_path_probabilities(tree, verified_probs_, (std::size_t) n);
        for (std::int32_t i = 0; i < n; ++i) predicted_ += verified_probs_[(std::size_t) i];
        // Accepted drafted nodes only: padding (past n), which the walk may accept too, was predicted nothing.
        realised_ += (double) std::count_if(path.begin(), path.end(), [&](std::int32_t v) { return v >= 0 && v < n; });
    }
    std::vector<char> & accepted = accepted_;
    accepted.assign((std::size_t) std::max(n, 0), 0);
    for (std::int32_t v : path) {
        if (v >= 0 && v < n) accepted[v] = 1;
    }
    for (std::int32_t i = 0; i < n; ++i) {
        const std::int32_t par = tree.parents[i];
        if (par >= 0 && !accepted[par]) continue;
        bin & b = bin_of((float) conditional_score(tree, (size_t) i), tree.sources[i]);
        if (b.n >= params_.bin_cap) {  // older evidence fades, so the bin follows a new workload
            b.accepted *= params_.bin_cap / (b.n + 1);
            b.n *= params_.bin_cap / (b.n + 1);
        }
        b.n += 1;
        b.accepted += accepted[i];
    }
}

void online_budget::observe_step(const step_report & r) {
    ++n_steps_;
    interp_step_ = -1;  // (the context's threads may change below)
    const bool explored = exploring_;  // the choice of this step explored (choose() sets it)
    exploring_          = false;
    n_live_ = r.n_requests;
    if (r.n_threads_context > 0) context_threads_ = r.n_threads_context;
    const bool   same = same_shape(r.n_rows, r.n_equal, r.n_seqs);
    const bool   other_threads = r.n_threads > 0 && last_threads_ > 0 && r.n_threads != last_threads_;
    const double change = same ? 0.0 : change_us(r.n_threads, last_threads_);  // before last_threads_ moves on
    // What a pass of this shape typically takes, before this pass moves the estimates (the slowdown and the gain's
    // caps measure the pass against it).
    const double typical = predict_us(r.n_rows, r.n_past, r.n_equal, r.n_seqs);
    const gain_caps caps = gain_caps_of(typical, change);
    const bool   plain_pass = r.n_rows == (std::int32_t) r.n_requests;  // one row per request
    // The last pass drafted, over the same requests (a batch that shrank changes shape whether drafting or not).
    const bool   left_drafting = !same && last_rows_ > last_requests_ && last_requests_ == (std::int32_t) r.n_requests;
    // A process's first pass pays for cold caches and llama.cpp's first graph of its shape (453 us where stories260K's
    // steady 1-row pass takes 120 on one thread): it says nothing about the machine's load or plain's cost from then
    // on, and as the first plain figure it would set what drafting is compared against for dozens of steps.
    const bool cold = n_steps_ == 1;
    // A fresh process's passes warm up over several steps (the demo model's 3-row pass: 297, 254, 229, 184, 173, 164,
    // then ~158 us): they say what the process paid, not what a pass of that shape costs. Taken as estimates, and
    // persisted, they priced plain and 2-row passes dear for every later one-shot process, which verified 7-row
    // passes where 3 rows run twice as fast per token.
    const bool warm_up = cold || n_steps_ <= params_.warm_up_steps;
    const bool first_use = observe_first_use(r, same, warm_up);
    // The first pass after a prompt's pass pays for what the prompt did to the caches (the demo model's 2-row pass:
    // 413 us there, 209 after a change of shape, 159 steady). As a sample of the change, it priced every change at
    // 250-310 us where one costs ~45 (bench-verify-shapes), and kept one-request chains at the shape they had.
    const bool after_other = last_rows_ == 0;  // (observe_other_pass(), or no pass yet: then warm_up too)
    const bool measured    = !warm_up && !after_other;  // a pass that says what passes cost
    // Both of optimism()'s sums fade every step, verified or not, so a correction that stopped the drafts it would
    // learn from wears off (over ~500 steps) instead of holding for the rest of the process.
    predicted_ *= params_.optimism_memory;
    realised_ *= params_.optimism_memory;
    if (measured && !first_use && r.n_equal > 0 && r.t_pass_us > 0 && r.n_threads > 0 && r.n_threads < k_threads_max) {
        // (A first pass of its shape is slower for being first: cold_us(), not the machine's load.)
        // How much slower than its typical time (the estimates are medians) a pass on these threads runs now, on
        // average: preempted passes included.
        if (typical + change > 0) {
            auto & [f, at] = per_threads(slow_threads_, r.n_threads, {1.0, 0});
            f  = (1 - params_.slow_ema) * f + params_.slow_ema * std::clamp(r.t_pass_us / (typical + change), 0.2, 20.0);
            at = n_steps_;
        }
    }
    last_threads_     = r.n_threads;
    last_rows_        = r.n_rows;
    last_requests_    = (std::int32_t) r.n_requests;
    last_equal_       = r.n_equal;
    last_seqs_        = r.n_seqs;
    if (cold) {
        drafted_before_ = drafted_before_ || r.t_draft_us > 0;  // a first draft with it counts as the cold one too
        return;
    }
    explore_us_ += params_.explore_cost_frac * (r.t_pass_us + r.t_draft_us);
    const double base = prior_us(r.n_rows, r.n_past, r.n_equal);
    const double t    = r.t_pass_us;
    const std::int32_t extra = extra_seqs(r.n_equal, r.n_seqs);
    const cost_est * known = find_est(r.n_rows, r.n_equal);
    const bool       fresh = known && n_steps_ - known->at <= (std::int64_t) params_.forget_steps;
    if (!measured) {
        // No estimate from a warm-up pass or one after a prompt's (see `warm_up` and `after_other` above).
    } else if (first_use) {
        // Cold: what it took beyond the next pass of its shape (when one follows) is cold_us(); it sets neither a
        // steady estimate (it priced the shape dear for forget_steps) nor the change's (every change). A first pass
        // that also changed the thread count paid that switch too (switch_, up to 2.5 ms on stories260K): no sample.
        if (t > 0 && !other_threads) pending_cold_ = {r.n_rows, t};
    } else if (r.n_equal > 0 && base > 0 && t > 0 && extra > 0) {
        // A branchy tree: what it took beyond a chain of its rows (and a change of shape), per extra sequence.
        const double chain = predict_us(r.n_rows, r.n_past, r.n_equal) + change;
        seq_.add(std::max(0.0, t - chain) / extra);
    } else if (r.n_equal > 0 && base > 0 && t > 0 && !same && fresh) {
        // A pass of another shape than the last pays llama.cpp's graph rebuild: what it took beyond its shape's
        // steady estimate (the start-up table's figure underprices it by about 2x on the demo model here).
        const double extra_us = std::max(0.0, t - predict_us(r.n_rows, r.n_past, r.n_equal));
        if (other_threads && r.n_threads < k_threads_max) {
            per_threads(switch_, r.n_threads, cost_est{}).add(extra_us);
        } else {
            rebuild_.add(extra_us);
        }
    } else if (r.n_equal > 0 && base > 0 && t > 0 && (same || !plain_pass)) {
        // A steady pass, or a drafting shape's without a fresh estimate: its time less the learned change cost. (Not a
        // plain pass after another shape: a check's steady pass follows it, and with the change not yet learned its
        // time priced plain 2x dear for forget_steps.)
        const double steady = same ? t : std::max(0.05 * t, t - change);
        cost_est &   e      = est_for(r.n_rows, r.n_equal);
        if (n_steps_ - e.at > (std::int64_t) params_.forget_steps) e.n = e.n_measured = 0;  // long unmeasured: afresh
        e.add(steady / base);
        ++e.n_measured;
        e.at = n_steps_;
        // The shared ratios are what drafting shapes not measured lately fade to: learned from drafting passes only
        // (plain's estimate never fades; while drafting is off, plain passes alone would pull them to plain's ratio,
        // and the next probe would hop through shapes that look cheap). Single observations are clamped, so one
        // preempted step cannot swing them.
        const bool drafting_pass = r.n_rows > (std::int32_t) r.n_requests;
        if (drafting_pass) ratio_all_ = clamped_ema(ratio_all_, steady / base, params_.time_ema);
        // And per thread count, which a busy machine slows unequally (a pass on every core waits for the busy one).
        if (drafting_pass && r.n_threads > 0 && r.n_threads < k_threads_max) {
            // The mean of its passes with ratio_all_ as two of them, then an EMA: one pass (a process's first
            // ones, slow while the model's pages come in: 104 ms where a 2-row pass of a 1.1B Q8_0 model takes 62)
            // cannot set what every unmeasured shape on these threads costs; set from it, the tree layout priced
            // every longer tree 1.8x dear and never verified one in 1 of 3 runs.
            auto & [rt, n] = per_threads(ratio_threads_, r.n_threads, {0.0, 0});
            if (!(rt > 0)) rt = ratio_all_;
            const double w = std::max(params_.time_ema, 1.0 / (double) (++n + 2));
            rt             = (1 - w) * rt + w * std::clamp(steady / base, 0.5 * rt, 2.0 * rt);
        }
        interp_step_ = -1;  // the neighbours' ratios read these estimates
    }
    mode & m = mode_[bucket(r.n_requests, r.predicted)];
    if (plain_pass) {
        if (!r.drafted && left_drafting) m.exit_us = change;  // see mode::exit_us
        if (measured) {
            mean_then_ema(m.check_us, m.n_plain_seen, r.t_pass_us, params_.check_ema);
            if (same) {
                // A steady plain pass (see online_budget_params::check_passes_max): the plain estimate is fresh. As
                // a ratio to the start-up time at this context length, so that it holds at another (attention
                // grows). The first ones replace the start-up table's figure (a mean of them), which was measured
                // once, maybe on a busier machine: a Zen 4 CPU's table priced plain at 1.5x what its steady passes
                // took.
                m.since_plain = 0;
                m.check_left  = 0;  // the check has what it ran for
                mean_then_ema(m.plain_ratio, m.n_steady, std::min(t, caps.pass_us) / std::max(1e-9, base), params_.plain_ema);
            }
        }
    } else {
        ++m.since_plain;
    }
    if (r.t_draft_us > 0 && !drafted_before_) {
        // A process's first draft pays for cold caches (the datastore's pages, lazily built tables): several plain
        // steps' worth once, which says nothing about what drafting costs from then on.
        drafted_before_ = true;
        return;
    }
    if (r.n_tokens > 0 && r.t_pass_us > 0) {
        ++m.n_rated;
        const double w = std::max(params_.rate_ema, 1.0 / (double) m.n_rated);
        m.rate_tokens  = (1 - w) * m.rate_tokens + w * (double) r.n_tokens;
        m.rate_us      = (1 - w) * m.rate_us + w * (r.t_pass_us + r.t_draft_us);
    }
    if (r.t_draft_us > 0) {
        t_draft_us_ = t_draft_us_ == 0 ? r.t_draft_us : 0.9 * t_draft_us_ + 0.1 * r.t_draft_us;
        // Per node asked of the drafters, for sizing the next drafts.
        const double per = r.t_draft_us / (double) std::max(1, r.n_asked);
        t_draft_node_us_ = t_draft_node_us_ == 0 ? per : 0.9 * t_draft_node_us_ + 0.1 * per;
    }
    // Not in the warm-up either: plain's side of the gain leaves those passes out, so drafting's must too. Nor after
    // a prompt's pass, which a plain step would have paid for as well (see after_other).
    if (r.drafted && r.n_requests > 0 && measured) update_gain(r, same, explored, caps);
}

budget_state online_budget::export_state() const {
    budget_state s;
    s.acceptance     = acceptance_;
    s.cost_ratio_all = ratio_all_;
    s.cold_us        = cold_.n > 0 ? cold_.median : 0.0;
    s.t_draft_us     = t_draft_us_;
    for (std::size_t rows = 1; rows < single_.size(); ++rows) {
        // Only a median of several passes this process measured: a shape tried once or twice (and then avoided) is
        // never measured again. A shape the process measured less keeps what the warm start said (a short run does
        // not erase what longer ones learned).
        const cost_est & e = single_[rows];
        if (e.n_measured >= k_persist_min) {
            s.cost_ratio.emplace_back((std::int32_t) rows, ratio_of((std::int32_t) rows, 1));
        } else if (e.warm > 0) {
            s.cost_ratio.emplace_back((std::int32_t) rows, e.warm);
        }
    }
    s.t_draft_node_us = t_draft_node_us_;
    s.shape_values    = values_;
    for (std::size_t c = 0; c < k_classes; ++c) {
        const mode & m = mode_[c];
        s.plain_us.push_back(m.t_plain);
        s.spent_us.push_back(m.t_spent);
        s.n_off.push_back(m.n_off);
        s.off_left.push_back(m.off_left);
    }
    return s;
}

// --- the simple policies and the factory --------------------------------------------------------------------------

std::int32_t budget_policy::choose_equal(std::span<const budget_query> qs) {
    std::vector<std::int32_t> n(qs.size(), 0);
    choose(qs, n);
    return n.empty() ? 0 : *std::max_element(n.begin(), n.end());
}

void fixed_budget::choose(std::span<const budget_query> qs, std::span<std::int32_t> n_out) {
    for (size_t i = 0; i < qs.size(); ++i) {
        n_out[i] = qs[i].tree && !qs[i].tree->empty() ? std::min(n_, qs[i].n_max) : 0;  // no draft: a plain step
    }
}

std::int32_t budget_cap(const budget_spec & spec) {
    return !spec.speculate ? 0 : spec.n_fixed >= 0 ? spec.n_fixed : std::max(0, spec.n_max);
}

std::unique_ptr<budget_policy> make_budget_policy(const budget_spec & spec) {
    if (!spec.speculate || spec.n_fixed >= 0) {
        return traced_if_asked(std::make_unique<fixed_budget>(budget_cap(spec), spec.costs),
                               "fixed " + std::to_string(budget_cap(spec)));
    }
    online_budget_params p;
    p.n_max = budget_cap(spec);
    return traced_if_asked(std::make_unique<online_budget>(spec.costs, p, spec.warm), "auto");
}

}  // namespace rest
