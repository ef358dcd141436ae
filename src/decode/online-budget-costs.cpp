// online_budget's cost estimates: what a pass of each shape costs now, as a ratio to the start-up table, a change
// of shape, a shape's cold first pass, the slowdown of a thread count, and the neighbours' figures of a shape not
// measured (see the class comment in online-budget.h).
#include "online-budget.h"

#include <algorithm>
#include <utility>
#include <cmath>

namespace rest {

double online_budget::prior_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal) const {
    return table_.predict_batch_us(std::max<std::size_t>(n_equal, 1), n_rows, n_past);
}

void online_budget::cost_est::add(double v) {
    ratios[n++ % k_window] = v;
    median                 = median_of_window();
}

double online_budget::cost_est::median_of_window() const {
    std::array<double, k_window> v = ratios;
    const std::size_t            m = std::min(n, k_window);
    std::sort(v.begin(), v.begin() + m);
    return m == 0 ? 1.0 : m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

std::int32_t online_budget::extra_seqs(std::size_t n_equal, std::int32_t n_seqs) {
    return n_seqs > 0 ? std::max<std::int32_t>(0, n_seqs - (std::int32_t) std::max<std::size_t>(n_equal, 1)) : 0;
}

const online_budget::cost_est * online_budget::find_est(std::int32_t n_rows, std::size_t n_equal) const {
    if (n_equal <= 1 && n_rows < k_rows_flat) {
        return n_rows >= 0 && (std::size_t) n_rows < single_.size() && single_[n_rows].n > 0 ? &single_[n_rows] : nullptr;
    }
    const auto it = costs_.find(shape_key(n_rows, n_equal));
    return it == costs_.end() ? nullptr : &it->second;
}

online_budget::cost_est & online_budget::est_for(std::int32_t n_rows, std::size_t n_equal) {
    if (n_equal <= 1 && n_rows >= 0 && n_rows < k_rows_flat) {
        if ((std::size_t) n_rows >= single_.size()) single_.resize((std::size_t) n_rows + 1);
        return single_[n_rows];
    }
    return costs_[shape_key(n_rows, n_equal)];
}

double online_budget::ratio_of(std::int32_t n_rows, std::size_t n_equal, std::int32_t threads) const {
    const cost_est * e     = find_est(n_rows, n_equal);
    const bool       plain = n_rows <= (std::int32_t) std::max<std::size_t>(n_live_, 1);
    // Where this shape has no fresh figure of its own: its neighbours' (one request's drafting shapes), else the
    // ratio shared by all shapes on its thread count.
    const double     fallback = n_equal == 1 && !plain ? neighbour_ratio(n_rows, threads) : shared_ratio(threads);
    if (!e) return fallback;
    // Plain's own estimate does not fade: the plain checks keep measuring it, and the shared ratio moves with the
    // drafting passes it is compared against.
    if (plain) return e->median;
    return faded(*e, fallback);
}

double online_budget::faded(const cost_est & e, double toward) const {
    return toward + (e.median - toward) * freshness(e.at);
}

double online_budget::freshness(std::int64_t at) const {
    // 1 when measured at this step, down to 0 at twice forget_steps later: a stale reading gives way to the shared
    // one, so one old figure cannot hold a shape (or a thread count's slowdown) for good.
    return std::max(0.0, 1.0 - 0.5 * (double) (n_steps_ - at) / params_.forget_steps);
}

std::int32_t online_budget::threads_of(std::int32_t n_rows, std::size_t n_equal) const {
    // As the decoder picks them: plain passes and passes llama.cpp splits (n_equal 0) on the context's threads,
    // others on the table's choice for the batch being priced.
    const std::size_t  n = std::max<std::size_t>(n_live_, 1);
    const std::int32_t t = n_rows <= (std::int32_t) n || n_equal == 0 ? 0 : table_.threads_for(n_rows, n);
    return t > 0 ? t : context_threads_ > 0 ? context_threads_ : table_.threads_for(1);
}

double online_budget::shared_ratio(std::int32_t threads) const {
    return threads > 0 && (std::size_t) threads < ratio_threads_.size() && ratio_threads_[threads].first > 0
               ? ratio_threads_[threads].first
               : ratio_all_;
}

double online_budget::predict_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs) const {
    return predict_on(n_rows, n_past, n_equal, n_seqs, threads_of(n_rows, n_equal));
}

double online_budget::predict_on(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs,
                                 std::int32_t threads) const {
    return prior_us(n_rows, n_past, n_equal) * ratio_of(n_rows, n_equal, threads) +
           extra_seqs(n_equal, n_seqs) * seq_us();
}

double online_budget::seq_us() const {
    return seq_.n > 0 ? seq_.median : 0.0;
}

double online_budget::step_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs) const {
    const std::int32_t threads = threads_of(n_rows, n_equal);
    const double       typical = predict_on(n_rows, n_past, n_equal, n_seqs, threads) +
                           (same_shape(n_rows, n_equal, n_seqs) ? 0.0 : priced_change_us(n_rows, n_past, n_equal, threads));
    return typical * slowdown(threads);
}

