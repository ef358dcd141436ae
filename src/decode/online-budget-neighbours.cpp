// online_budget's pricing of a shape by its measured neighbours (see neighbour_ratio() in online-budget.h).
#include "online-budget.h"

namespace rest {

double online_budget::neighbour_ratio(std::int32_t n_rows) const {
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
    const std::int32_t threads = threads_of(n_rows, 1);
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
        if (w.own[r] >= 0) per_threads(w.last, w.threads[r], neighbours::seen{}) = {w.threads[r], r, w.own[r]};
    }
    w.top = w.last;
    w.last.clear();
    for (std::int32_t r = n - 1; r >= first; --r) {
        const neighbours::seen   a  = per_threads(w.last, w.threads[r], neighbours::seen{});
        const neighbours::seen & lo = w.below[r];
        if (lo.rows > 0 && a.rows > 0) {
            w.ratio[r] = lo.ratio + (a.ratio - lo.ratio) * (double) (r - lo.rows) / (double) (a.rows - lo.rows);
        } else if (lo.rows > 0 || a.rows > 0) {
            w.ratio[r] = lo.rows > 0 ? lo.ratio : a.ratio;
        }
        if (w.own[r] >= 0) per_threads(w.last, w.threads[r], neighbours::seen{}) = {w.threads[r], r, w.own[r]};
    }
}

}  // namespace rest
