// The cost table (interpolation, the batch grid, the cache line) and its calibration on fake models whose passes
// take set times.
#include "budget-fixtures.h"

#include <algorithm>
#include <functional>

using namespace rest;
using namespace rest_test;

namespace {

TEST(cost_table, threads_for_takes_the_nearest_measured_size) {
    cost_table c = table_of({1, 2, 4, 8}, {10, 8, 12, 20});
    EXPECT_EQ(c.threads_for(3), 0);  // none measured: the context's own
    c.threads = {2, 1, 1, 2};
    EXPECT_EQ(c.threads_for(1), 2);
    EXPECT_EQ(c.threads_for(2), 1);
    EXPECT_EQ(c.threads_for(3), 1);
    EXPECT_EQ(c.threads_for(7), 2);
    EXPECT_EQ(c.threads_for(100), 2);
}

TEST(cost_table, interpolates_and_extrapolates) {
    EXPECT_DOUBLE_EQ(k_cpu.predict_us(1, 0), 77);
    EXPECT_DOUBLE_EQ(k_cpu.predict_us(3, 0), (109 + 146) / 2.0);
    EXPECT_GT(k_cpu.predict_us(128, 0), k_cpu.predict_us(64, 0));
    const cost_table a = table_of({1, 4}, {10, 20}, 0.5);
    EXPECT_DOUBLE_EQ(a.predict_us(4, 100), 20 + 0.5 * 4 * 100);
}

TEST(cost_table, serializes_and_rejects_garbage) {
    const cost_table back = cost_table::parse(k_cpu.serialize());
    ASSERT_TRUE(back.valid());
    EXPECT_EQ(back.rows, k_cpu.rows);
    EXPECT_TRUE(back.batches.empty());
    for (size_t i = 0; i < back.t_us.size(); ++i) EXPECT_NEAR(back.t_us[i], k_cpu.t_us[i], 1e-6);
    const cost_table small = cost_table::parse("rest-cost 4 0.5 80 2 1 2 10 7 1 2 0");  // t(2) < t(1) is allowed
    ASSERT_TRUE(small.valid());
    EXPECT_EQ(small.threads, (std::vector<std::int32_t>{1, 2}));
    EXPECT_DOUBLE_EQ(small.rebuild_us, 80);
    const cost_table grid = cost_table::parse("rest-cost 4 0 0 1 1 5 0 2 2 2 1 2 9 8 2 1 4 1 1 20 2");
    ASSERT_TRUE(grid.valid());
    ASSERT_EQ(grid.batches.size(), 2u);
    EXPECT_EQ(grid.batches[0].requests, 2);
    EXPECT_EQ(grid.batches[0].per, (std::vector<std::int32_t>{1, 2}));
    EXPECT_EQ(grid.batches[0].threads, (std::vector<std::int32_t>{2, 1}));
    EXPECT_EQ(grid.batches[1].t_us, (std::vector<double>{20}));
    EXPECT_EQ(cost_table::parse(grid.serialize()).serialize(), grid.serialize());
    // Hand-built grids are checked as parsed ones: rows per request from 1, increasing, a time each.
    for (const cost_table::batch_costs & b : std::vector<cost_table::batch_costs>{
             {2, {}, {}, {}}, {2, {2}, {5}, {}}, {2, {1, 2}, {5}, {}}, {2, {1, 1}, {5, 5}, {}}, {1, {1}, {5}, {}}}) {
        cost_table bad = k_cpu;
        bad.batches    = {b};
        EXPECT_FALSE(bad.valid()) << b.requests << " requests, " << b.per.size() << " rows";
    }
    for (const char * bad : {"", "rest-cost 4 0 1 1 5 0", "rest-cost 4 0 0 2 1 2 5 6 1 0", "rest-cost 4 0 0 1 2 5 1 0",
                             "rest-cost 4 -1 0 1 1 5 1 0", "rest-cost 4 0 -1 1 1 5 1 0", "nonsense",
                             "rest-cost 4 0 0 1 1 -3 1 0", "rest-cost 4 0 0 1 1 5 -1 0", "rest-cost 4 0 0 1 1 5 1",
                             "rest-cost 4 0 0 1 1 5 1 0 junk",
                             // batch grids: requests must exceed 1 and grow; rows per request start at 1
                             "rest-cost 4 0 0 1 1 5 1 1 1 1 1 5 1", "rest-cost 4 0 0 1 1 5 1 2 4 1 1 5 1 2 1 1 5 1",
                             "rest-cost 4 0 0 1 1 5 1 1 2 1 2 5 1", "rest-cost 4 0 0 1 1 5 1 1 2 1 1 0 1",
                             "rest-cost 4 0 0 1 1 5 1 1 2 2 1 2 5", "rest-cost 4 0 0 1 1 5 1 1 2 2 1 1 5 5 1 1",
                             "rest-cost 4 0 0 2 1 1 5 5 1 1 0",
                             // older caches (no rebuild cost, no threads, no batch grid): re-measured
                             "rest-cost 1 0 1 1 5", "rest-cost 2 0 0 1 1 5", "rest-cost 3 0 0 1 1 5 1"}) {
        EXPECT_FALSE(cost_table::parse(bad).valid()) << bad;
    }
}

TEST(cost_table, batch_grid_interpolates_over_rows_and_requests) {
    const cost_table c = with_grid();
    // Grid points, and linear between rows per request.
    EXPECT_DOUBLE_EQ(c.predict_batch_us(4, 4, 0), 691);
    EXPECT_DOUBLE_EQ(c.predict_batch_us(4, 8, 0), 569);
    EXPECT_DOUBLE_EQ(c.predict_batch_us(2, 6, 0), (305 + 572) / 2.0);
    // Between request counts, one request being the table itself; beyond the last, proportional to requests.
    EXPECT_DOUBLE_EQ(c.predict_batch_us(3, 6, 0), (305 + 569) / 2.0);
    EXPECT_DOUBLE_EQ(c.predict_batch_us(8, 16, 0), 2 * 569.0);
    EXPECT_DOUBLE_EQ(c.predict_batch_us(1, 4, 0), c.predict_us(4, 0));
    // Past the longest chain measured: as the one-request table grows over total rows.
    EXPECT_DOUBLE_EQ(c.predict_batch_us(4, 24, 0), 1221 * c.predict_us(24, 0) / c.predict_us(16, 0));
    // Without a grid, t(total rows), as before.
    const cost_table plain = table_of({1, 2, 4, 8}, {276, 194, 292, 529});
    EXPECT_DOUBLE_EQ(plain.predict_batch_us(4, 8, 0), plain.predict_us(8, 0));
    // Attention is per row whatever the shape.
    cost_table a = with_grid();
    a.attn_us    = 0.5;
    EXPECT_DOUBLE_EQ(a.predict_batch_us(4, 8, 100), 569 + 0.5 * 8 * 100);
    // Thread counts: the nearest grid point; one request reads the table; no grid, the context's own.
    EXPECT_EQ(c.threads_for(8, 4), 1);
    EXPECT_EQ(c.threads_for(16, 4), 2);
    EXPECT_EQ(c.threads_for(12, 3), 2);  // 3 requests: ties go to 4; 4 rows each: 2 threads
    EXPECT_EQ(c.threads_for(2, 1), 1);
    EXPECT_EQ(c.threads_for(40, 8), 2);
    EXPECT_EQ(plain.threads_for(8, 4), 0);
}

TEST(calibrate_cost, produces_a_valid_table_on_a_fake_model) {
    // (Not necessarily monotone: real t(rows) need not be, and the fake's microsecond timings are noise.)
    rest_test::fake_target m(50, 600, 1, 3);
    calibrate_params p;
    p.n_reps = 1;
    const cost_table t = calibrate_cost(m, 0, p);
    ASSERT_TRUE(t.valid());
    EXPECT_EQ(t.rows, (std::vector<std::int32_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}));
    for (double v : t.t_us) EXPECT_GT(v, 0);
    EXPECT_GE(t.rebuild_us, 0);
    EXPECT_TRUE(cost_table::parse(t.serialize()).valid());
    EXPECT_EQ(m.n_past(0), 0);  // the slot is left clean
}

