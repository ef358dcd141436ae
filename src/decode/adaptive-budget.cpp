#include "rest/cost-model.h"

#include <algorithm>
#include <cmath>

namespace rest {

adaptive_budget::adaptive_budget(cost_table table, adaptive_budget_params params) :
    table_(std::move(table)), params_(params), correction_(std::max<size_t>(1, table_.rows.size()), 0.0) {
    for (const auto & b : table_.batches) correction_batch_.emplace_back(std::max<size_t>(1, b.per.size()), 0.0);
}

template <class Self> auto & adaptive_budget::correction_slot(Self & self, std::int32_t n_rows, std::size_t n_equal) {
    const auto [b, r] = self.table_.nearest_batch(n_equal, n_rows);
    return b < self.correction_batch_.size() ? self.correction_batch_[b][r] : self.correction_[self.table_.nearest(n_rows)];
}

double adaptive_budget::correction_of(std::int32_t n_rows, std::size_t n_equal) const {
    // A shape never observed since start-up takes the correction all shapes share (e.g. a machine busier now than
    // at calibration), so one stale entry cannot keep drafting switched off.
    const double c = correction_slot(*this, n_rows, n_equal);
    return c > 0 ? c : correction_all_;
}

double adaptive_budget::predict_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal) const {
    return table_.predict_batch_us(n_equal, n_rows, n_past) * correction_of(n_rows, n_equal);
}

double adaptive_budget::step_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal) const {
    const bool same = n_rows == last_rows_ && n_equal == last_equal_;
    return predict_us(n_rows, n_past, n_equal) + (same ? 0.0 : table_.rebuild_us * correction_all_);
}

double adaptive_budget::drafting_step_us(std::int32_t n_rows, std::int32_t n_past, double inflate,
                                         std::size_t n_equal) const {
    // Drafting is paid once per step whatever the step's size: leaving it out would favour the cheapest passes over
    // longer drafts that amortise it over more tokens. (The walk after the pass, sampling and compaction, grows
    // with the tokens emitted and costs plain decoding the same per token, so it does not change the choice.)
    return step_us(n_rows, n_past, n_equal) * inflate + t_draft_us_;
}

double adaptive_budget::calibrated(float score, std::uint8_t sources) const {
    const double s = std::clamp((double) score, 0.0, 1.0);
    const bin &  b = calib_[sources & 7][std::min(k_bins - 1, (int) (s * k_bins))];
    return (b.accepted + params_.prior_weight * s) / (b.n + params_.prior_weight);
}

namespace {

// A node's drafter score given that its parent is accepted.
double conditional_score(const draft_tree & t, std::size_t i) {
    const double s = t.scores[i];
    const int    p = t.parents[i];
    if (p < 0) return s;
    return t.scores[p] > 0 ? s / t.scores[p] : 0.0;
}

}  // namespace

std::vector<double> adaptive_budget::path_probabilities(const draft_tree & t) const {
    std::vector<double> v(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
        const double c = calibrated((float) conditional_score(t, i), t.sources[i]);
        v[i]           = t.parents[i] < 0 ? c : v[t.parents[i]] * c;
    }
    return v;
}

std::int32_t adaptive_budget::draft_nodes_hint() const {
    return 2 + *std::max_element(recent_.begin(), recent_.end());
}

void adaptive_budget::note_choice(std::int32_t n_nodes) {
    recent_[recent_at_] = n_nodes;
    recent_at_          = (recent_at_ + 1) % k_recent;
}

bool adaptive_budget::want_draft() {
    if (skip_ > 0) {
        --skip_;
        return false;
    }
    return true;
}

void adaptive_budget::settle_last_step() {
    if (!pending_) return;
    pending_ = false;
    if (pend_time_us_ <= 0 || pend_plain_us_ <= 0) return;
    guard &      g     = guard_[std::min<std::size_t>(pend_nq_, k_guards - 1)];
    const double ratio = (pend_tokens_ / pend_time_us_) / ((double) pend_nq_ / pend_plain_us_);
    g.ratio            = 0.9 * g.ratio + 0.1 * std::clamp(ratio, 0.1, 10.0);
    g.inflate          = g.ratio < 1.0 ? std::min(4.0, g.inflate * 1.02) : std::max(1.0, g.inflate / 1.02);
}

