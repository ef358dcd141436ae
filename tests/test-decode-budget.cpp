// The cost model and the adaptive budget, with injected cost tables (no clocks): it must pick 0 when drafts are
// worthless, small trees when verification is expensive, and large trees when the cost curve is flat.
#include "fake-model.h"
#include "rest/cost-model.h"

#include <array>
#include <chrono>
#include <functional>

using namespace rest;

namespace {

cost_table table_of(std::vector<std::int32_t> rows, std::vector<double> t, double attn = 0) {
    cost_table c;
    c.rows    = std::move(rows);
    c.t_us    = std::move(t);
    c.attn_us = attn;
    return c;
}

// A chain of n nodes whose scores decay geometrically from p (a drafter's path probabilities).
draft_tree chain(int n, float p, std::uint8_t src = 1) {
    draft_tree t;
    float s = 1;
    for (int i = 0; i < n; ++i) {
        s *= p;
        t.add(100 + i, i - 1, s, src);
    }
    return t;
}

std::int32_t choose_one(adaptive_budget & b, const draft_tree & t, std::int32_t n_past = 10) {
    budget_query q{&t, n_past, (std::int32_t) t.size()};
    std::int32_t n = -1;
    b.choose({&q, 1}, {&n, 1});
    return n;
}

// CPU-like: 8 rows cost ~3x one (stories260K's measured curve, in microseconds).
const cost_table k_cpu = table_of({1, 2, 4, 8, 16, 32, 64}, {77, 109, 146, 238, 463, 1140, 3350});
// GPU-like: flat up to 64.
const cost_table k_gpu = table_of({1, 2, 4, 8, 16, 32, 64}, {1000, 1001, 1002, 1004, 1008, 1016, 1030});

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

// stories260K, chains of 4 requests (measured): a request's second row is nearly free, unlike t(total rows).
cost_table with_grid() {
    cost_table c = table_of({1, 2, 4, 8}, {276, 194, 292, 529});
    c.threads    = {2, 1, 1, 1};
    c.batches    = {{2, {1, 2, 4}, {442, 305, 572}, {2, 1, 1}}, {4, {1, 2, 4}, {691, 569, 1221}, {2, 1, 2}}};
    return c;
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

TEST(adaptive_budget, picks_zero_when_drafts_are_worthless) {
    adaptive_budget b(k_cpu);
    EXPECT_EQ(choose_one(b, chain(16, 0.05f)), 0);
    EXPECT_EQ(choose_one(b, draft_tree{}), 0);
}

TEST(adaptive_budget, small_trees_on_steep_costs_large_on_flat_costs) {
    adaptive_budget cpu(k_cpu), gpu(k_gpu);
    const draft_tree good = chain(64, 0.9f);
    const std::int32_t n_cpu = choose_one(cpu, good);
    const std::int32_t n_gpu = choose_one(gpu, good);
    EXPECT_GT(n_cpu, 0);
    EXPECT_LE(n_cpu, 16);
    EXPECT_GT(n_gpu, 32);
    EXPECT_GT(n_gpu, n_cpu);
}

TEST(adaptive_budget, the_choice_maximises_expected_rate) {
    // Brute force over every prefix length: the greedy joint choice must find the best single-request prefix.
    for (float p : {0.3f, 0.5f, 0.7f, 0.8f, 0.9f, 0.97f}) {
        for (const cost_table * c : {&k_cpu, &k_gpu}) {
            adaptive_budget_params no_explore;
            no_explore.explore_obs = 0;
            adaptive_budget  b(*c, no_explore);
            const draft_tree t = chain(40, p);
            const int        n = choose_one(b, t);
            double           best = 0;
            int              best_n = 0;
            double           e = 1;
            for (int k = 0; k <= 40; ++k) {
                if (k > 0) e += t.scores[k - 1];
                const double rate = e / c->predict_us(1 + k, 10);
                if (rate > best + 1e-12) { best = rate; best_n = k; }
            }
            EXPECT_EQ(n, best_n) << "p " << p;
        }
    }
}

TEST(adaptive_budget, drafting_time_is_paid_once_per_step) {
    // Drafting (40 us) costs the same for any size of step: the choice must maximise e / (t(1 + k) + 40) against
    // plain's 1 / t(1), which favours longer drafts than t alone once drafting pays.
    int longer = 0;
    for (float p : {0.3f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 0.97f}) {
        adaptive_budget_params no_explore;
        no_explore.explore_obs = 0;
        adaptive_budget b(k_cpu, no_explore), bare(k_cpu, no_explore);
        b.observe_step(1, 1, 10, k_cpu.predict_us(1, 10), 40.0);  // as predicted: no time correction
        const draft_tree t = chain(40, p);
        const int        n = choose_one(b, t);
        double           best = 1 / k_cpu.predict_us(1, 10), e = 1;
        int              best_n = 0;
        for (int k = 1; k <= 40; ++k) {
            e += t.scores[k - 1];
            const double rate = e / (k_cpu.predict_us(1 + k, 10) + 40);
            if (rate > best + 1e-12) { best = rate; best_n = k; }
        }
        EXPECT_EQ(n, best_n) << "p " << p;
        // Without drafting time: shorter drafts once drafting pays (below that, drafting's cost can make plain
        // decoding the better choice).
        const int n_bare = choose_one(bare, t);
        if (n > 0) EXPECT_GE(n, n_bare) << "p " << p;
        longer += n > n_bare;
    }
    EXPECT_GT(longer, 0);
}

TEST(adaptive_budget, draft_hint_follows_recent_choices_with_room_to_grow) {
    adaptive_budget_params no_explore;
    no_explore.explore_obs = 0;
    adaptive_budget b(k_cpu, no_explore);
    EXPECT_EQ(b.draft_nodes_hint(), 2);  // nothing chosen yet: 0 + 2
    const draft_tree good = chain(64, 0.95f);
    const std::int32_t n_good = choose_one(b, good);
    ASSERT_GT(n_good, 2);
    EXPECT_EQ(b.draft_nodes_hint(), n_good + 2);
    // Shorter choices do not shrink it until the long one has left the recent window (32 steps).
    const draft_tree poor = chain(8, 0.05f);
    for (int i = 0; i < 31; ++i) choose_one(b, poor);
    EXPECT_EQ(b.draft_nodes_hint(), n_good + 2);
    choose_one(b, poor);
    EXPECT_LT(b.draft_nodes_hint(), n_good + 2);
}

TEST(adaptive_budget, backs_off_costly_drafting_when_it_does_not_pay) {
    adaptive_budget b(k_cpu);
    int drafted_steps = 0;
    for (int step = 0; step < 200; ++step) {
        if (!b.want_draft()) continue;
        ++drafted_steps;
        b.observe_step(1, 1, 10, 77.0, 10.0);  // drafting costs 13% of a plain step
        const draft_tree t = chain(8, 0.05f);
        const std::int32_t n = choose_one(b, t);
        b.observe_acceptance(t, n, {});
    }
    const int backoff_max = adaptive_budget_params{}.backoff_max;
    EXPECT_LT(drafted_steps, 200 / 2) << "costly drafting should back off";
    EXPECT_GT(drafted_steps, 200 / backoff_max - 5) << "but keep probing at least every backoff_max steps";
}

TEST(adaptive_budget, cheap_drafting_never_backs_off_and_explores_rarely) {
    // On a big model drafting is ~0.1% of a step: a paying draft may come at any step, so draft every step; but
    // verifying worthless drafts to explore must stay rare.
    adaptive_budget b(k_cpu);
    int drafted_steps = 0, verified_rows = 0;
    for (int step = 0; step < 1000; ++step) {
        if (!b.want_draft()) continue;
        ++drafted_steps;
        b.observe_step(1, 1, 10, 77.0, 0.1);
        const draft_tree t = chain(8, 0.3f);
        const std::int32_t n = choose_one(b, t);
        verified_rows += n;
        b.observe_acceptance(t, n, {});
    }
    EXPECT_EQ(drafted_steps, 1000);
    EXPECT_LE(verified_rows, 40) << "exploration verified " << verified_rows << " worthless nodes in 1000 steps";
    EXPECT_GT(verified_rows, 0) << "a promising score must be explored";
}

TEST(adaptive_budget, probes_again_after_backing_off) {
    // Regression: steps that skipped drafting (empty trees) must not re-arm the back-off, or drafting never resumes.
    adaptive_budget b(k_cpu);
    int probes = 0;
    for (int step = 0; step < 2000; ++step) {
        const bool drafting = b.want_draft();
        if (drafting) b.observe_step(1, 1, 10, 77.0, 10.0);
        const draft_tree t = drafting ? chain(8, 0.05f) : draft_tree{};
        probes += drafting;
        const std::int32_t n = choose_one(b, t);
        b.observe_acceptance(t, n, {});
    }
    EXPECT_GT(probes, 2000 / (adaptive_budget_params{}.backoff_max + 1))
        << "drafting must keep probing at least every backoff_max steps";
}

TEST(adaptive_budget, calibration_learns_realised_acceptance) {
    adaptive_budget b(k_cpu);
    // The drafter claims 0.9 but nothing from source 2 is ever accepted.
    const draft_tree t = chain(4, 0.9f, 2);
    for (int i = 0; i < 200; ++i) b.observe_acceptance(t, 4, {});
    EXPECT_LT(b.calibrated(0.9f, 2), 0.05);
    EXPECT_NEAR(b.calibrated(0.9f, 1), 0.9, 1e-6);  // other sources untouched
    EXPECT_EQ(choose_one(b, t), 0);
    // And a source whose drafts are always accepted earns more than its claim.
    const draft_tree u = chain(4, 0.3f, 4);
    const std::int32_t path[] = {0, 1, 2, 3};
    for (int i = 0; i < 200; ++i) b.observe_acceptance(u, 4, path);
    EXPECT_GT(b.calibrated(u.scores[0], 4), 0.9);
}

TEST(adaptive_budget, calibration_learned_at_depth_one_applies_at_every_depth) {
    // A drafter that halves its score per level (single-occurrence continuations) while every node is accepted.
    // Verifying only first nodes must teach the policy that deep nodes pay too (conditional calibration).
    adaptive_budget b(k_cpu);
    const draft_tree   t = chain(8, 0.5f);
    const std::int32_t first[] = {0};
    const std::int32_t before = choose_one(b, t);
    for (int i = 0; i < 100; ++i) b.observe_acceptance(t, 1, first);
    const std::int32_t after = choose_one(b, t);
    EXPECT_LE(before, 2);
    EXPECT_GE(after, 6) << "learned p(accept | parent accepted) ~ 1 should make the whole chain worth verifying";
    EXPECT_GT(b.path_probabilities(t)[7], 0.8);
}

TEST(adaptive_budget, online_correction_tracks_measured_time) {
    adaptive_budget b(k_cpu);
    for (int i = 0; i < 400; ++i) b.observe_step(8, 1, 10, 2 * 238.0, 0);
    EXPECT_NEAR(b.predict_us(8, 10), 2 * 238.0, 5.0);
    // A size not observed yet follows the shared correction (the machine got slower overall)...
    EXPECT_NEAR(b.predict_us(1, 10), 2 * 77.0, 2.0);
    // ...until it is measured itself.
    for (int i = 0; i < 400; ++i) b.observe_step(1, 1, 10, 77.0, 0);
    EXPECT_NEAR(b.predict_us(1, 10), 77.0, 2.0);
    EXPECT_NEAR(b.predict_us(8, 10), 2 * 238.0, 5.0);
}

TEST(adaptive_budget, batch_of_requests_shares_one_forward_pass) {
    // Eight busy slots on a CPU curve: the batch already costs a lot, so drafts must be very good to be added.
    adaptive_budget b(k_cpu);
    std::vector<draft_tree>   trees(8, chain(16, 0.5f));
    std::vector<budget_query> qs;
    for (auto & t : trees) qs.push_back({&t, 10, 16});
    std::vector<std::int32_t> n(8, -1);
    b.choose(qs, n);
    int total = 0;
    for (int v : n) total += v;
    adaptive_budget single(k_cpu);
    EXPECT_LE(total, 8 * choose_one(single, trees[0]));
}

// Equal chain lengths for every request (chains in separate sequences): k must maximise the batch's expected rate
// when every request pays for k rows, whichever requests have drafts that long; worthless drafts give 0.
TEST(adaptive_budget, equal_chain_length_maximises_the_batch_rate) {
    const cost_table grid = with_grid();
    for (const cost_table * c : {&k_cpu, &k_gpu, &grid}) {
        for (float p_good : {0.5f, 0.8f, 0.95f}) {
            adaptive_budget_params no_explore;
            no_explore.explore_obs = 0;
            adaptive_budget b(*c, no_explore);
            // One promising request, one poor one, one with a short chain, one without drafts.
            std::vector<draft_tree> trees = {chain(12, p_good), chain(12, 0.2f), chain(3, p_good), draft_tree{}};
            // Caps: room for 12 nodes each. The request without a draft is padded too (the decoder pads every
            // chain of the batch to k, or llama.cpp would split it into one pass per row count), and priced so.
            std::vector<budget_query> qs;
            for (auto & t : trees) qs.push_back({&t, 10, 12});
            const std::int32_t k = b.choose_equal(qs);
            double best = 0, e = 4;
            int    best_k = 0;
            for (int kk = 0; kk <= 12; ++kk) {
                int rows = 0;
                for (size_t i = 0; i < trees.size(); ++i) {
                    if (kk > 0 && kk <= (int) trees[i].size()) e += trees[i].scores[kk - 1];
                    rows += 1 + std::min(kk, qs[i].n_max);
                }
                const double rate = e / c->predict_batch_us(4, rows, 10);
                if (rate > best + 1e-12) { best = rate; best_k = kk; }
            }
            EXPECT_EQ(k, best_k) << "p " << p_good << (c == &k_cpu ? " cpu" : c == &k_gpu ? " gpu" : " grid");
        }
    }
    adaptive_budget worthless(k_cpu);
    std::vector<draft_tree>   trees(4, chain(16, 0.05f));
    std::vector<budget_query> qs;
    for (auto & t : trees) qs.push_back({&t, 10, 16});
    EXPECT_EQ(worthless.choose_equal(qs), 0);
}

// The batch grid decides what equal chains cost: on stories260K a second row per request costs less than the first
// (4 requests: 0.69 ms with one row each, 0.57 with two), though t(8 rows) of one request's chain is 1.8x t(4).
TEST(adaptive_budget, equal_chains_are_priced_from_the_batch_grid) {
    adaptive_budget_params no_explore;
    no_explore.explore_obs = 0;
    cost_table one = with_grid();
    one.batches.clear();
    adaptive_budget with(with_grid(), no_explore), without(one, no_explore);
    std::vector<draft_tree>   trees(4, chain(8, 0.6f));
    std::vector<budget_query> qs;
    for (auto & t : trees) qs.push_back({&t, 10, 8});
    EXPECT_EQ(with.choose_equal(qs), 1);
    EXPECT_EQ(without.choose_equal(qs), 0);
}

TEST(adaptive_budget, batched_passes_correct_their_own_grid_points) {
    adaptive_budget b(with_grid());
    // One request's 8-row passes as predicted, then 4 requests' 8-row passes at twice the grid's time.
    for (int i = 0; i < 400; ++i) b.observe_step(8, 1, 10, 529.0, 0);
    for (int i = 0; i < 400; ++i) b.observe_step(8, 4, 10, 2 * 569.0, 0);
    EXPECT_NEAR(b.predict_us(8, 10, 4), 2 * 569.0, 2 * 569.0 * 0.05);
    EXPECT_NEAR(b.predict_us(8, 10, 1), 529.0, 529.0 * 0.05);
    // A change of request count at the same rows is a change of shape (llama.cpp rebuilds its graph).
    cost_table r = with_grid();
    r.rebuild_us = 100;
    adaptive_budget c(r);
    c.observe_step(8, 4, 10, 569 + 100, 0);
    EXPECT_NEAR(c.step_us(8, 10, 4), 569, 1e-6);
    EXPECT_NEAR(c.step_us(8, 10, 2), r.predict_batch_us(2, 8, 10) + 100, 1e-6);
}

// stories260K on one CPU thread, measured: 2 rows cost less than 1 (ggml's sgemm needs 2+ rows; one row takes
// per-element dot products), and a pass whose size differs from the last one rebuilds llama.cpp's graph.
cost_table tiny_one_thread() {
    cost_table c = table_of({1, 2, 3, 4, 6, 8}, {236, 167, 223, 296, 457, 708});
    c.rebuild_us = 195;
    return c;
}

TEST(adaptive_budget, pads_when_more_rows_cost_less) {
    adaptive_budget  b(tiny_one_thread());
    const draft_tree weak = chain(1, 0.01f);
    std::int32_t     n = -1;
    budget_query     room{&weak, 10, 8};
    b.choose({&room, 1}, {&n, 1});
    EXPECT_EQ(n, 1) << "a 2-row pass is cheaper than a 1-row one, whatever the node is worth";
    budget_query no_room{&weak, 10, 0};
    b.choose({&no_room, 1}, {&n, 1});
    EXPECT_EQ(n, 0);
    // Without a draft the step stays plain (one row, computed exactly as plain decoding computes it).
    const draft_tree none;
    budget_query     empty{&none, 10, 8};
    b.choose({&empty, 1}, {&n, 1});
    EXPECT_EQ(n, 0);
    EXPECT_EQ(fixed_budget(4).choose_equal(std::vector<budget_query>{empty}), 0);
    // Equal rows over two requests: 2 x 2 rows (the table interpolates 4 rows at 296 us) against 2 x 1 (167 us):
    // padding costs more there, so none.
    std::vector<budget_query> two(2, room);
    EXPECT_EQ(b.choose_equal(two), 0);
}

TEST(adaptive_budget, keeps_the_last_shape_when_a_rebuild_costs_more_than_rows) {
    // One node worth 0.6. On steady costs 1 node is best (rate 1.6 / 110); after a 4-row pass, 4 rows again (the
    // node and two of padding: 1.6 / 130) beat rebuilding for 2 rows (1.6 / (110 + 80)).
    cost_table c = table_of({1, 2, 3, 4, 8}, {100, 110, 120, 130, 170});
    c.rebuild_us = 80;
    adaptive_budget_params no_explore;
    no_explore.explore_obs = 0;
    const draft_tree t = chain(1, 0.6f);
    budget_query     q{&t, 10, 8};
    std::int32_t     n = -1;
    adaptive_budget  fresh(c, no_explore);
    fresh.choose({&q, 1}, {&n, 1});
    EXPECT_EQ(n, 1);
    adaptive_budget after4(c, no_explore);
    after4.observe_step(4, 1, 10, 130 + 80, 0);  // as predicted (the first pass is a rebuild): no correction
    after4.choose({&q, 1}, {&n, 1});
    EXPECT_EQ(n, 3);
    EXPECT_NEAR(after4.step_us(4, 10), 130, 1e-9);
    EXPECT_NEAR(after4.step_us(2, 10), 110 + 80, 1e-9);
    after4.observe_other_pass();  // a prompt was processed in between: every shape is a change now
    EXPECT_NEAR(after4.step_us(4, 10), 130 + 80, 1e-9);
}

// Plain greedy decoding, and decoding with drafter d under `policy` (at most n_draft_max nodes) on spec_m (a copy of
// the model, seed 11, possibly chains-only): returns the speculative request after checking that its output is
// plain's.
request run_against_plain(rest_test::fake_target & spec_m, budget_policy & policy, draft_provider & d,
                          std::int32_t n_draft_max, std::int32_t n_predict) {
    rest_test::fake_target      plain_m(40, 400, 1, 11);
    const std::vector<token_id> prompt = {3, 1, 4};
    greedy_sampler              s1, s2;
    request                     plain_r, spec_r;
    plain_r.params.n_predict = spec_r.params.n_predict = n_predict;
    plain_r.sampler = &s1;
    decoder(plain_m, nullptr).run(plain_r, prompt);
    spec_r.params.n_draft_max = n_draft_max;
    spec_r.sampler            = &s2;
    spec_r.draft              = &d;
    decoder(spec_m, &policy).run(spec_r, prompt);
    EXPECT_EQ(spec_r.output, plain_r.output);
    spec_r.sampler = nullptr;
    spec_r.draft   = nullptr;
    return spec_r;
}

// The same with a one-node-chain drafter under a fixed budget of n.
request run_fixed_against_plain(rest_test::fake_target & spec_m, std::int32_t n, std::int32_t n_predict) {
    rest_test::oracle_drafter d(spec_m, 5, 0.7, 0, 1);
    fixed_budget              fixed(n);
    return run_against_plain(spec_m, fixed, d, n, n_predict);
}

TEST(decoder, pads_a_short_chain_to_the_fixed_budget_and_stays_lossless) {
    // A drafter of one-node chains under a fixed budget of 4: every verify pass has 1 + 4 rows, and the output
    // is plain decoding's.
    rest_test::fake_target spec_m(40, 400, 1, 11);
    spec_m.chains_only_ = true;
    const request spec_r = run_fixed_against_plain(spec_m, 4, 120);
    ASSERT_FALSE(spec_m.rows_hist.empty());
    for (int rows : spec_m.rows_hist) EXPECT_EQ(rows, 5);
    EXPECT_LE(spec_r.stats.n_drafted, spec_r.stats.n_steps) << "padding is not counted as drafted";
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

// A fake model with CPU threads whose decode() takes a set time per (rows, threads): one thread is fast for small
// batches and slow for large ones, as ggml behaves on tiny models. It records the thread count of every decode.
class threaded_target final : public target_model {
  public:
    // cost(rows, threads): microseconds a decode takes. Default: one thread is fast up to 8 rows, slow beyond.
    explicit threaded_target(rest_test::fake_target & f, std::function<double(int, int)> cost = nullptr) :
        f_(f), cost_(cost ? std::move(cost) : [](int rows, int threads) {
            return threads == 1 ? (rows <= 8 ? 100.0 : 3000.0) : 600.0;
        }) {}
    std::int32_t n_vocab() const override { return f_.n_vocab(); }
    std::int32_t n_slots() const override { return f_.n_slots(); }
    std::int32_t n_ctx_slot() const override { return f_.n_ctx_slot(); }
    std::int32_t n_leaves_max() const override { return f_.n_leaves_max(); }
    bool trees() const override { return f_.trees(); }
    std::int32_t n_past(std::int32_t slot) const override { return f_.n_past(slot); }
    std::int32_t n_threads() const override { return 2; }
    void set_decode_threads(std::int32_t n) override { threads_ = n > 0 ? n : 2; }
    void prefill(std::int32_t slot, std::span<const token_id> t) override { f_.prefill(slot, t); }
    decode_status decode(std::span<const tree_request> reqs) override {
        int rows = 0;
        for (const auto & r : reqs) rows += 1 + (int) r.tokens.size();
        seen.emplace_back(rows, threads_);
        requests_seen.push_back((int) reqs.size());
        const double us = cost_(rows, threads_);
        const auto   t0 = std::chrono::steady_clock::now();
        while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() < us) {
        }
        return f_.decode(reqs);
    }
    std::span<const float> logits(std::int32_t r, std::int32_t node) const override { return f_.logits(r, node); }
    void commit(std::int32_t r, std::span<const std::int32_t> path) override { f_.commit(r, path); }
    void clear(std::int32_t slot) override { f_.clear(slot); }
    std::int64_t n_forward() const override { return f_.n_forward(); }

    std::vector<std::pair<int, int>> seen;           // (rows, threads) per decode()
    std::vector<int>                 requests_seen;  // requests per decode()

  private:
    rest_test::fake_target &         f_;
    std::function<double(int, int)>  cost_;
    std::int32_t                     threads_ = 2;
};

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

TEST(decoder, padding_stays_within_one_pass) {
    // Padding to a fixed 8 would need 9 rows; the model takes 5 per pass: no padding (real nodes only), lossless.
    rest_test::fake_target spec_m(40, 400, 1, 11);
    spec_m.chains_only_ = true;
    spec_m.max_rows_    = 5;
    run_fixed_against_plain(spec_m, 8, 60);
    ASSERT_FALSE(spec_m.rows_hist.empty());
    for (int rows : spec_m.rows_hist) EXPECT_EQ(rows, 2);
}

TEST(decoder, without_a_policy_runs_on_the_contexts_threads) {
    rest_test::fake_target f(40, 400, 1, 5);
    threaded_target        m(f);
    m.set_decode_threads(1);  // as a policy's last pass may have left it
    greedy_sampler s;
    request        r;
    r.params.n_predict = 10;
    r.sampler          = &s;
    decoder(m, nullptr).run(r, std::vector<token_id>{1, 2, 3});
    ASSERT_FALSE(m.seen.empty());
    for (const auto & [rows, threads] : m.seen) EXPECT_EQ(threads, 2);
}

// One request of n_predict tokens on a chains-only fake model behind threaded_target, drafted by an oracle of
// 8-node chains, under `policy` with at most n_draft_max nodes: returns the (rows, threads) of every decode.
std::vector<std::pair<int, int>> threads_of_one_request(budget_policy & policy, std::int32_t n_predict,
                                                        std::int32_t n_draft_max) {
    rest_test::fake_target f(40, 400, 1, 5);
    f.chains_only_ = true;
    threaded_target           m(f);
    rest_test::oracle_drafter d(f, 9, 0.8, 0, 8);
    greedy_sampler            s;
    request                   r;
    r.params.n_predict   = n_predict;
    r.params.n_draft_max = n_draft_max;
    r.sampler            = &s;
    r.draft              = &d;
    decoder(m, &policy).run(r, std::vector<token_id>{1, 2, 3});
    return m.seen;
}

// Records the budget of every draft() call of the wrapped drafter.
class recording_drafter final : public draft_provider {
  public:
    explicit recording_drafter(draft_provider & d) : d_(d) {}
    void       reset(std::span<const token_id> p) override { d_.reset(p); }
    void       accept(std::span<const token_id> t) override { d_.accept(t); }
    draft_tree draft(int n_budget) override {
        asked.push_back(n_budget);
        return d_.draft(n_budget);
    }
    std::vector<int> asked;

  private:
    draft_provider & d_;
};

// A policy that always says the same hint and verifies whatever the tree gives, up to n.
class hinting_policy final : public budget_policy {
  public:
    explicit hinting_policy(std::int32_t hint) : hint_(hint) {}
    std::int32_t draft_nodes_hint() const override { return hint_; }
    void choose(std::span<const budget_query> qs, std::span<std::int32_t> n_out) override {
        for (size_t i = 0; i < qs.size(); ++i) n_out[i] = qs[i].tree ? (std::int32_t) qs[i].tree->size() : 0;
    }

  private:
    std::int32_t hint_;
};

TEST(decoder, chain_drafting_sizes_its_tree_to_the_policys_hint) {
    // Chains: the tree drafted for a best path is 4x the nodes the policy may verify (the hint, within the
    // request's cap), at most 32; the output stays plain's.
    for (const auto & [hint, cap, want] : std::vector<std::array<int, 3>>{{2, 64, 8}, {5, 64, 20}, {64, 64, 32}, {5, 3, 12}}) {
        rest_test::fake_target spec_m(40, 400, 1, 11);
        spec_m.chains_only_ = true;
        rest_test::oracle_drafter d(spec_m, 5, 0.8, 2, 8);
        recording_drafter         rec(d);
        hinting_policy            policy(hint);
        run_against_plain(spec_m, policy, rec, cap, 40);
        ASSERT_FALSE(rec.asked.empty());
        for (int n : rec.asked) EXPECT_EQ(n, want) << "hint " << hint << ", cap " << cap;
    }
}

TEST(decoder, runs_each_pass_on_the_thread_count_of_its_size) {
    cost_table c = table_of({1, 2, 4, 8}, {300, 100, 150, 250});
    c.threads    = {2, 1, 1, 2};
    adaptive_budget b(c);
    const auto      seen = threads_of_one_request(b, 60, 8);
    ASSERT_FALSE(seen.empty());
    for (const auto & [rows, threads] : seen) EXPECT_EQ(threads, c.threads_for(rows)) << rows;

    // A fixed budget given the table takes the same counts (comparisons between budgets compare the budgets).
    fixed_budget fixed(3, c);
    const auto   seen_fixed = threads_of_one_request(fixed, 40, 3);
    ASSERT_FALSE(seen_fixed.empty());
    int one_thread = 0;
    for (const auto & [rows, threads] : seen_fixed) {
        EXPECT_EQ(threads, c.threads_for(rows)) << rows;
        one_thread += threads == 1;
    }
    EXPECT_GT(one_thread, 0);

}

// Requests on the given slots (caps: each one's n_draft_max), decoded together with a drafter each, passed to the
// decoder in the given order; their outputs must be plain decoding's. Returns (rows, threads) per forward pass.
std::vector<std::pair<int, int>> threads_of_requests(const cost_table & c, std::vector<std::int32_t> slots,
                                                     std::vector<std::int32_t> caps, std::int32_t n_slots) {
    rest_test::fake_target f(40, 400, n_slots, 5);
    f.chains_only_ = true;
    threaded_target m(f);
    adaptive_budget b(c);
    std::vector<std::unique_ptr<rest_test::oracle_drafter>> drafters;
    std::vector<greedy_sampler> samplers(slots.size());
    std::vector<request>        rs(slots.size());
    decoder                     dec(m, &b);
    const std::vector<token_id> prompt = {1, 2, 3};
    std::vector<request *>      all;
    for (size_t i = 0; i < slots.size(); ++i) {
        drafters.push_back(std::make_unique<rest_test::oracle_drafter>(f, 9 + i, 0.8, 0, 8));
        rs[i].slot               = slots[i];
        rs[i].params.n_predict   = 30;
        rs[i].params.n_draft_max = caps[i];
        rs[i].sampler            = &samplers[i];
        rs[i].draft              = drafters[i].get();
        dec.start(rs[i], prompt);
        all.push_back(&rs[i]);
    }
    auto done = [&] { return std::any_of(rs.begin(), rs.end(), [](const request & r) { return r.done(); }); };
    while (!done()) dec.step(all);
    rest_test::fake_target plain_m(40, 400, 1, 5);
    for (const request & r : rs) {
        greedy_sampler s;
        request        p;
        p.params.n_predict = (std::int32_t) r.output.size();
        p.sampler          = &s;
        decoder(plain_m, nullptr).run(p, prompt);
        EXPECT_EQ(r.output, p.output) << "slot " << r.slot;
    }
    return m.seen;
}

// A batched pass takes the grid's thread count only when llama.cpp runs it as the one pass the grid measured:
// equal chains on consecutive slots. Otherwise some of its passes have a single row, which must stay on the
// context's count (a request without drafts computes exactly as plain decoding).
TEST(decoder, batched_passes_take_the_grid_threads_only_as_one_pass) {
    cost_table c = table_of({1, 2, 4, 8}, {300, 100, 150, 250});
    c.threads    = {2, 1, 1, 2};
    cost_table g = c;
    g.batches    = {{2, {1, 2, 4}, {500, 180, 900}, {2, 1, 2}}};
    // Without a grid: the context's count.
    for (const auto & [rows, threads] : threads_of_requests(c, {0, 1}, {8, 8}, 2)) EXPECT_EQ(threads, 2) << rows;
    // Equal chains on slots 1 and 0 (handed over in that order): the grid's counts, one row each on the context's.
    int one_thread = 0;
    for (const auto & [rows, threads] : threads_of_requests(g, {1, 0}, {8, 8}, 2)) {
        EXPECT_EQ(threads, g.threads_for(rows, 2)) << rows;
        if (rows == 2) EXPECT_EQ(threads, 2);
        one_thread += threads == 1;
    }
    EXPECT_GT(one_thread, 0);
    // One request may not draft (its chain stays a root), or the slots are not consecutive: several passes.
    for (const auto & [rows, threads] : threads_of_requests(g, {0, 1}, {8, 0}, 2)) EXPECT_EQ(threads, 2) << rows;
    for (const auto & [rows, threads] : threads_of_requests(g, {0, 2}, {8, 8}, 3)) EXPECT_EQ(threads, 2) << rows;
}

TEST(adaptive_budget, decoder_with_worthless_drafts_stays_near_plain) {
    // Random drafts are never accepted: the policy must stop verifying them, so forward passes ~= tokens.
    rest_test::fake_target m(30, 1000, 1, 9);
    adaptive_budget b(k_cpu);
    rest_test::oracle_drafter d(m, 1, 0.0, 4, 6);  // p_oracle = 0: pure noise
    greedy_sampler s;
    decoder dec(m, &b);
    request r;
    r.params.n_predict = 300;
    r.params.n_draft_max = 32;
    r.sampler = &s;
    r.draft = &d;
    const std::vector<token_id> prompt = {1, 2, 3};
    dec.run(r, prompt);
    EXPECT_EQ((int) r.output.size(), 300);
    EXPECT_LT(r.stats.n_drafted, 60) << "verified " << r.stats.n_drafted << " worthless nodes";
}

}  // namespace