TEST(calibrate_cost, picks_the_faster_thread_count_per_size) {
    rest_test::fake_target f(50, 600, 1, 3);
    threaded_target        m(f);
    calibrate_params       p;
    p.n_reps = 2;
    const cost_table t = calibrate_cost(m, 0, p);
    ASSERT_TRUE(t.valid());
    for (size_t i = 0; i < t.rows.size(); ++i) {
        // One row keeps the context's count (as plain decoding), though one thread would be faster here.
        const bool one = t.rows[i] > 1 && t.rows[i] <= 8;
        EXPECT_EQ(t.threads[i], one ? 1 : 2) << "rows " << t.rows[i];
        EXPECT_LT(t.t_us[i], one ? 500 : 2500) << "rows " << t.rows[i];
    }
    for (const auto & [rows, threads] : m.seen) {
        if (rows == 1) EXPECT_EQ(threads, 2);
    }
    // One thread lost by 5x at 12 rows: it is not timed again at 16 rows and beyond (a big model pays little).
    for (const auto & [rows, threads] : m.seen) {
        if (rows >= 16) EXPECT_EQ(threads, 2) << rows;
    }
    m.seen.clear();
    m.decode({});
    ASSERT_EQ(m.seen.size(), 1u);
    EXPECT_EQ(m.seen[0].second, 2) << "the calibration leaves the context's own thread count set";
}

