// Chunked prefill and the prompt cache (issue 19), without llama.cpp:
// - the pacer sizes prompt chunks from measured step costs so that a step carrying a chunk takes about twice a step
//   without, follows a change of cost, and keeps measuring the plain step;
// - through slot_batch, a long prompt arrives in chunks while another request keeps generating one step at a time,
//   and both outputs are plain decoding's;
// - a request that starts with tokens its slot's memory holds (decoder::begin's n_cached) reuses them, and its
//   output is the one it gets without the cache.
#include "fake-model.h"
#include "rest/prefill-pacer.h"
#include "rest/slot-batch.h"

#include <algorithm>
#include <random>

using namespace rest;

namespace {

// A simulated machine: a step costs `plain` plus, with a chunk, `fixed` (a pass of its own, as in the chain layout)
// and `row` per prompt token, with +-5% noise and, one step in 50, a stall of 3x (another process, a page fault).
struct sim_cost {
    double       plain, row, fixed = 0;
    std::mt19937 rng{3};
    double operator()(std::int32_t n) {
        const double t = (plain + (n > 0 ? fixed + row * n : 0)) * std::uniform_real_distribution<double>(0.95, 1.05)(rng);
        return rng() % 50 == 0 ? 3 * t : t;
    }
};

struct paced_run {
    std::vector<double> ratios;  // each step's time / the plain step's
    int                 steps = 0;
};

paced_run pace_prompt(prefill_pacer & p, sim_cost & cost, int n_prompt) {
    paced_run run;
    for (int left = n_prompt; left > 0; ++run.steps) {
        const std::int32_t n = std::min(p.next(), left);
        const double       t = cost(n);
        p.observe(t, n);
        left -= n;
        run.ratios.push_back(t / cost.plain);
    }
    return run;
}

double quantile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[(size_t) (q * (double) (v.size() - 1))];
}

TEST(prefill_pacer, chunks_keep_a_step_within_the_gap_ratio_of_a_plain_one) {
    const double ratio = prefill_pacer_params{}.gap_ratio;
    // (plain step, cost per prompt row, fixed cost of a chunk's own pass): a 1B model on 2 cores, a small model, a
    // tiny one, rows dearer than the margin, and a chain layout's own pass.
    // The last starts at one token: a pacer that priced the pass's fixed cost as rows would stay there (measured on
    // the TinyLlama-shaped fixture: 1,500 tokens took 476 s to reach the first token that way).
    for (const auto [plain, row, fixed, first] :
         {std::tuple{100e3, 25e3, 0.0, 4}, {100e3, 2e3, 0.0, 4}, {200.0, 12.0, 0.0, 4}, {150e3, 90e3, 0.0, 4},
          {126e3, 25e3, 100e3, 4}, {126e3, 10e3, 100e3, 1}}) {
        prefill_pacer_params pp;
        pp.first_chunk = first;
        prefill_pacer p(512, pp);
        sim_cost      cost{plain, row, fixed};
        for (int i = 0; i < 5; ++i) p.observe(cost(0), 0);  // the other stream's steps before the prompt
        const paced_run run = pace_prompt(p, cost, 1500);
        const double    q95 = quantile(run.ratios, 0.95);
        std::printf("plain %.0f us, row %.0f us, fixed %.0f us: %d steps for 1,500 prompt tokens, p95 step %.2fx "
                    "plain\n", plain, row, fixed, run.steps, q95);
        // (p95: the simulated stalls are 2% of the steps.)
        EXPECT_LE(q95, 3.0) << "plain " << plain << " row " << row;
        // Progress: chunks as large as the ratio allows (at least one token a step): no more steps than 1.3x the
        // ideal, plus the slow start and the probes.
        const double ideal = 1500.0 / std::clamp(std::floor(((ratio - 1) * plain - fixed) / row), 1.0, 512.0);
        EXPECT_LE(run.steps, 1.3 * ideal * (1.0 + 1.0 / 16) + 12) << "plain " << plain << " row " << row;
    }
}

TEST(prefill_pacer, follows_a_change_of_cost_and_keeps_probing) {
    prefill_pacer p(512);
    sim_cost      cost{100e3, 5e3};
    for (int i = 0; i < 3; ++i) p.observe(cost(0), 0);
    pace_prompt(p, cost, 600);
    p.observe(cost(0), 0);  // (so that the next chunk is not a probe)
    EXPECT_NEAR(p.next(), 30, 4);
    cost.row = 50e3;  // the machine got busy: rows cost 10x
    const paced_run run = pace_prompt(p, cost, 400);
    p.observe(cost(0), 0);
    EXPECT_LE(p.next(), 4);
    // Within a few steps of the change the steps are back under 3x.
    std::vector<double> late(run.ratios.begin() + 6, run.ratios.end());
    EXPECT_LE(quantile(late, 0.95), 3.0);
    // Steps without prompt rows keep coming: never more than probe_every chunked steps in a row.
    int run_len = 0, longest = 0;
    for (int i = 0; i < 200; ++i) {
        const std::int32_t n = p.next();
        run_len              = n > 0 ? run_len + 1 : 0;
        longest              = std::max(longest, run_len);
        p.observe(cost(n), n);
    }
    EXPECT_LE(longest, prefill_pacer_params{}.probe_every);
    EXPECT_GT(longest, 4);
}