adaptive_budget::batch adaptive_budget::prepare(std::span<const budget_query> qs) const {
    batch  b;
    double n_past_sum = 0;
    b.lim.assign(qs.size(), 0);
    b.pad.assign(qs.size(), 0);
    b.cap.assign(qs.size(), 0);
    b.prob.resize(qs.size());
    for (size_t i = 0; i < qs.size(); ++i) {
        // A request without draft nodes is not padded: its step stays a plain 1-row pass, which computes exactly
        // what plain decoding does (a padded pass takes other kernels, e.g. flash attention's split-KV path is for
        // single rows only), so outputs can differ from plain only where drafts were verified.
        const size_t n_tree = qs[i].tree ? qs[i].tree->size() : 0;
        b.cap[i] = std::min<size_t>((size_t) std::max(0, qs[i].n_max), (size_t) params_.n_max);
        b.pad[i] = n_tree == 0 ? 0 : b.cap[i];
        b.lim[i] = std::min(n_tree, b.pad[i]);
        if (b.lim[i] > 0) b.prob[i] = path_probabilities(*qs[i].tree);
        b.prob[i].resize(b.pad[i], 0.0);  // padding is worth nothing
        b.lim_max = std::max(b.lim_max, b.lim[i]);
        b.pad_max = std::max(b.pad_max, b.pad[i]);
        n_past_sum += qs[i].n_past;
    }
    b.n_past = (std::int32_t) (n_past_sum / (double) std::max<size_t>(1, qs.size()));
    return b;
}

void adaptive_budget::choose(std::span<const budget_query> qs, std::span<std::int32_t> n_out) {
    settle_last_step();
    const size_t nq = qs.size();
    std::fill(n_out.begin(), n_out.end(), 0);
    // Steps that drafted nothing (drafting skipped while backing off, or no match) stay plain and say nothing about
    // whether drafts pay: leave the back-off state alone, or it would re-arm itself on every skipped step and never
    // probe again.
    const batch b = prepare(qs);
    if (b.lim_max == 0) {
        return;
    }
    const std::vector<size_t> &              lim  = b.lim;
    const std::vector<std::vector<double>> & prob = b.prob;
    const std::int32_t                       p    = b.n_past;
    std::vector<size_t>                      next(nq, 0);

    // Greedy over the whole batch: add the next node (in each tree's best-first order, padding last) with the
    // highest calibrated probability, and remember the configuration with the best expected tokens per microsecond.
    std::int32_t rows      = (std::int32_t) nq;
    double       expected  = (double) nq;
    const double t_plain   = step_us(rows, p);
    const double inflate   = draft_cost_factor(nq);
    double       best_rate = expected / t_plain;
    std::int32_t rows_best = rows;  // rows of the best configuration so far
    while (true) {
        size_t pick = nq;
        double pv   = -1;
        for (size_t i = 0; i < nq; ++i) {
            if (next[i] < b.pad[i]) {
                const double v = prob[i][next[i]];
                if (v > pv) { pv = v; pick = i; }
            }
        }
        if (pick == nq) break;
        ++next[pick];
        ++rows;
        expected += pv;
        const double rate = expected / drafting_step_us(rows, p, inflate);
        if (rate > best_rate) {
            best_rate = rate;
            rows_best = rows;
            std::copy(next.begin(), next.end(), n_out.begin());
        }
    }
    const auto [ex, k] = after_choice(qs, lim, t_plain, rows_best);
    if (ex < nq) {
        n_out[ex] = std::max(n_out[ex], k);
    }
    note_choice(*std::max_element(n_out.begin(), n_out.end()));
}

std::int32_t adaptive_budget::choose_equal(std::span<const budget_query> qs) {
    settle_last_step();
    const size_t nq = qs.size();
    const batch  b  = prepare(qs);
    if (b.lim_max == 0) {
        return 0;  // nobody drafted: plain steps (as in choose(), the back-off state is left alone)
    }
    const std::vector<size_t> &              lim  = b.lim;
    const std::vector<std::vector<double>> & prob = b.prob;
    const std::int32_t                       p    = b.n_past;
    // Every chain length k costs 1 + min(k, cap) rows per request, whichever requests have drafts that long: the
    // decoder pads all of them, those without a draft too, since llama.cpp would otherwise split the batch into one
    // pass per distinct row count.
    double       expected  = (double) nq;
    const double t_plain   = step_us((std::int32_t) nq, p, nq);
    const double inflate   = draft_cost_factor(nq);
    double       best_rate = expected / t_plain;
    std::int32_t rows_best = (std::int32_t) nq, k_best = 0;
    for (size_t k = 1; k <= b.pad_max; ++k) {
        std::int32_t rows = 0;
        for (size_t i = 0; i < nq; ++i) {
            if (k <= lim[i]) expected += prob[i][k - 1];
            rows += 1 + (std::int32_t) std::min(k, b.cap[i]);
        }
        const double rate = expected / drafting_step_us(rows, p, inflate, nq);
        if (rate > best_rate) {
            best_rate = rate;
            rows_best = rows;
            k_best    = (std::int32_t) k;
        }
    }
    const auto [ex, k] = after_choice(qs, lim, t_plain, rows_best);
    const std::int32_t n = ex < nq ? std::max(k_best, k) : k_best;
    note_choice(n);
    return n;
}

