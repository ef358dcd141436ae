#include "rest/prefill-pacer.h"

#include <algorithm>
#include <cmath>

namespace rest {

void prefill_pacer::recent::add(double x) {
    v[(std::size_t) at] = x;
    at                  = (at + 1) % (std::int32_t) v.size();
    n                   = std::min(n + 1, (std::int32_t) v.size());
}

double prefill_pacer::recent::median() const {
    if (n == 0) return -1;
    std::array<double, 7> s = v;
    std::nth_element(s.begin(), s.begin() + n / 2, s.begin() + n);
    return s[(std::size_t) (n / 2)];
}

prefill_pacer::prefill_pacer(std::int32_t n_max, prefill_pacer_params p) : n_max_(std::max(1, n_max)), p_(p) {}

std::int32_t prefill_pacer::next() {
    if (p_.gap_ratio <= 1.0) return n_max_;  // pacing off: whole batches, whatever the others wait
    const double plain = plain_us();
    if (plain < 0 ? since_plain_ > 0 : since_plain_ >= p_.probe_every) {
        return 0;  // measure a step without prompt rows first
    }
    const std::int32_t grow = last_ > 0 ? std::min(n_max_, 2 * last_) : std::min(n_max_, std::max(1, p_.first_chunk));
    std::int32_t       n    = grow;
    if (plain >= 0 && row_us_ > 0) {
        const double fit = ((p_.gap_ratio - 1.0) * plain - fixed_us_) / row_us_;
        n                = std::clamp((std::int32_t) std::floor(std::min(fit, (double) n_max_)), 1, grow);
        // With one chunk size in sight the fixed cost cannot be told from the rows': one step a size up shows it
        // (without, a fixed cost priced as rows holds the chunks below where they could be).
        if (one_size_ && n_points_ >= 3 && n == last_ && n < grow) ++n;
    }
    last_ = n;
    return n;
}

void prefill_pacer::observe(double t_us, std::int32_t n_prompt) {
    if (n_prompt <= 0) {
        plain_.add(t_us);
        since_plain_ = 0;
        return;
    }
    ++since_plain_;
    const double plain = plain_us();
    if (plain < 0) return;
    points_[(std::size_t) at_] = {(double) n_prompt, t_us - plain};
    at_                        = (at_ + 1) % (std::int32_t) points_.size();
    n_points_                  = std::min(n_points_ + 1, (std::int32_t) points_.size());
    fit();
}

void prefill_pacer::fit() {
    // Clip outliers (a stalled step) at 3x the median addition, then a least-squares line added = fixed + n * row.
    std::array<double, 8> a{};
    for (std::int32_t i = 0; i < n_points_; ++i) a[(std::size_t) i] = points_[(std::size_t) i].added;
    std::nth_element(a.begin(), a.begin() + n_points_ / 2, a.begin() + n_points_);
    const double cap = 3 * std::max(a[(std::size_t) (n_points_ / 2)], 1e-9);
    double       sn = 0, sa = 0, snn = 0, sna = 0;
    for (std::int32_t i = 0; i < n_points_; ++i) {
        const double n = points_[(std::size_t) i].n, x = std::min(points_[(std::size_t) i].added, cap);
        sn += n;
        sa += x;
        snn += n * n;
        sna += n * x;
    }
    const double k = n_points_, var = snn - sn * sn / k;
    // A row costs at least a little: steps as fast as plain ones must not make chunks unbounded.
    const double floor_row = 1e-3 * std::max(plain_us(), 1.0);
    one_size_              = var < 1e-9;
    if (!one_size_) {  // two chunk sizes or more: both parameters
        const double row = (sna - sn * sa / k) / var;
        const double fixed = (sa - row * sn) / k;
        if (row > floor_row && fixed >= 0) {
            row_us_   = row;
            fixed_us_ = fixed;
            return;
        }
    }
    // One size (or a line that makes no sense): the fixed cost stays, the rows take the rest.
    row_us_ = std::max((sa / k - fixed_us_) / (sn / k), floor_row);
}

}  // namespace rest
