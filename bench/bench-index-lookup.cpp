// Latency of a real datastore: open time and interval-lookup percentiles (what Google Benchmark's means hide).
//
//   bench-index-lookup INDEX [n_queries] [seed]
//
// Patterns are cut from the corpus itself (random suffix-array rank, the next L tokens inside one document), so every
// lookup finds at least one occurrence, like REST's lookups of a context that recurs. Each pattern is looked up in
// every shard (find_all). Two passes over the same patterns: the first maps pages in, the second is the warm figure.
#include "percentile.h"

#include "rest/datastore.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

using bench::percentile;

void print_row(const char * label, const std::vector<double> & us) {
    double sum = 0;
    for (double x : us) {
        sum += x;
    }
    std::printf("  %-10s %8zu %9.2f %9.2f %9.2f %9.2f %9.2f\n", label, us.size(), sum / std::max<std::size_t>(1, us.size()),
                percentile(us, 0.50), percentile(us, 0.90), percentile(us, 0.99), percentile(us, 1.0));
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s INDEX [n_queries] [seed]\n", argv[0]);
        return 1;
    }
    const std::string path      = argv[1];
    const std::size_t n_queries = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20000;
    const unsigned    seed      = argc > 3 ? static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10)) : 1;
    try {
        // Open: the first open in this process, then repeated opens (header + table only; cost must not grow).
        std::vector<double> open_us;
        for (int i = 0; i < 21; ++i) {
            const auto t0 = clock_type::now();
            auto       ds = rest::datastore::open(path);
            open_us.push_back(us_since(t0));
        }
        std::printf("open: first %.3f ms, median %.3f ms, max %.3f ms (21 opens)\n", open_us[0] / 1e3,
                    percentile(open_us, 0.5) / 1e3, percentile(open_us, 1.0) / 1e3);

        const auto   ds     = rest::datastore::open(path);
        const auto   shards = ds->shards();
        const auto & info   = ds->info();
        std::printf("index: %llu tokens, %zu shard(s), %llu bytes\n", (unsigned long long) info.n_tokens, shards.size(),
                    (unsigned long long) info.n_bytes);

        std::mt19937_64                      rng(seed);
        const std::vector<std::size_t>       lengths = {1, 2, 4, 8, 16};
        std::vector<std::vector<rest::token_id>> patterns;
        std::vector<std::size_t>             pattern_len;
        std::uint64_t                        total = 0;
        for (const auto & s : shards) {
            total += s.n_suffixes();
        }
        while (patterns.size() < n_queries) {
            const std::size_t len = lengths[patterns.size() % lengths.size()];
            std::uint64_t     r   = rng() % total;
            std::size_t       si  = 0;
            while (r >= shards[si].n_suffixes()) {
                r -= shards[si].n_suffixes();
                ++si;
            }
            std::vector<rest::token_id> p(len);
            if (shards[si].read(shards[si].suffix(r), p) == len) {
                patterns.push_back(std::move(p));
                pattern_len.push_back(len);
            }
        }

        std::uint64_t checksum = 0;  // keeps the lookups observable
        for (int pass = 0; pass < 2; ++pass) {
            std::vector<std::vector<double>> by_len(lengths.size());
            std::vector<double>              all;
            std::vector<double>              step;  // one narrow() from the (L-1)-token range to the L-token range
            for (std::size_t q = 0; q < patterns.size(); ++q) {
                const auto t0 = clock_type::now();
                const auto m  = rest::find_all(*ds, patterns[q]);
                const double us = us_since(t0);
                checksum += m.count;
                all.push_back(us);
                by_len[std::find(lengths.begin(), lengths.end(), pattern_len[q]) - lengths.begin()].push_back(us);
            }
            // Separately (so the full lookup of the same pattern did not just warm the same lines): one narrow()
            // step from the range of the first L-1 tokens, as drafting extends a match token by token.
            for (std::size_t q = 0; q < patterns.size(); ++q) {
                if (pattern_len[q] < 2) {
                    continue;
                }
                const std::span<const rest::token_id> head(patterns[q].data(), pattern_len[q] - 1);
                for (const auto & s : shards) {
                    const rest::sa_range r  = s.find(head);
                    const auto           t1 = clock_type::now();
                    const rest::sa_range r2 = s.narrow(r, static_cast<std::uint32_t>(head.size()), patterns[q].back());
                    step.push_back(us_since(t1));
                    checksum += r2.size();
                }
            }
            std::printf("lookup pass %d (%s): find_all over every shard, microseconds\n", pass + 1,
                        pass == 0 ? "pages mapped in as touched" : "warm");
            std::printf("  %-10s %8s %9s %9s %9s %9s %9s\n", "pattern", "queries", "mean", "p50", "p90", "p99", "max");
            for (std::size_t i = 0; i < lengths.size(); ++i) {
                const std::string label = std::to_string(lengths[i]) + " tok";
                print_row(label.c_str(), by_len[i]);
            }
            print_row("all", all);
            print_row("1 narrow", step);
        }
        std::printf("(checksum %llu)\n", (unsigned long long) checksum);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