double online_budget::priced_change_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal,
                                       std::int32_t threads) const {
    // A change between the plain regime (one row per request) and the drafting one is followed, sooner or later, by
    // one back. The way back is charged on the way out of the regime that prevails, and the way back into it is
    // free: where drafting does not pay, entering drafting is charged both changes and leaving it nothing; where it
    // pays, the reverse. (The relative value of the two regimes of a two-state Markov chain whose round trip costs
    // both changes, at its two ends.) Charging each change only where it happens made a step that had drafted keep
    // verifying nodes that do not pay in steady state: stories260K at one thread on a Zen 5 CPU verified nodes of
    // p > 0.34 where 0.75 is the break-even (automatic 0.94-0.98x of the best method, plain, against 0.98-0.99x now).
    // (For batches of several requests; one request's shapes carry learned values instead: below.)
    // Drafting prevails where it was measured to pay (drafting_pays()), or, until drafting is measured to lose, where
    // the cheapest drafting pass costs no more than a plain one whatever its nodes are worth (a single row on two
    // threads of that CPU costs 1.5x two rows on one); otherwise the plain regime is taken to prevail. Between two
    // drafting shapes this charges the change itself plus the difference of their ways back (which differ when
    // their thread counts do).
    // One request's steps are charged the change alone (or the shape's cold first pass: single_change_us()): the
    // learned values of its shapes (learn_values()) say what being at a shape is worth over the steps that follow,
    // plain's among them.
    const std::size_t  n_req    = std::max<std::size_t>(n_live_, 1);
    if (n_req == 1) return single_change_us(n_rows, n_equal, threads);
    const bool         drafting = n_rows > (std::int32_t) n_req;
    const bool         was      = last_rows_ > last_requests_;  // the last pass drafted (0 rows: another pass)
    const std::int32_t plain_threads = threads_of((std::int32_t) n_req, 1);
    const bool         pays          = drafting_prevails(n_past, n_equal);
    // Being in the drafting regime (its passes on `t` threads) over being in the plain one, as a cost.
    auto bias = [&](std::int32_t t) { return pays ? -change_us(t, plain_threads) : change_us(plain_threads, t); };
    const std::int32_t from_threads = last_threads_ > 0 ? last_threads_ : threads;
    const double after = drafting ? bias(threads) : 0.0;
    const double now   = was ? bias(from_threads) : 0.0;
    return std::max(0.0, change_us(threads, last_threads_) + after - now);  // the caller has seen the shape change
}

double online_budget::slowdown(std::int32_t threads) const {
    // Throughput is set by the mean time, the estimates are medians (so that one preempted pass moves them little).
    // On a quiet machine the two agree; on a busy one a pass on every core waits for the busy one: on stories260K,
    // -t 2, with a compile running, 2-thread passes averaged 5-10x their median, 1-thread passes 2x.
    if (threads <= 0 || (std::size_t) threads >= slow_threads_.size()) return 1.0;
    // Not measured lately (a thread count only plain checks use), it fades back to 1 as the cost estimates do.
    const auto & [f, at] = slow_threads_[threads];
    return std::max(1.0, 1.0 + (f - 1.0) * freshness(at));
}

double online_budget::change_us(std::int32_t threads, std::int32_t from) const {
    // Another thread count wakes or parks workers besides the graph rebuild: on stories260K, -t 2, a 2-row pass on
    // one thread after one on two took 655 us against 275 steady, and a 1-row pass on two after one on one 2,481.
    const bool other = threads > 0 && from > 0 && threads != from;
    const cost_est * s = other && (std::size_t) threads < switch_.size() ? &switch_[threads] : nullptr;
    return s && s->n > 0 ? s->median : rebuild_us();
}

double online_budget::single_change_us(std::int32_t n_rows, std::size_t n_equal, std::int32_t threads) const {
    return std::max(change_us(threads, last_threads_), cold_us(n_rows, n_equal));
}

double online_budget::rebuild_us() const {
    return rebuild_.n > 0 ? rebuild_.median : table_.rebuild_us * ratio_all_;
}

bool online_budget::observe_first_use(const step_report & r, bool same, bool warm_up) {
    // The pass after a shape's first one, if of that shape, says what the first paid for being first.
    if (pending_cold_.first > 0 && same && r.n_rows == pending_cold_.first && r.t_pass_us > 0 && !warm_up) {
        cold_.add(std::max(0.0, pending_cold_.second - r.t_pass_us));
    }
    pending_cold_ = {0, 0.0};
    // One request's first pass of this shape in this process (see cold_us()); a warm-up pass is cold anyway.
    if (r.n_requests != 1 || r.n_equal != 1 || r.n_rows < 1 || r.n_rows >= k_rows_flat) return false;
    const bool first = !seen(r.n_rows);
    mark_seen(r.n_rows);
    return first;
}

void online_budget::mark_seen(std::int32_t n_rows) {
    if (seen_.size() <= (std::size_t) n_rows) seen_.resize((std::size_t) n_rows + 1, 0);
    seen_[(std::size_t) n_rows] = 1;
}