TEST(calibrate_cost, measures_the_batch_grid_for_chains_over_several_slots) {
    rest_test::fake_target f(50, 600, 5, 3);
    f.chains_only_ = true;
    threaded_target  m(f);
    calibrate_params p;
    p.n_reps = 2;
    const cost_table t = calibrate_cost(m, 0, p);
    ASSERT_TRUE(t.valid());
    // Request counts 2, 4 (powers of two below the slots) and the slots themselves.
    ASSERT_EQ(t.batches.size(), 3u);
    EXPECT_EQ(t.batches[0].requests, 2);
    EXPECT_EQ(t.batches[1].requests, 4);
    EXPECT_EQ(t.batches[2].requests, 5);
    for (const auto & b : t.batches) {
        ASSERT_FALSE(b.per.empty());
        EXPECT_EQ(b.per.front(), 1);
        EXPECT_EQ(b.threads.front(), 2) << "one row each keeps the context's count, as plain decoding";
        for (size_t i = 0; i < b.per.size(); ++i) {
            // The fake: one thread takes 100 us up to 8 rows per pass and 3000 beyond; two threads 600.
            const bool one = b.per[i] > 1 && b.requests * b.per[i] <= 8;
            EXPECT_EQ(b.threads[i], one ? 1 : 2) << b.requests << " x " << b.per[i];
            EXPECT_LT(b.t_us[i], one ? 500 : 2500) << b.requests << " x " << b.per[i];
        }
    }
    for (std::int32_t s = 0; s < f.n_slots(); ++s) EXPECT_EQ(f.n_past(s), 0) << "slot " << s << " left clean";
    EXPECT_EQ(cost_table::parse(t.serialize()).serialize(), t.serialize());
    ASSERT_EQ(m.seen.size(), m.requests_seen.size());
    int batched = 0;
    for (size_t i = 0; i < m.seen.size(); ++i) {
        if (m.requests_seen[i] > 1 && m.seen[i].first == m.requests_seen[i]) {
            EXPECT_EQ(m.seen[i].second, 2) << "one row each, " << m.requests_seen[i] << " requests";
            ++batched;
        }
    }
    EXPECT_GT(batched, 0);
    m.seen.clear();
    m.decode({});
    ASSERT_EQ(m.seen.size(), 1u);
    EXPECT_EQ(m.seen[0].second, 2) << "the calibration leaves the context's own thread count set";

    // Where a pass costs what its total rows cost (weight-bound models), the grid stops after two rows per request.
    rest_test::fake_target lf(50, 600, 4, 3);
    lf.chains_only_ = true;
    threaded_target  linear(lf, [](int rows, int) { return 100.0 * rows; });
    calibrate_params pl = p;
    pl.n_block          = 6;  // 5 timings per shape: a preempted one cannot pass for the shape's cost
    const cost_table lt = calibrate_cost(linear, 0, pl);
    ASSERT_EQ(lt.batches.size(), 2u);
    for (const auto & b : lt.batches) EXPECT_EQ(b.per, (std::vector<std::int32_t>{1, 2})) << b.requests;
    EXPECT_NEAR(lt.predict_batch_us(4, 24, 0), lt.predict_us(24, 0), 0.2 * lt.predict_us(24, 0));

    // Trees share one pass however many requests there are, and one slot has no batches: no grid.
    rest_test::fake_target trees(50, 600, 4, 3), single(50, 600, 1, 3);
    single.chains_only_ = true;
    p.n_reps            = 1;
    EXPECT_TRUE(calibrate_cost(trees, 0, p).batches.empty());
    EXPECT_TRUE(calibrate_cost(single, 0, p).batches.empty());
}


