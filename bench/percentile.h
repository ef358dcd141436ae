// The nearest-rank percentile the latency benchmarks print (q in [0, 1]; 0 for no samples).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace bench {

inline double percentile_of_sorted(const std::vector<double> & sorted, double q) {
    if (sorted.empty()) return 0;
    return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(q * static_cast<double>(sorted.size())))];
}

inline double percentile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return percentile_of_sorted(v, q);
}

}  // namespace bench