void online_budget::observe_warm_up(std::int32_t max_rows) {
    for (std::int32_t i = 1; i <= std::min(max_rows, k_rows_flat - 1); ++i) mark_seen(i);
}

double online_budget::cold_us(std::int32_t n_rows, std::size_t n_equal) const {
    // Several requests' passes change shape with the batch anyway; their shapes are not tracked.
    if (n_equal != 1 || n_live_ != 1 || seen(n_rows) || cold_.n == 0) return 0.0;
    return cold_.median;
}

double online_budget::drafting_step_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs) const {
    // Drafting is paid once per step whatever the step's size: leaving it out would favour the cheapest passes over
    // longer drafts that amortise it over more tokens.
    return step_us(n_rows, n_past, n_equal, n_seqs) + t_draft_us_;
}

online_budget::single_price online_budget::price_single(std::int32_t n_rows, std::int32_t n_past,
                                                        std::int32_t n_seqs) const {
    single_price p;
    p.threads         = threads_of(n_rows, 1);
    const double slow = slowdown(p.threads);
    p.steady_us       = predict_on(n_rows, n_past, 1, n_seqs, p.threads) * slow;
    p.change_us       = same_shape(n_rows, 1, n_seqs) ? 0.0 : single_change_us(n_rows, 1, p.threads) * slow;
    return p;
}

double online_budget::neighbour_ratio(std::int32_t n_rows, std::int32_t threads) const {
    // The start-up table errs by shape, not only by a common factor (on the H200 a table of flat costs; two start-up
    // tables of one model here differ by 5-30% per shape), and the shared ratio follows the shapes the policy runs:
    // sitting at a shape the table underpriced by 30%, every shape not measured lately looked 30% dearer too, and the
    // policy stayed (bench-policy-replay, the H200's table with 12+ rows 30% dearer: 0.84-0.88 of the best fixed
    // budget). So a shape without a fresh figure takes its measured neighbours' on the same thread count,
    // interpolated linearly in rows (each faded by its own freshness), and the shared ratio only past them.
    // Filled for every shape at once when the step or the estimates changed (the choice prices every row count).
    if (interp_step_ != n_steps_ || interp_live_ != n_live_ || interp_.ratio.size() != single_.size()) {
        fill_neighbour_ratios();
    }
    if (n_rows >= 0 && (std::size_t) n_rows < interp_.ratio.size()) {
        if (interp_.ratio[(std::size_t) n_rows] > 0) return interp_.ratio[(std::size_t) n_rows];
    } else if ((std::size_t) threads < interp_.top.size() && interp_.top[(std::size_t) threads].rows > 0) {
        return interp_.top[(std::size_t) threads].ratio;  // past every estimate: the largest measured on its threads
    }
    return shared_ratio(threads);
}

void online_budget::fill_neighbour_ratios() const {
    interp_step_ = n_steps_;
    interp_live_ = n_live_;
    neighbours & w = interp_;  // reused: the hot path allocates nothing once its vectors have grown
    const std::int32_t n     = (std::int32_t) single_.size();
    const std::int32_t first = (std::int32_t) std::max<std::size_t>(n_live_, 1) + 1;  // drafting shapes only
    w.ratio.assign((std::size_t) n, 0.0);  // 0: no neighbour (the shared ratio)
    w.threads.assign((std::size_t) n, 0);
    w.own.assign((std::size_t) n, -1.0);
    w.below.assign((std::size_t) n, neighbours::seen{});
    for (std::int32_t r = first; r < n; ++r) {
        w.threads[r] = threads_of(r, 1);
        if (single_[r].n > 0 && freshness(single_[r].at) > 0) w.own[r] = faded(single_[r], shared_ratio(w.threads[r]));
    }
    // The nearest measured shape on each thread count, as a sweep up and then one down passes.
    w.last.clear();
    for (std::int32_t r = first; r < n; ++r) {
        const neighbours::seen & b = per_threads(w.last, w.threads[r], neighbours::seen{});
        w.below[r]                 = b;
        if (w.own[r] >= 0) per_threads(w.last, w.threads[r], neighbours::seen{}) = {r, w.own[r]};
    }
    std::swap(w.top, w.last);  // the up sweep's last: the largest measured shape on each thread count
    w.last.clear();
    for (std::int32_t r = n - 1; r >= first; --r) {
        const neighbours::seen   a  = per_threads(w.last, w.threads[r], neighbours::seen{});
        const neighbours::seen & lo = w.below[r];
        if (lo.rows > 0 && a.rows > 0) {
            w.ratio[r] = lo.ratio + (a.ratio - lo.ratio) * (double) (r - lo.rows) / (double) (a.rows - lo.rows);
        } else if (lo.rows > 0 || a.rows > 0) {
            w.ratio[r] = lo.rows > 0 ? lo.ratio : a.ratio;
        }
        if (w.own[r] >= 0) per_threads(w.last, w.threads[r], neighbours::seen{}) = {r, w.own[r]};
    }
}

}  // namespace rest