// warm_up() on a fake model whose passes take set times (microseconds, reported as they are set, so the wall clock
// does not matter). cold: a pass larger than every earlier one pays for the
// memory it touches first; the process's first passes pay for paging in.
struct warm_up_model {
    rest_test::fake_target f{50, 600, 1, 3};
    double                 cold_us = 0;
    int                    n_passes = 0, max_rows = 0;
    threaded_target        m{f, [this](int rows, int) {
        double t = 2000 + 1000 * rows;
        if (n_passes++ < 2) t += 6000 / n_passes;  // 6000, then 3000 more: settled at the fourth pass
        if (rows > max_rows) t += cold_us;
        max_rows = std::max(max_rows, rows);
        return t;
    }};
};

cost_table warm_up_table() {
    cost_table t = table_of({1, 2, 3, 4, 6, 8, 12, 16}, {3000, 4000, 5000, 6000, 8000, 10000, 14000, 18000});
    t.threads    = {2, 1, 1, 1, 1, 2, 2, 2};
    return t;
}

TEST(warm_up, where_a_new_size_runs_cold_one_pass_of_the_largest_likely_size_warms_all) {
    warm_up_model w;
    w.cold_us = 20000;
    const warm_up_result r = warm_up(w.m, 0, warm_up_table(), 13);
    // One row until settled (6000+, 3000+, steady, steady), then 2 rows (cold: 20 ms over its 4 ms), then the largest
    // size up to 13 rows that costs at most 4 one-row passes: 8 rows (10 ms <= 12 ms), on the table's threads.
    const std::vector<std::pair<int, int>> want = {{1, 2}, {1, 2}, {1, 2}, {1, 2}, {2, 1}, {8, 2}};
    EXPECT_EQ(w.m.seen, want);
    EXPECT_EQ(r.rows, 8);
    EXPECT_GT(r.t_us, 0);
    EXPECT_EQ(w.m.n_past(0), 0) << "the slot is left empty";
    w.m.seen.clear();
    w.m.decode({});
    EXPECT_EQ(w.m.seen.at(0).second, 2) << "the context's own thread count is restored";

    // A cap of 5 rows a step: 4 rows, the largest size under it; past 4 one-row passes no size is warmed.
    warm_up_model small;
    small.cold_us = 20000;
    EXPECT_EQ(warm_up(small.m, 0, warm_up_table(), 5).rows, 4);
    cost_table dear = warm_up_table();
    dear.t_us       = {3000, 4000, 50000, 60000, 80000, 100000, 140000, 180000};
    warm_up_model big;
    big.cold_us = 20000;
    EXPECT_EQ(warm_up(big.m, 0, dear, 64).rows, 2);
}

TEST(warm_up, where_first_passes_cost_what_steady_ones_do_it_stops_after_two_rows) {
    warm_up_model w;  // no cold sizes: a big model, where fixed costs are lost in the pass
    const warm_up_result r = warm_up(w.m, 0, warm_up_table(), 64);
    const std::vector<std::pair<int, int>> want = {{1, 2}, {1, 2}, {1, 2}, {1, 2}, {2, 1}};
    EXPECT_EQ(w.m.seen, want);
    EXPECT_EQ(r.rows, 2);
    EXPECT_EQ(w.m.n_past(0), 0);
}