std::pair<std::size_t, std::int32_t> adaptive_budget::after_choice(std::span<const budget_query> qs,
                                                                   std::span<const std::size_t> lim, double t_plain,
                                                                   std::int32_t rows_best) {
    const size_t nq = qs.size();
    // The choice priced the drafting time into every drafting configuration, so it kept one only if it beats plain
    // decoding even after paying for the drafts.
    const bool pays = rows_best > (std::int32_t) nq;
    if (pays) {
        n_zero_        = 0;
        pending_       = true;
        pend_nq_       = nq;
        pend_plain_us_ = t_plain;
        pend_time_us_  = -1;
        pend_tokens_   = (double) nq;
        return {nq, 0};
    }
    // Not paying: back off drafting exponentially, if drafting costs enough to matter. Keep learning: when the best
    // node's drafter score is promising but the calibration bins of the first nodes have little evidence, verify up
    // to explore_nodes of them anyway, on exponentially spaced non-paying steps.
    ++n_zero_;
    if (t_draft_us_ > params_.draft_cost_frac * t_plain) {
        skip_ = std::min(params_.backoff_max, 1 << std::min(n_zero_ - 1, 20)) - 1;
    }
    if ((n_zero_ & (n_zero_ - 1)) != 0 && n_zero_ % 32 != 0) {
        return {nq, 0};
    }
    // One request explores per step (the one with the most promising first node), so a busy batch pays little.
    size_t ex = nq;
    for (size_t i = 0; i < nq; ++i) {
        if (lim[i] > 0 && qs[i].tree->scores[0] >= params_.explore_min_score &&
            (ex == nq || qs[i].tree->scores[0] > qs[ex].tree->scores[0])) {
            ex = i;
        }
    }
    if (ex == nq) {
        return {nq, 0};
    }
    const draft_tree & t = *qs[ex].tree;
    std::int32_t       k = 0;
    while (k < params_.explore_nodes && (size_t) k < lim[ex]) {
        const double s = std::clamp(conditional_score(t, (size_t) k), 0.0, 1.0);
        if (calib_[t.sources[k] & 7][std::min(k_bins - 1, (int) (s * k_bins))].n >= params_.explore_obs) {
            break;
        }
        ++k;
    }
    return {ex, k};
}

void adaptive_budget::observe_step(std::int32_t n_rows, std::size_t n_equal, std::int32_t n_past, double t_us,
                                   double t_draft_us) {
    const bool   same = n_rows == last_rows_ && n_equal == last_equal_;
    const double base = table_.predict_batch_us(n_equal, n_rows, n_past) + (same ? 0.0 : table_.rebuild_us);
    last_rows_        = n_rows;
    last_equal_       = n_equal;
    if (n_equal > 0 && base > 0 && t_us > 0) {
        double & c = correction_slot(*this, n_rows, n_equal);
        if (c <= 0) c = correction_all_;
        // Clamp single observations so one preempted step cannot swing the model.
        const double ratio = std::clamp(t_us / base, 0.25 * c, 4.0 * c);
        c = (1 - params_.time_ema) * c + params_.time_ema * ratio;
        correction_all_ = (1 - params_.time_ema) * correction_all_ + params_.time_ema * std::clamp(ratio, 0.25, 4.0);
    }
    if (t_draft_us > 0) {
        t_draft_us_ = t_draft_us_ == 0 ? t_draft_us : 0.9 * t_draft_us_ + 0.1 * t_draft_us;
    }
    if (pending_) pend_time_us_ = t_us + t_draft_us;
}

void adaptive_budget::observe_acceptance(const draft_tree & tree, std::int32_t n_verified,
                                         std::span<const std::int32_t> path) {
    if (pending_) pend_tokens_ += (double) path.size();
    // A node tells about its conditional probability only if its parent was accepted (or is the root).
    const std::int32_t n = std::min(n_verified, (std::int32_t) tree.size());
    std::vector<char>  accepted(n, 0);
    for (std::int32_t v : path) {
        if (v >= 0 && v < n) accepted[v] = 1;
    }
    for (std::int32_t i = 0; i < n; ++i) {
        const std::int32_t par = tree.parents[i];
        if (par >= 0 && !accepted[par]) continue;
        const double s = std::clamp(conditional_score(tree, (size_t) i), 0.0, 1.0);
        bin & b = calib_[tree.sources[i] & 7][std::min(k_bins - 1, (int) (s * k_bins))];
        b.n += 1;
        b.accepted += accepted[i];
    }
}

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

}  // namespace rest
