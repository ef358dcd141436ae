// The automatic budget's per-step choice, with injected cost tables (no clocks): it must pick 0 when drafts are worthless, small trees
// when verification is expensive, and large trees when the cost curve is flat.
#include "budget-fixtures.h"

#include <array>
#include <functional>
#include <cmath>
#include <memory>
#include <random>

using namespace rest;
using namespace rest_test;

namespace {

TEST(online_budget, picks_zero_when_drafts_are_worthless) {
    online_budget b(k_cpu);
    EXPECT_EQ(choose_one(b, chain(16, 0.05f)), 0);
    EXPECT_EQ(choose_one(b, draft_tree{}), 0);
}

TEST(online_budget, small_trees_on_steep_costs_large_on_flat_costs) {
    online_budget cpu(k_cpu), gpu(k_gpu);
    const draft_tree good = chain(64, 0.9f);
    const std::int32_t n_cpu = choose_one(cpu, good);
    const std::int32_t n_gpu = choose_one(gpu, good);
    EXPECT_GT(n_cpu, 0);
    EXPECT_LE(n_cpu, 16);
    EXPECT_GT(n_gpu, 32);
    EXPECT_GT(n_gpu, n_cpu);
}

TEST(online_budget, the_choice_maximises_expected_rate) {
    // Brute force over every prefix length: the greedy joint choice must find the best single-request prefix.
    for (float p : {0.3f, 0.5f, 0.7f, 0.8f, 0.9f, 0.97f}) {
        for (const cost_table * c : {&k_cpu, &k_gpu}) {
            const online_budget_params no_explore = no_exploration();
            online_budget  b(*c, no_explore);
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

TEST(online_budget, drafting_time_is_paid_once_per_step) {
    // Drafting (40 us) costs the same for any size of step: the choice must maximise e - rate * (t(1 + k) + 40)
    // against plain's 1 - rate * t(1), rate being what the steps seen ran at (here 1 token per t(1) + 40), which
    // favours longer drafts than t alone once drafting pays.
    int longer = 0;
    for (float p : {0.3f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 0.97f}) {
        const online_budget_params no_explore = no_exploration();
        online_budget b(k_cpu, no_explore), bare(k_cpu, no_explore);
        for (int i = 0; i < 3; ++i) {  // the first pass and the first draft after it are warm-ups, not counted
            b.observe_step(step_of(1, k_cpu.predict_us(1, 10), 40.0));  // as predicted: no time correction
        }
        const draft_tree t = chain(40, p);
        const int        n = choose_one(b, t);
        const double     rate_seen = 1 / (k_cpu.predict_us(1, 10) + 40);
        double           best = 1 - rate_seen * k_cpu.predict_us(1, 10), e = 1;
        int              best_n = 0;
        for (int k = 1; k <= 40; ++k) {
            e += t.scores[k - 1];
            const double rate = e - rate_seen * (k_cpu.predict_us(1 + k, 10) + 40);
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

TEST(online_budget, draft_hint_follows_recent_choices_with_room_to_grow) {
    const online_budget_params no_explore = no_exploration();
    online_budget b(k_cpu, no_explore);
    EXPECT_EQ(b.draft_nodes_hint(), 1);  // nothing chosen yet: 0 + 1
    const draft_tree good = chain(64, 0.95f);
    // One long choice (a lucky step) does not raise it; one in eight of the recent steps does.
    const std::int32_t n_good = choose_one(b, good);
    ASSERT_GT(n_good, 2);
    EXPECT_EQ(b.draft_nodes_hint(), 1);
    for (int i = 0; i < 3; ++i) choose_one(b, good);
    EXPECT_EQ(b.draft_nodes_hint(), n_good + 1);
    // Shorter choices do not shrink it until fewer than four long ones are left in the recent window (32 steps).
    const draft_tree poor = chain(8, 0.05f);
    for (int i = 0; i < 28; ++i) choose_one(b, poor);
    EXPECT_EQ(b.draft_nodes_hint(), n_good + 1);
    choose_one(b, poor);
    EXPECT_LT(b.draft_nodes_hint(), n_good + 1);
}

// The nodes drafted beyond the recent choices are worth draft_cost_frac of a step as decoding runs, not of a plain
// pass: where a plain pass costs 5x the 2-row passes the policy runs (stories260K on two threads of a Zen 5: 1.5x),
// a plain pass's 2% bought 10 nodes at 2 us each, drafted every step and never verified.
TEST(online_budget, affordable_nodes_are_priced_against_the_steps_that_run) {
    const cost_table dear_plain = table_of({1, 2, 4, 8, 16, 32, 64}, {1000, 200, 260, 380, 620, 1100, 2100});
    online_budget    b(dear_plain, no_exploration());
    for (int i = 0; i < 40; ++i) {
        step_report r = step_of(2, 200, 8, 2, true);
        r.n_asked     = 4;  // 2 us a node
        b.observe_step(r);
    }
    EXPECT_EQ(b.draft_nodes_hint(), 2) << "0.02 x 208 us / 2 us = 2 nodes (a plain pass's 1000 us: 10)";
}

TEST(online_budget, exploration_is_bounded_per_bin) {
    // Drafts whose first node looks promising (0.5) but does not pay on this curve: the policy verifies a first
    // node only while its bin has fewer than explore_obs observations, and never beyond.
    online_budget b(k_cpu);
    const draft_tree t = chain(8, 0.5f);
    int explored = 0;
    for (int step = 0; step < 1000; ++step) {
        const std::int32_t n = choose_one(b, t);
        explored += n > 0;
        b.observe_acceptance(t, n, {});  // never accepted
    }
    EXPECT_GT(explored, 0);
    EXPECT_LE(explored, online_budget_params{}.explore_obs);
}

TEST(online_budget, calibration_learns_realised_acceptance) {
    online_budget b(k_cpu);
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

// Bins that cannot learn (a prior of a million pseudo-observations), so that only optimism() can correct what they
// claim; rows cost 50 us beyond a 100 us plain step.
online_budget frozen_bins_policy() {
    online_budget_params p = no_exploration();
    p.prior_weight         = 1e6;
    return online_budget(table_of({1, 2, 3, 4, 8}, {100, 150, 200, 250, 450}), p);
}

// 100 verified chains t of 3 nodes, every other one accepting its first node only: 0.5 accepted where 2.44 were
// predicted at 0.9 a level.
void verify_one_in_two(online_budget & b, const draft_tree & t) {
    const std::int32_t first[] = {0};
    for (int i = 0; i < 100; ++i) b.observe_acceptance(t, 3, i % 2 ? std::span<const std::int32_t>(first) : std::span<const std::int32_t>());
}

TEST(online_budget, estimates_that_run_high_for_the_verified_nodes_are_scaled_down) {
    // The bins claim 0.9 a level; the chains verified realise one node in two. At the claim three nodes pay, at what
    // the verified nodes realised none do. Only the comparison of predicted with realised can see it.
    online_budget      b = frozen_bins_policy();
    const draft_tree   t = chain(3, 0.9f);
    const std::int32_t first[] = {0};
    ASSERT_EQ(choose_one(b, t), 3);
    verify_one_in_two(b, t);
    EXPECT_NEAR(b.calibrated(0.9f, 1), 0.9, 1e-3) << "the bins did not move";
    EXPECT_NEAR(b.optimism(), 0.5, 0.01) << "0.5 accepted a draft where 2.44 were predicted: at the floor";
    EXPECT_EQ(choose_one(b, t), 0);
    // Drafts accepted as predicted bring it back.
    const std::int32_t all[] = {0, 1, 2};
    for (int i = 0; i < 2000; ++i) b.observe_acceptance(t, 3, i % 5 ? std::span<const std::int32_t>(all) : std::span<const std::int32_t>(first));
    EXPECT_GT(b.optimism(), 0.95);
    EXPECT_EQ(choose_one(b, t), 3);
}

TEST(online_budget, a_correction_that_stops_every_draft_wears_off) {
    // The correction at its floor verifies no node, so no draft could ever bring it back: it must fade with the
    // steps themselves (here after ~1,900 plain steps, where 0.556 makes one node pay again).
    online_budget    b = frozen_bins_policy();
    const draft_tree t = chain(3, 0.9f);
    verify_one_in_two(b, t);
    ASSERT_EQ(choose_one(b, t), 0);
    int step = 0;
    for (; step < 6000 && choose_one(b, t) == 0; ++step) b.observe_step(step_of(1, 100));
    EXPECT_LT(step, 6000) << "still no draft verified";
    EXPECT_GT(step, 1000) << "what the verified drafts showed was forgotten at once";
}

TEST(online_budget, padding_the_walk_accepts_is_not_counted_as_a_drafted_node_realised) {
    // A 1-node draft padded to 3 rows (a steady shape): the walk accepted the pad rows too, which were predicted
    // nothing. Counted, they made the drafts look better than predicted and held the correction at 1.
    online_budget      b = frozen_bins_policy();
    draft_tree         padded = chain(1, 0.9f);
    padded.add(100, 0, 0.0f, 0);  // the decoder's fill: scores 0, no source
    padded.add(100, 1, 0.0f, 0);
    const std::int32_t pads[] = {0, 1, 2};
    for (int i = 0; i < 50; ++i) b.observe_acceptance(padded, 1, {});    // the drafted node rejected ...
    for (int i = 0; i < 70; ++i) b.observe_acceptance(padded, 1, pads);  // ... or accepted with its pads
    EXPECT_NEAR(b.optimism(), (70 + 4) / (120 * 0.9 + 4), 0.01) << "70 accepted where 108 were predicted";
}

TEST(online_budget, an_unrelated_predicted_output_does_not_scale_the_other_sources_down) {
    // A request's prediction that is never accepted is that request's affair (its own bins and classes): the
    // correction for the retrieval sources must not take it as their estimates running high.
    online_budget    b = frozen_bins_policy();
    const draft_tree predicted = chain(3, 0.9f, (std::uint8_t) draft_source::prediction);
    for (int i = 0; i < 100; ++i) b.observe_acceptance(predicted, 3, {});
    EXPECT_DOUBLE_EQ(b.optimism(), 1.0);
    EXPECT_EQ(choose_one(b, chain(3, 0.9f)), 3);
    // Nor does the other sources' correction scale a prediction down.
    const draft_tree retrieved = chain(3, 0.9f);
    verify_one_in_two(b, retrieved);
    ASSERT_NEAR(b.optimism(), 0.5, 1e-9);
    EXPECT_EQ(choose_one(b, retrieved), 0);
    EXPECT_EQ(choose_one(b, predicted), 3);
}

TEST(online_budget, calibration_learned_at_depth_one_applies_at_every_depth) {
    // A drafter that halves its score per level (single-occurrence continuations) while every node is accepted.
    // Verifying only first nodes must teach the policy that deep nodes pay too (conditional calibration).
    online_budget b(k_cpu);
    const draft_tree   t = chain(8, 0.5f);
    const std::int32_t first[] = {0};
    const std::int32_t before = choose_one(b, t);
    for (int i = 0; i < 100; ++i) b.observe_acceptance(t, 1, first);
    const std::int32_t after = choose_one(b, t);
    EXPECT_LE(before, 2);
    EXPECT_GE(after, 6) << "learned p(accept | parent accepted) ~ 1 should make the whole chain worth verifying";
    EXPECT_GT(b.path_probabilities(t)[7], 0.8);
}

TEST(online_budget, online_correction_tracks_measured_time) {
    online_budget b(k_cpu);
    for (int i = 0; i < 400; ++i) b.observe_step(step_of(8, 2 * 238.0));
    EXPECT_NEAR(b.predict_us(8, 10), 2 * 238.0, 5.0);
    // A size not observed yet follows the shared correction (the machine got slower overall)...
    EXPECT_NEAR(b.predict_us(1, 10), 2 * 77.0, 2.0);
    // ...until it is measured itself; plain's own estimate does not fade (the plain checks keep it fresh).
    for (int i = 0; i < 400; ++i) b.observe_step(step_of(1, 77.0));
    EXPECT_NEAR(b.predict_us(1, 10), 77.0, 2.0);
    // Plain passes do not move the shared correction: it is what drafting shapes fade to.
    EXPECT_NEAR(b.predict_us(3, 10), 2 * k_cpu.predict_us(3, 10), 4.0);
    // A drafting size not re-measured fades back to the shared correction, which other drafting passes (4 rows, at
    // their start-up time) bring back to ~1, at forget_steps' scale: one stale reading cannot keep a length
    // switched off for good.
    for (int i = 0; i < 400; ++i) b.observe_step(step_of(4, 146.0));
    const double w = 1.0 - 0.5 * 800.0 / online_budget_params{}.forget_steps;
    EXPECT_NEAR(b.predict_us(8, 10), 238.0 * (1 + w), 238.0 * 0.05);
    for (int i = 0; i < 4000; ++i) b.observe_step(step_of(4, 146.0));
    EXPECT_NEAR(b.predict_us(8, 10), 238.0, 238.0 * 0.02);
}

TEST(online_budget, one_preempted_step_moves_an_estimate_by_little) {
    online_budget b(k_cpu);
    for (int i = 0; i < 100; ++i) b.observe_step(step_of(1, 77.0));
    b.observe_step(step_of(1, 77.0 * 50));  // a 50x outlier
    EXPECT_LT(b.predict_us(1, 10), 77.0 * 1.06);
}

TEST(online_budget, batch_of_requests_shares_one_forward_pass) {
    // Eight busy slots on a CPU curve: the batch already costs a lot, so drafts must be very good to be added.
    online_budget b(k_cpu);
    std::vector<draft_tree>   trees(8, chain(16, 0.5f));
    std::vector<budget_query> qs;
    for (auto & t : trees) qs.push_back({&t, 10, 16});
    std::vector<std::int32_t> n(8, -1);
    b.choose(qs, n);
    int total = 0;
    for (int v : n) total += v;
    online_budget single(k_cpu);
    EXPECT_LE(total, 8 * choose_one(single, trees[0]));
}

// Equal chain lengths for every request (chains in separate sequences): k must maximise the batch's expected rate
// when every request pays for k rows, whichever requests have drafts that long; worthless drafts give 0.
TEST(online_budget, equal_chain_length_maximises_the_batch_rate) {
    const cost_table grid = with_grid();
    for (const cost_table * c : {&k_cpu, &k_gpu, &grid}) {
        for (float p_good : {0.5f, 0.8f, 0.95f}) {
            const online_budget_params no_explore = no_exploration();
            online_budget b(*c, no_explore);
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
    online_budget worthless(k_cpu);
    std::vector<draft_tree>   trees(4, chain(16, 0.05f));
    std::vector<budget_query> qs;
    for (auto & t : trees) qs.push_back({&t, 10, 16});
    EXPECT_EQ(worthless.choose_equal(qs), 0);
}

// The batch grid decides what equal chains cost: on stories260K a second row per request costs less than the first
// (4 requests: 0.69 ms with one row each, 0.57 with two), though t(8 rows) of one request's chain is 1.8x t(4).
TEST(online_budget, equal_chains_are_priced_from_the_batch_grid) {
    const online_budget_params no_explore = no_exploration();
    cost_table one = with_grid();
    one.batches.clear();
    online_budget with(with_grid(), no_explore), without(one, no_explore);
    std::vector<draft_tree>   trees(4, chain(8, 0.6f));
    std::vector<budget_query> qs;
    for (auto & t : trees) qs.push_back({&t, 10, 8});
    EXPECT_EQ(with.choose_equal(qs), 1);
    EXPECT_EQ(without.choose_equal(qs), 0);
}

TEST(online_budget, batched_passes_correct_their_own_grid_points) {
    online_budget b(with_grid());
    // One request's 8-row passes as predicted, and 4 requests' 8-row passes at twice the grid's time, in runs of
    // ten (a pass after one of the other shape measures the rebuild, not the shape).
    for (int i = 0; i < 40; ++i) {
        for (int k = 0; k < 10; ++k) b.observe_step(step_of(8, 529.0));
        for (int k = 0; k < 10; ++k) b.observe_step(step_of(8, 2 * 569.0, 0, 4, false, 4));
    }
    EXPECT_NEAR(b.predict_us(8, 10, 4), 2 * 569.0, 2 * 569.0 * 0.05);
    EXPECT_NEAR(b.predict_us(8, 10, 1), 529.0, 529.0 * 0.05);
    // A change of request count at the same rows is a change of shape (llama.cpp rebuilds its graph).
    cost_table r = with_grid();
    r.rebuild_us = 100;
    online_budget c(r);
    c.observe_step(step_of(8, 569 + 100, 0, 4, false, 4));
    EXPECT_NEAR(c.step_us(8, 10, 4), 569, 1e-6);
    EXPECT_NEAR(c.step_us(8, 10, 2), r.predict_batch_us(2, 8, 10) + 100, 1e-6);
}

TEST(online_budget, pads_when_more_rows_cost_less) {
    online_budget  b(tiny_one_thread());
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

TEST(online_budget, keeps_the_last_shape_when_a_rebuild_costs_more_than_rows) {
    // One node worth 0.6. On steady costs 1 node is best (rate 1.6 / 110); after a 4-row pass, 4 rows again (the
    // node and two of padding: 1.6 / 130) beat rebuilding for 2 rows (1.6 / (110 + 80)).
    cost_table c = table_of({1, 2, 3, 4, 8}, {100, 110, 120, 130, 170});
    c.rebuild_us = 80;
    const online_budget_params no_explore = no_exploration();
    const draft_tree t = chain(1, 0.6f);
    budget_query     q{&t, 10, 8};
    std::int32_t     n = -1;
    online_budget  fresh(c, no_explore);
    fresh.choose({&q, 1}, {&n, 1});
    EXPECT_EQ(n, 1);
    online_budget after4(c, no_explore);
    after4.observe_step(step_of(4, 130 + 80));  // as predicted (the first pass is a rebuild): no correction
    after4.choose({&q, 1}, {&n, 1});
    EXPECT_EQ(n, 3);
    EXPECT_NEAR(after4.step_us(4, 10), 130, 1e-9);
    EXPECT_NEAR(after4.step_us(2, 10), 110 + 80, 1e-9);
    after4.observe_other_pass();  // a prompt was processed in between: every shape is a change now
    // One request is charged the change alone (its shapes' learned values price what follows).
    EXPECT_NEAR(after4.step_us(4, 10), 130 + 80, 1e-9);
    EXPECT_NEAR(after4.step_us(1, 10), 100 + 80, 1e-9);
}

TEST(online_budget, a_change_of_regime_is_charged_on_leaving_the_one_that_prevails) {
    // Two requests' equal chains: plain passes (2 rows) and drafting ones, a change of shape 80 us each way. Until
    // drafting is shown to pay, a step into drafting is charged both ways and a step back to plain nothing:
    // otherwise a step after a drafting pass prices plain 80 us dearer and keeps drafting at a loss.
    cost_table c = table_of({1, 2, 3, 4, 8}, {100, 110, 120, 130, 170});
    c.rebuild_us = 80;
    online_budget b(c, no_exploration());
    b.want_draft(2, false);  // the class of two-request batches
    b.observe_step(step_of(2, 110 + 80, 0, 2, false, 2));  // a first pass is a change of shape too
    EXPECT_NEAR(b.step_us(4, 10, 2), 130 + 2 * 80, 1e-6) << "into drafting: there and back";
    b.observe_step(step_of(4, 130 + 80, 0, 2, true, 2));
    EXPECT_NEAR(b.step_us(2, 10, 2), 110, 1e-6) << "back to plain: paid on the way in";
    EXPECT_NEAR(b.step_us(6, 10, 2), 150 + 80, 1e-6) << "between drafting shapes: the change itself";
    EXPECT_FALSE(b.drafting_pays());
    // Drafting steps that each emit 6 tokens in 130 us, where plain decoding takes 110 for 2: drafting pays, and
    // the charges turn round.
    for (int k = 0; k < 40; ++k) b.observe_step(step_of(4, 130, 0, 6, true, 2));
    ASSERT_TRUE(b.drafting_pays());
    EXPECT_NEAR(b.step_us(2, 10, 2), 110 + 2 * 80, 110 * 0.05) << "out of drafting: there and back";
    b.observe_step(step_of(2, 110 + 80, 0, 2, false, 2));
    EXPECT_NEAR(b.step_us(4, 10, 2), 130, 130 * 0.05) << "back into drafting: paid on the way out";
}

TEST(online_budget, exploration_costs_at_most_its_share_of_the_time) {
    // A second row costs 0.9 of a plain step (a 1.1B Q4_0 model on a CPU) and the drafter's first nodes, of scores
    // spread over every bin, are never right: exploring each thin bin 16 times would verify ~100 rows at a loss. The
    // rows explored must cost at most 4 plain steps plus 1% of the time decoding took, and some are still explored.
    const cost_table c = table_of({1, 2, 4, 8}, {100, 190, 370, 730});
    online_budget    b(c);
    std::mt19937     rng(5);
    std::uniform_real_distribution<float> score(0.26f, 0.6f);  // the prior never says one pays
    int    explored = 0;
    double t_total  = 0;
    for (int step = 0; step < 1000; ++step) {
        const draft_tree t = chain(1, score(rng));
        const int        n = choose_one(b, t);
        const double     us = n > 0 ? 190 : 100;
        if (n > 0) {
            ++explored;
            b.observe_acceptance(t, 1, {});
        }
        b.observe_step(step_of(1 + n, us, 0, 1, n > 0));
        t_total += us;
    }
    EXPECT_GT(explored, 0);
    EXPECT_LE(explored, (4 * 100 + 0.01 * t_total) / 90 + 1) << "rows explored at a loss";
}

// One request's steps on a fake whose passes take the table's time plus 40 us after a change of shape, with drafts
// from make_draft(step) accepted node by node with their scores' probabilities: the rows of every pass.
std::vector<std::int32_t> run_single(online_budget & b, const cost_table & c, int n_steps,
                                     const std::function<draft_tree(int)> & make_draft, std::int32_t first_rows) {
    std::mt19937                           rng(11);
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<std::int32_t>              rows_of;
    std::int32_t                           last = first_rows;
    b.observe_step(step_of(first_rows, c.predict_us(first_rows, 10) + 40));
    for (int step = 0; step < n_steps; ++step) {
        const draft_tree t = make_draft(step);
        const int        n = choose_one(b, t);
        std::vector<std::int32_t> path;
        for (int i = 0; i < std::min<int>(n, (int) t.size()); ++i) {
            const double parent = t.parents[i] < 0 ? 1.0 : t.scores[t.parents[i]];
            if (u(rng) >= t.scores[i] / parent) break;
            path.push_back(i);
        }
        b.observe_acceptance(t, n, path);
        const std::int32_t rows = 1 + n;
        b.observe_step(step_of(rows, c.predict_us(rows, 10) + (rows != last ? 40 : 0), 0, 1 + (std::int64_t) path.size(), n > 0));
        rows_of.push_back(rows);
        last = rows;
    }
    return rows_of;
}

// A first node right 74% of the time and a second right `second` of the time after it.
draft_tree two_nodes(float second) {
    draft_tree t;
    t.add(100, -1, 0.74f, 1);
    t.add(101, 0, 0.74f * second, 1);
    return t;
}

draft_tree two_sure_nodes(int) { return two_nodes(0.84f); }

TEST(online_budget, a_shape_that_pays_over_the_steps_after_it_is_worth_its_change) {
    // The demo model at one thread on a Zen 5 (measured): 2 rows 121 us, 3 rows 155, a change of shape +40; drafts
    // whose first node is right 74% of the time and second 84% after it. Held every step, 3 rows give 2.36 tokens
    // per 155 us, 6% more than 2 rows' 1.74 per 121; but from 2 rows no single step pays the change (2.36 tokens in
    // 195 us). After 20 steps with a single node, the policy must move to 3 rows and stay.
    cost_table c = table_of({1, 2, 3, 4, 8}, {160, 121, 155, 186, 353});
    c.rebuild_us = 40;
    online_budget b(c, no_exploration());
    const auto rows = run_single(b, c, 220, [](int step) {
        return step < 20 ? chain(1, 0.74f) : two_sure_nodes(step);
    }, 2);
    int at3 = 0;
    for (std::size_t i = 120; i < rows.size(); ++i) at3 += rows[i] == 3;
    EXPECT_GE(at3, 95) << "steps of 3 rows among the last 100";
}

TEST(online_budget, a_warm_start_goes_to_the_shape_the_last_run_learned_at_once) {
    // As above, with a second node right 95% of the time: a run that learned 3 rows is worth the change from 2; a
    // process started from its state (a one-shot `rest generate`) moves there at its first choice, where a cold
    // one stays at 2 rows.
    cost_table c = table_of({1, 2, 3, 4, 8}, {160, 121, 155, 186, 353});
    c.rebuild_us = 40;
    online_budget first(c, no_exploration());
    run_single(first, c, 220, [](int step) { return step < 20 ? chain(1, 0.74f) : two_nodes(0.95f); }, 2);
    const budget_state learned = first.export_state();
    ASSERT_GT(learned.shape_values.size(), 3u);
    online_budget warm(c, no_exploration(), &learned), cold(c, no_exploration());
    for (online_budget * b : {&warm, &cold}) {
        for (int k = 0; k < 3; ++k) b->observe_step(step_of(2, 121, 0, 2, true));  // a rate measured at 2 rows
    }
    EXPECT_EQ(choose_one(warm, two_nodes(0.95f)), 2);
    EXPECT_EQ(choose_one(cold, two_nodes(0.95f)), 1);
}

TEST(online_budget, one_slow_pass_does_not_price_every_shape_on_its_threads) {
    // A process's first passes are slow while the model's pages come in (a 1.1B Q8_0 model's 2-row tree pass: 104
    // ms, then 62 steady). One such pass must not make every shape never measured on those threads look twice as
    // dear (then no longer tree was ever verified, and none was measured); many of them must.
    const cost_table c = table_of({1, 2, 4, 8, 16}, {100, 110, 120, 130, 170});
    online_budget_params p = no_exploration();
    p.warm_up_steps        = 1;  // the slow pass below is past a warm-up: what this guards is the damping
    online_budget    b(c, p);
    auto pass = [&](std::int32_t rows, double us) {
        step_report r       = step_of(rows, us, 0, 1, rows > 1);
        r.n_threads         = 2;
        r.n_threads_context = 2;
        b.observe_step(r);
    };
    pass(1, 100);  // a process's first pass is not learned from
    pass(1, 100);
    pass(2, 3 * 110);
    EXPECT_LT(b.predict_us(8, 10), 1.5 * 130) << "one slow pass";
    for (int k = 0; k < 30; ++k) pass(2, 3 * 110);
    EXPECT_GT(b.predict_us(8, 10), 2.5 * 130) << "passes on these threads are slow";
}

TEST(online_budget, plain_steps_win_where_a_drafting_shape_loses_over_the_steps_after_it) {
    // stories260K at one thread on a Zen 5: a second row costs 88 us over a plain pass's 113, a change 40. A node
    // right half the time: from a 2-row pass, staying (1.5 tokens in 201 us) beats one plain step after a change
    // (1 in 153), but plain held (1 per 113) beats both. The policy must end up plain.
    cost_table c = table_of({1, 2, 3, 4}, {113, 201, 289, 377});
    c.rebuild_us = 40;
    online_budget b(c, no_exploration());
    const auto rows = run_single(b, c, 150, [](int) { return chain(1, 0.5f); }, 2);
    int plain = 0;
    for (std::size_t i = 100; i < rows.size(); ++i) plain += rows[i] == 1;
    EXPECT_GE(plain, 48) << "plain steps among the last 50";
}

TEST(online_budget, a_change_of_thread_count_is_learned_apart_and_charged_where_it_happens) {
    // Plain passes on the context's 2 threads, 2-row passes on 1 (the table's fastest), as on the Zen 5 CPU.
    // Switching to 1 thread was measured to add 400 us, back to 2 threads 600: each is learned apart.
    cost_table c = table_of({1, 2, 3, 4, 8}, {300, 200, 290, 380, 750});
    c.threads    = {2, 1, 1, 1, 1};
    c.rebuild_us = 50;
    online_budget_params p = no_exploration();
    p.slow_ema             = 0;  // no thread count's slowdown from the changes below
    p.warm_up_steps        = 1;  // no warm-up: the passes below are the steady ones
    online_budget b(c, p);
    auto pass = [&](std::int32_t rows, std::int32_t threads, double us) {
        step_report r = step_of(rows, us);
        r.n_threads = threads;
        r.n_threads_context = 2;
        b.observe_step(r);
    };
    pass(1, 2, 300 + 50);  // a first pass is a change
    pass(2, 1, 200 + 400);
    for (int k = 0; k < 3; ++k) pass(2, 1, 200);  // steady: the estimates are medians of the last passes
    pass(1, 2, 300 + 600);
    for (int k = 0; k < 3; ++k) pass(1, 2, 300);
    for (int k = 0; k < 3; ++k) {
        pass(2, 1, 200 + 400);
        pass(1, 2, 300 + 600);
    }
    // One request's steps are charged each switch where it happens (its shapes' learned values price the round
    // trip: a_shape_that_pays_over_the_steps_after_it_is_worth_its_change).
    EXPECT_NEAR(b.step_us(2, 10), 200 + 400, 600 * 0.03) << "into drafting: the switch to 1 thread";
    pass(2, 1, 200 + 400);
    EXPECT_NEAR(b.step_us(1, 10), 300 + 600, 900 * 0.03) << "out of drafting: the switch to 2 threads";
}

TEST(online_budget, equal_chains_prevail_where_padding_every_request_costs_less_than_plain) {
    // stories260K's measured grid at -t 2: two requests' plain pass 442 us, both padded to a node 305 us. Drafting
    // prevails for equal chains (choose_equal()'s shape) before any drafting is measured.
    online_budget b(with_grid(), no_exploration());
    b.observe_step(step_of(2, 442, 0, 2, false, 2));
    EXPECT_TRUE(b.drafting_prevails(10, 2));
    cost_table dear = with_grid();
    dear.batches[0].t_us = {442, 600, 900};  // padding dearer than plain
    online_budget d(dear, no_exploration());
    d.observe_step(step_of(2, 442, 0, 2, false, 2));
    EXPECT_FALSE(d.drafting_prevails(10, 2));
}

TEST(online_budget, a_plain_pass_of_more_requests_is_not_a_drafting_one) {
    // Two requests' plain pass (2 rows), then one request is left: its plain step is a change of shape like any
    // other, as is a drafting step.
    cost_table c = table_of({1, 2, 3, 4, 8}, {100, 110, 120, 130, 170});
    c.rebuild_us = 80;
    online_budget b(c, no_exploration());
    b.observe_step(step_of(2, 200 + 80, 0, 2, false, 2));
    const draft_tree weak = chain(1, 0.01f);
    budget_query     q{&weak, 10, 8};
    std::int32_t     n = -1;
    b.choose({&q, 1}, {&n, 1});  // prices a batch of one request
    EXPECT_EQ(n, 0);
    EXPECT_NEAR(b.step_us(1, 10), 100 + 80, 1e-6);
    EXPECT_NEAR(b.step_us(2, 10), 110 + 80, 1e-6);
}

TEST(online_budget, the_cost_of_a_change_of_shape_is_learned) {
    // The table says a change of shape costs 20 us; the passes that changed shape took 100 us more than their
    // shape's steady time: the choice must price changes at 100 from then on.
    cost_table c = table_of({1, 2, 3, 4, 8}, {100, 110, 120, 130, 170});
    c.rebuild_us = 20;
    online_budget b(c, no_exploration());
    EXPECT_NEAR(b.step_us(2, 10), 110 + 20, 1e-9);  // a first pass is a change
    // The process's warm-up passes (they set no estimate), steady runs of each shape as the table says, then
    // alternating shapes (every pass a change).
    for (int k = 0; k < online_budget_params{}.warm_up_steps; ++k) b.observe_step(step_of(4, 300));
    for (int k = 0; k < 6; ++k) b.observe_step(step_of(4, 130));
    for (int k = 0; k < 6; ++k) b.observe_step(step_of(2, k == 0 ? 110 + 100 : 110));
    for (int i = 0; i < 5; ++i) {
        b.observe_step(step_of(4, 130 + 100));  // after a 2-row pass
        b.observe_step(step_of(2, 110 + 100));  // after a 4-row pass
    }
    // (Within 2%: the shared ratio and the estimates' ages move the steady parts a little.)
    EXPECT_NEAR(b.step_us(2, 10), 110, 110 * 0.02) << "the last pass had 2 rows: another is steady";
    EXPECT_NEAR(b.step_us(3, 10), 120 + 100, 220 * 0.02) << "a change costs what changes took, not the table's 20";
    EXPECT_NEAR(b.step_us(4, 10), 130 + 100, 230 * 0.02);
}

TEST(online_budget, the_pass_after_a_prompt_is_not_a_sample_of_a_change_of_shape) {
    // Requests one after another (a bench, a server): each request's first step follows its prompt's pass and pays
    // for what the prompt did to the caches, 300 us here, where a change of shape costs 50. On the demo model such
    // passes set the change's estimate to 250-310 us against ~45 measured, and held chains at the shape they had.
    cost_table c = table_of({1, 2, 3, 4, 8}, {100, 110, 120, 130, 170});
    c.rebuild_us = 50;
    online_budget b(c, no_exploration());
    for (int k = 0; k < online_budget_params{}.warm_up_steps; ++k) b.observe_step(step_of(4, 300));
    for (int k = 0; k < 6; ++k) b.observe_step(step_of(4, 130));
    for (int k = 0; k < 6; ++k) b.observe_step(step_of(2, k == 0 ? 110 + 50 : 110));
    for (int k = 0; k < 3; ++k) {  // three changes each way, as the table says
        b.observe_step(step_of(4, 130 + 50));
        b.observe_step(step_of(2, 110 + 50));
    }
    for (int request = 0; request < 10; ++request) {  // then requests that keep to one shape
        b.observe_other_pass();                 // the next request's prompt
        b.observe_step(step_of(2, 110 + 300));  // its first step
        for (int k = 0; k < 20; ++k) b.observe_step(step_of(2, 110));
    }
    EXPECT_NEAR(b.step_us(2, 10), 110, 110 * 0.02) << "the last pass had 2 rows: another is steady";
    EXPECT_NEAR(b.step_us(4, 10), 130 + 50, 180 * 0.03) << "a change costs what changes took, not a prompt's aftermath";
    EXPECT_NEAR(b.predict_us(2, 10), 110, 110 * 0.03) << "nor is that pass a steady one of its shape";
}

TEST(online_budget, a_process_warm_up_sets_no_estimate_and_only_shapes_measured_enough_persist) {
    // A fresh process's first passes are slow (the demo model's 3-row pass: 297 us, then 254, 229, ... 158). Taken
    // as estimates and persisted, they made every later one-shot process price plain and short passes dear.
    cost_table           c = table_of({1, 2, 4, 8}, {100, 110, 130, 170});
    online_budget_params p = no_exploration();
    p.warm_up_steps        = 6;
    online_budget b(c, p);
    for (int k = 0; k < 6; ++k) b.observe_step(step_of(1, 300));  // warm-up: 3x the table
    b.observe_step(step_of(1, 100));
    EXPECT_NEAR(b.step_us(1, 10), 100, 1) << "the 1-row estimate must leave the warm-up passes out";
    for (int k = 0; k < 4; ++k) b.observe_step(step_of(1, 100));
    b.observe_step(step_of(2, 110 * 2));  // one 2-row pass, 2x the table (a change of shape after 1-row ones)
    b.observe_step(step_of(4, 130 * 2));  // 4 rows: the process's first (cold, see cold_us()) ...
    b.observe_step(step_of(4, 130 * 2));
    b.observe_step(step_of(4, 130 * 2));  // ... and two passes
    for (int k = 0; k < 4; ++k) b.observe_step(step_of(8, 170));  // 8 rows: three after the process's first (cold)
    for (int k = 0; k < 3; ++k) b.observe_step(step_of(1, 100));
    const budget_state st = b.export_state();
    bool has1 = false, has2 = false, has4 = false, has8 = false;
    for (const auto & [rows, ratio] : st.cost_ratio) {
        has1 |= rows == 1;
        has2 |= rows == 2;
        has4 |= rows == 4;
        has8 |= rows == 8;
        if (rows == 1) EXPECT_NEAR(ratio, 1.0, 0.01) << "the warm-up is not in the persisted 1-row ratio";
    }
    EXPECT_TRUE(has1) << "8 steady 1-row passes";
    EXPECT_FALSE(has2) << "a first pass is not an estimate to persist";
    EXPECT_FALSE(has4) << "nor two";
    EXPECT_TRUE(has8) << "three are";

    // A short process does not erase what a warm start said about a shape it measured less than that.
    budget_state warm;
    warm.cost_ratio = {{4, 1.7}};
    online_budget short_run(c, p, &warm);
    for (int k = 0; k < 6; ++k) short_run.observe_step(step_of(1, 300));
    short_run.observe_step(step_of(4, 130));
    bool kept = false;
    for (const auto & [rows, ratio] : short_run.export_state().cost_ratio) {
        if (rows == 4) kept = std::abs(ratio - 1.7) < 1e-9;
    }
    EXPECT_TRUE(kept) << "the warm 4-row ratio is persisted again";
}

TEST(online_budget, decoder_with_worthless_drafts_stays_near_plain) {
    // Random drafts are never accepted: the policy must stop verifying them, so forward passes ~= tokens.
    // The fake's passes take k_cpu's time (the policy measures them; a free fake pass would make drafts free).
    rest_test::fake_target f(30, 1000, 1, 9);
    threaded_target m(f, [](int rows, int) { return k_cpu.predict_us(rows, 0); });
    online_budget b(k_cpu);
    rest_test::oracle_drafter d(f, 1, 0.0, 4, 6);  // p_oracle = 0: pure noise
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

// The tree layout: a pass's shape is its rows and its sequences (leaves). A change of leaves at equal rows is a
// change of shape, and each leaf beyond one per request costs what branchy passes measured beyond a chain.
TEST(online_budget, tree_leaves_are_part_of_the_shape_and_priced_from_measured_passes) {
    cost_table c = table_of({1, 2, 3, 4, 8}, {100, 110, 120, 130, 170});
    c.rebuild_us = 50;
    online_budget b(c, no_exploration());
    auto pass = [](std::int32_t rows, std::int32_t seqs, double t) {
        step_report r = step_of(rows, t);
        r.n_seqs      = seqs;
        return r;
    };
    for (int k = 0; k < 6; ++k) b.observe_step(pass(3, 1, k == 0 ? 120 + 50 : 120));  // a 2-node chain, steady
    EXPECT_NEAR(b.step_us(3, 10, 1, 1), 120, 120 * 0.02) << "the same chain again: steady";
    EXPECT_NEAR(b.step_us(3, 10, 1, 2), 120 + 50, 170 * 0.02) << "two siblings: another graph";
    // Branchy passes took 300 us beyond a chain of their rows per extra leaf.
    for (int k = 0; k < 5; ++k) b.observe_step(pass(3, 2, 120 + (k == 0 ? 50 : 0) + 300));
    EXPECT_NEAR(b.step_us(3, 10, 1, 2), 120 + 300, 420 * 0.03) << "an extra leaf costs what it was measured to";
    EXPECT_NEAR(b.step_us(4, 10, 1, 3), 130 + 2 * 300 + 50, 780 * 0.03);
    EXPECT_NEAR(b.step_us(3, 10, 1, 1), 120 + 50, 170 * 0.03) << "the chain's own estimate is not polluted";

    // The choice: two sibling nodes of 0.5 each against one of them, after chains of 2 rows. Priced as a chain the
    // pair pays (2 / 120 > 1.5 / 110); with the measured leaf cost it does not.
    draft_tree siblings;
    siblings.add(100, -1, 0.5f, 1);
    siblings.add(101, -1, 0.5f, 1);
    b.observe_step(pass(2, 1, 110));
    EXPECT_EQ(choose_one(b, siblings), 1);
}