// A pass of 100 us + 5 us a row + per_leaf us for each leaf beyond the first: what llama.cpp's unified KV pool
// charges per sequence, which tree_step_ratio() must see and a table of single-chain passes cannot.
std::function<double(std::span<const tree_request>, int)> leafy_cost(double per_leaf) {
    return [per_leaf](std::span<const tree_request> reqs, int) {
        double us = 100;
        for (const auto & r : reqs) {
            std::vector<bool> parent(r.tokens.size(), false);
            for (std::int32_t p : r.parents) if (p >= 0) parent[(std::size_t) p] = true;
            const auto leaves = std::count(parent.begin(), parent.end(), false);
            us += 5.0 * (1 + (double) r.tokens.size()) + per_leaf * (double) std::max<std::ptrdiff_t>(0, leaves - 1);
        }
        return us;
    };
}

TEST(tree_step_ratio, sees_what_branches_cost_beyond_the_rows) {
    // Rows alone: a 17-row tree costs (100 + 85) / 105 = 1.76 plain steps, whatever its branches.
    rest_test::fake_target f1(50, 600, 1, 3);
    threaded_target        rows_only(f1, leafy_cost(0));
    const double r1 = tree_step_ratio(rows_only, 0, 17, 4);
    EXPECT_GT(r1, 1.6);
    EXPECT_LT(r1, 2.0);  // trees would be kept (k_flat_factor 2)
    EXPECT_EQ(f1.n_past(0), 0);  // the slot is left clean
    // 100 us per extra leaf: its trees of 4 and 2 leaves cost (185 + 300) / 105 and (185 + 100) / 105 plain steps;
    // a tree step is their mean, 3.67 (the cheapest kind alone would say 2.7).
    rest_test::fake_target f2(50, 600, 1, 3);
    threaded_target        branchy(f2, leafy_cost(100));
    const double r2 = tree_step_ratio(branchy, 0, 17, 4);
    EXPECT_GT(r2, 3.3);
    EXPECT_LT(r2, 4.1);
    EXPECT_EQ(f2.n_past(0), 0);
}

TEST(tree_step_ratio, declines_what_it_cannot_measure) {
    rest_test::fake_target chains(50, 600, 1, 3);
    chains.chains_only_ = true;
    EXPECT_LE(tree_step_ratio(chains, 0, 17, 4), 0);  // no trees in this context
    rest_test::fake_target f(50, 600, 1, 3);
    EXPECT_LE(tree_step_ratio(f, 0, 17, 5), 0);   // 16 nodes are not 5 equal branches
    EXPECT_LE(tree_step_ratio(f, 0, 9, 8), 0);    // branches of one node are no tree step
    rest_test::fake_target small(50, 60, 1, 3);
    EXPECT_LE(tree_step_ratio(small, 0, 17, 4), 0);  // too few positions
    rest_test::fake_target few(50, 600, 1, 3);
    few.leaves_max_ = 3;
    EXPECT_LE(tree_step_ratio(few, 0, 17, 4), 0);  // more leaves than sequence ids
    EXPECT_GT(tree_step_ratio(f, 0, 17, 4), 0);
}

TEST(warm_up, plain_decoding_warms_one_row_until_it_settles) {
    warm_up_model w;
    w.cold_us = 20000;
    const warm_up_result r = warm_up(w.m, 0, cost_table{}, 64);
    EXPECT_EQ(w.m.seen, (std::vector<std::pair<int, int>>(4, {1, 2})));
    EXPECT_EQ(r.rows, 1);
    warm_up_model capped;  // a policy that never drafts (max_rows 1): one row only, whatever the table
    EXPECT_EQ(warm_up(capped.m, 0, warm_up_table(), 1).rows, 1);
    EXPECT_EQ(capped.m.seen.size(), 4u);
}

}  // namespace
