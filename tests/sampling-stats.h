// Two-sample chi-square test for the sampling-exactness tests: are two samples of discrete outcomes (counts per
// cell) drawn from one distribution? Used with speculative vs independent plain samples (must pass) and with a
// biased control vs plain (must fail).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace rest_test {

struct chi2_result {
    double stat    = 0;  // Pearson's X^2
    int    df      = 0;  // cells after pooling - 1
    double p       = 1;  // upper tail probability of chi-square(df) at stat
    int    n_cells = 0;  // cells after pooling (the "other" cell included)
};

// Regularized upper incomplete gamma function Q(a, x) (Numerical Recipes' gammq: the series for x < a + 1, the
// continued fraction by Lentz's method otherwise).
inline double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    const double log_front = -x + a * std::log(x) - std::lgamma(a);
    if (x < a + 1) {
        double term = 1.0 / a, sum = term;
        for (int n = 1; n < 10000 && term > sum * 1e-16; ++n) {
            term *= x / (a + n);
            sum += term;
        }
        return std::max(0.0, 1.0 - sum * std::exp(log_front));
    }
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 10000; ++i) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (std::fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1 / d;
        const double del = d * c;
        h *= del;
        if (std::fabs(del - 1) < 1e-16) break;
    }
    return std::exp(log_front) * h;
}

// P(X > x) for X ~ chi-square(df).
inline double chi2_sf(double x, int df) { return df > 0 ? gamma_q(df / 2.0, x / 2.0) : 1.0; }

// Two-sample chi-square test of homogeneity over cells (a[i] and b[i] count the same outcome). Cells with fewer
// than min_total observations over both samples are pooled into one "other" cell, and that cell, if it is sparse
// itself, is merged into the smallest kept cell: with equal sample sizes every expected count is then at least
// min_total / 2 (the textbook condition is >= 5).
inline chi2_result chi2_two_sample(const std::vector<int> & a, const std::vector<int> & b, int min_total = 10) {
    std::vector<std::pair<double, double>> cells;
    double pa = 0, pb = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] + b[i] >= min_total) cells.emplace_back(a[i], b[i]);
        else { pa += a[i]; pb += b[i]; }
    }
    if (pa + pb >= min_total || (pa + pb > 0 && cells.empty())) {
        cells.emplace_back(pa, pb);
    } else if (pa + pb > 0) {
        auto smallest = std::min_element(cells.begin(), cells.end(), [](const auto & x, const auto & y) {
            return x.first + x.second < y.first + y.second;
        });
        smallest->first += pa;
        smallest->second += pb;
    }
    double na = 0, nb = 0;
    for (const auto & [x, y] : cells) { na += x; nb += y; }
    chi2_result r;
    r.n_cells = (int) cells.size();
    r.df      = r.n_cells - 1;
    if (na == 0 || nb == 0 || r.df < 1) return r;
    for (const auto & [x, y] : cells) {
        const double t = x + y, ea = t * na / (na + nb), eb = t * nb / (na + nb);
        r.stat += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
    }
    r.p = chi2_sf(r.stat, r.df);
    return r;
}

// The same over sparse cells keyed by outcome (e.g. a pair of tokens as t0 * n_vocab + t1).
inline chi2_result chi2_two_sample(const std::map<std::int64_t, int> & a, const std::map<std::int64_t, int> & b,
                                   int min_total = 10) {
    std::map<std::int64_t, std::pair<int, int>> both;
    for (const auto & [k, n] : a) both[k].first += n;
    for (const auto & [k, n] : b) both[k].second += n;
    std::vector<int> va, vb;
    for (const auto & [k, n] : both) {
        va.push_back(n.first);
        vb.push_back(n.second);
    }
    return chi2_two_sample(va, vb, min_total);
}

// Statistic and degrees of freedom only (test-llama-sampling.cpp's form).
inline std::pair<double, int> chi2(const std::vector<int> & a, const std::vector<int> & b) {
    const chi2_result r = chi2_two_sample(a, b);
    return {r.stat, r.df};
}

// Upper 0.001 quantile of chi-square(df), Wilson-Hilferty approximation.
inline double chi2_critical(int df) {
    const double z = 3.090, k = df;
    return k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
}

}  // namespace rest_test
