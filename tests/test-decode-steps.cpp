// The decoder's steps under budget policies: padding, pass sizes, the thread count of every pass, chain drafting
// sized to the policy's hint, batched passes; every output stays plain decoding's.
#include "budget-fixtures.h"

#include <algorithm>
#include <array>
#include <memory>

using namespace rest;
using namespace rest_test;

namespace {

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
    online_budget b(c);
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
    online_budget b(c);
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

}  // namespace