std::vector<token_id> long_prompt(int n, std::uint64_t seed) {
    std::mt19937_64       rng(seed);
    std::vector<token_id> p((size_t) n);
    for (auto & t : p) t = (token_id) (rng() % 40);
    return p;
}

TEST(chunked_prefill, a_long_prompt_arrives_in_chunks_while_another_request_steps) {
    for (const bool trees : {false, true}) {
        rest_test::fake_target m(40, 2000, 2, 11);
        m.chains_only_ = !trees;
        decoder    dec(m, nullptr);
        slot_batch batch(dec, 2, 512);
        greedy_sampler sa, sb;
        rest_test::oracle_drafter da(m, 5, 0.7, 2, 6);
        request        a, b;
        a.params.n_predict = 400;
        a.sampler          = &sa;
        a.draft            = &da;
        a.params.n_draft_max = 6;
        b.params.n_predict = 20;
        b.sampler          = &sb;
        const auto pa = long_prompt(5, 1), pb = long_prompt(1500, 2);
        batch.start(0, a, pa);
        batch.step();  // a's prompt (nobody else steps yet: one pass)
        batch.step();
        ASSERT_FALSE(a.prefilling());
        batch.start(1, b, pb);
        int steps_while = 0, max_chunk = 0;
        while (b.prefilling()) {
            const std::int64_t before = a.stats.n_steps;
            const size_t       q0     = m.queued_rows_hist.size();
            batch.step();
            ASSERT_FALSE(a.done()) << "a ended before b's prompt was in";
            EXPECT_EQ(a.stats.n_steps, before + 1) << "a steps in every step while b's prompt arrives";
            if (m.queued_rows_hist.size() > q0) max_chunk = std::max(max_chunk, m.queued_rows_hist.back());
            ++steps_while;
        }
        EXPECT_GT(steps_while, 2) << "the prompt came in several chunks";
        EXPECT_GT(max_chunk, 0) << "prompt rows shared a pass with a's rows";
        EXPECT_LE(max_chunk, 512);
        EXPECT_EQ(b.stats.n_prompt, 1500);
        EXPECT_GT(b.stats.t_prefill_us, 0);
        while (!a.done() || !b.done()) batch.step();
        EXPECT_EQ(a.output, rest_test::plain_output(11, pa, 400, 2000)) << (trees ? "trees" : "chains");
        EXPECT_EQ(b.output, rest_test::plain_output(11, pb, 20, 2000)) << (trees ? "trees" : "chains");
    }
}

TEST(prompt_cache, a_request_reuses_its_slots_memory_and_outputs_what_it_would_without) {
    for (const bool keeps : {true, false}) {
        rest_test::fake_target m(40, 2000, 1, 23);
        m.keeps_prefix = keeps;
        decoder        dec(m, nullptr);
        slot_batch     batch(dec, 1, 64);
        greedy_sampler s1, s2;
        request        r1, r2;
        r1.params.n_predict = 30;
        r1.sampler          = &s1;
        r2.params.n_predict = 30;
        r2.sampler          = &s2;
        const auto p1 = long_prompt(100, 4);
        batch.start(0, r1, p1);
        while (!r1.done()) batch.step();
        batch.release(0);
        // Turn 2: turn 1's prompt and answer, then more. The memory holds p1 and all of the answer but its last token.
        std::vector<token_id> p2 = p1;
        p2.insert(p2.end(), r1.output.begin(), r1.output.end());
        const auto more = long_prompt(50, 5);
        p2.insert(p2.end(), more.begin(), more.end());
        const std::int32_t n_mem = m.n_past(0);
        EXPECT_EQ(n_mem, (std::int32_t) (p1.size() + r1.output.size() - 1));
        const std::int32_t kept = batch.start(0, r2, p2, n_mem);
        EXPECT_EQ(kept, keeps ? n_mem : 0);
        EXPECT_EQ(r2.stats.n_cached, kept);
        while (!r2.done()) batch.step();
        EXPECT_EQ(r2.output, rest_test::plain_output(23, p2, 30, 2000));
        EXPECT_EQ(m.memory(0).size(), p2.size() + r2.output.size() - 1);
    }
}

TEST(prompt_cache, a_cached_count_beyond_the_prompt_keeps_all_but_the_root) {
    rest_test::fake_target m(40, 2000, 1, 29);
    decoder                dec(m, nullptr);
    greedy_sampler         s;
    request                r;
    r.params.n_predict = 10;
    r.sampler          = &s;
    const auto p = long_prompt(40, 6);
    m.prefill(0, p);  // the slot holds the whole prompt (and the root): the root must be decoded again
    EXPECT_EQ(dec.begin(r, p, 40), 39);
    EXPECT_FALSE(r.prefilling());
    request * one[] = {&r};
    while (!r.done()) dec.step(one);
    EXPECT_EQ(r.output, rest_test::plain_output(29, p, 10, 2000));
}

}  // namespace
