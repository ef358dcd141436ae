#include "rest/cost-model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

// The cost table: prediction by interpolation, the batch grid, and the one-line cache form.
namespace rest {

namespace {

// y(x) through the points (xs[i], ys[i]), xs increasing: linear between them, constant below the first, and past the
// last extended with the last segment's slope (never decreasing).
double interpolate(const std::vector<std::int32_t> & xs, const std::vector<double> & ys, double x) {
    const auto it = std::lower_bound(xs.begin(), xs.end(), x, [](std::int32_t a, double v) { return a < v; });
    if (it == xs.end()) {
        const size_t k     = xs.size() - 1;
        const double slope = k > 0 ? (ys[k] - ys[k - 1]) / std::max(1, xs[k] - xs[k - 1]) : ys[k];
        return ys[k] + std::max(slope, 0.0) * (x - xs[k]);
    }
    const size_t k = it - xs.begin();
    if (*it == x || k == 0) return ys[k];
    const double f = (x - xs[k - 1]) / double(xs[k] - xs[k - 1]);
    return ys[k - 1] + f * (ys[k] - ys[k - 1]);
}

// Index of the value nearest to x in increasing xs (ties: the larger); 0 for an empty vector.
std::size_t nearest_index(const std::vector<std::int32_t> & xs, double x) {
    if (xs.empty()) return 0;
    const auto it = std::lower_bound(xs.begin(), xs.end(), x, [](std::int32_t a, double v) { return a < v; });
    if (it == xs.end()) return xs.size() - 1;
    if (it != xs.begin() && (*it - x) > (x - *(it - 1))) return (it - xs.begin()) - 1;
    return it - xs.begin();
}

// xs increasing from 1, with as many ys (and threads, unless empty).
bool valid_curve(const std::vector<std::int32_t> & xs, const std::vector<double> & ys,
                 const std::vector<std::int32_t> & threads) {
    return !xs.empty() && xs.front() == 1 && ys.size() == xs.size() &&
           (threads.empty() || threads.size() == xs.size()) &&
           std::adjacent_find(xs.begin(), xs.end(), std::greater_equal<>()) == xs.end();
}

// What the predictions need not to read out of bounds; valid() checks everything, once, where tables come in.
bool sized(const std::vector<std::int32_t> & xs, const std::vector<double> & ys) {
    return !xs.empty() && ys.size() == xs.size();
}

}  // namespace

bool cost_table::valid() const {
    if (!valid_curve(rows, t_us, threads)) return false;
    std::int32_t last = 1;
    for (const auto & b : batches) {
        if (b.requests <= last || !valid_curve(b.per, b.t_us, b.threads)) return false;
        last = b.requests;
    }
    return true;
}

double cost_table::predict_us(std::int32_t n_rows, std::int32_t n_past) const {
    if (!sized(rows, t_us)) {
        return (double) n_rows;  // uninformed: linear cost
    }
    n_rows = std::max(n_rows, 1);
    return interpolate(rows, t_us, n_rows) + attn_us * (double) n_rows * (double) std::max(n_past, 0);
}

double cost_table::predict_batch_us(std::size_t n_requests, std::int32_t n_rows, std::int32_t n_past) const {
    if (n_requests <= 1 || batches.empty() || !sized(rows, t_us)) {
        return predict_us(n_rows, n_past);
    }
    const double per = std::max(1.0, (double) n_rows / (double) n_requests);
    // The curve over rows per request at a measured request count; one request is the table itself. Past the longest
    // chain measured (a time budget can cut a grid short) it grows as the one-request table does over total rows.
    auto at = [&](std::size_t b) {
        if (b == batches.size()) return interpolate(rows, t_us, per);
        const batch_costs & g = batches[b];
        if (!sized(g.per, g.t_us)) return interpolate(rows, t_us, (double) g.requests * per);
        if (per <= g.per.back()) return interpolate(g.per, g.t_us, per);
        const double n = g.requests;
        return g.t_us.back() * interpolate(rows, t_us, n * per) / interpolate(rows, t_us, n * g.per.back());
    };
    const double s = (double) n_requests;
    std::size_t  hi = 0;
    while (hi < batches.size() && batches[hi].requests < s) ++hi;
    double base;
    if (hi == batches.size()) {
        base = at(hi - 1) * s / batches[hi - 1].requests;  // more requests than measured: proportional
    } else if (batches[hi].requests == s) {
        base = at(hi);
    } else {
        const double s0 = hi == 0 ? 1.0 : batches[hi - 1].requests;
        const double t0 = at(hi == 0 ? batches.size() : hi - 1);
        base = t0 + (s - s0) / (batches[hi].requests - s0) * (at(hi) - t0);
    }
    return base + attn_us * (double) n_rows * (double) std::max(n_past, 0);
}

std::pair<std::size_t, std::size_t> cost_table::nearest_batch(std::size_t n_requests, std::int32_t n_rows) const {
    if (n_requests <= 1 || batches.empty()) return {batches.size(), 0};
    // The nearest measured request count (ties: the larger); grids are short, a scan is cheapest.
    std::size_t b = 0;
    for (std::size_t i = 1; i < batches.size(); ++i) {
        const double d_best = std::abs((double) batches[b].requests - (double) n_requests);
        const double d      = std::abs((double) batches[i].requests - (double) n_requests);
        if (d <= d_best) b = i;
    }
    return {b, nearest_index(batches[b].per, (double) n_rows / (double) n_requests)};
}

std::size_t cost_table::nearest(std::int32_t n_rows) const {
    return nearest_index(rows, n_rows);
}

std::int32_t cost_table::threads_for(std::int32_t n_rows) const {
    return sized(rows, t_us) && threads.size() == rows.size() ? threads[nearest(n_rows)] : 0;
}

std::int32_t cost_table::threads_for(std::int32_t n_rows, std::size_t n_requests) const {
    if (n_requests <= 1) return threads_for(n_rows);
    const auto [b, r] = nearest_batch(n_requests, n_rows);
    return b < batches.size() && r < batches[b].threads.size() ? batches[b].threads[r] : 0;
}

namespace {

// "<n> xs... ys... threads...": a curve of the cache line.
void write_curve(std::ostream & out, const std::vector<std::int32_t> & xs, const std::vector<double> & ys,
                 const std::vector<std::int32_t> & threads) {
    out << ' ' << xs.size();
    for (auto x : xs) out << ' ' << x;
    for (auto y : ys) out << ' ' << y;
    for (size_t i = 0; i < xs.size(); ++i) out << ' ' << (threads.empty() ? 0 : threads[i]);
}

// Reads what write_curve() wrote: xs increasing from 1, times positive, thread counts non-negative.
bool read_curve(std::istream & in, std::vector<std::int32_t> & xs, std::vector<double> & ys,
                std::vector<std::int32_t> & threads) {
    size_t n = 0;
    if (!(in >> n) || n == 0 || n > 4096) return false;
    xs.resize(n);
    ys.resize(n);
    threads.resize(n);
    for (auto & x : xs) if (!(in >> x)) return false;
    for (auto & y : ys) if (!(in >> y) || !(y > 0)) return false;
    for (auto & k : threads) if (!(in >> k) || k < 0) return false;
    return valid_curve(xs, ys, threads);
}

}  // namespace

std::string cost_table::serialize() const {
    std::ostringstream out;
    out.precision(9);
    out << "rest-cost 4 " << attn_us << ' ' << rebuild_us;
    write_curve(out, rows, t_us, threads);
    out << ' ' << batches.size();
    for (const auto & b : batches) {
        out << ' ' << b.requests;
        write_curve(out, b.per, b.t_us, b.threads);
    }
    return out.str();
}

cost_table cost_table::parse(const std::string & text) {
    std::istringstream in(text);
    std::string        magic;
    int                version = 0;
    size_t             n_batches = 0;
    cost_table         t;
    if (!(in >> magic >> version) || magic != "rest-cost" || version != 4 || !(in >> t.attn_us >> t.rebuild_us) ||
        t.attn_us < 0 || t.rebuild_us < 0 || !read_curve(in, t.rows, t.t_us, t.threads) || !(in >> n_batches) ||
        n_batches > 64) {
        return {};
    }
    t.batches.resize(n_batches);
    std::int32_t last = 1;
    for (auto & b : t.batches) {
        if (!(in >> b.requests) || b.requests <= last || !read_curve(in, b.per, b.t_us, b.threads)) return {};
        last = b.requests;
    }
    std::string rest;
    if (in >> rest) return {};  // trailing garbage
    return t;
}

}  // namespace rest
