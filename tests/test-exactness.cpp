// The strict comparison (rest/exactness.h) on synthetic plain runs: a deterministic "model" maps a prefix to its
// greedy token, runner-up and top-2 gap, so plain runs and their resumptions are exact. The comparison must accept
// speculative outputs that flip to the runner-up at near-ties (and then follow plain resumed from there), and fail on
// a truncated or longer output, a divergence where plain is not near a tie, a flip to a token other than the
// runner-up, and a second, real divergence after an allowed one. The tests' near-tie bound must fail when exceeded.
#include "fake-model.h"
#include "rest/exactness.h"
#include "strict-compare.h"

#include <gtest/gtest-spi.h>

#include <random>

using namespace rest;

namespace {

constexpr float k_eps = 1e-2f;

// Step of a fake model: hash of the prefix. About one step in 8 is a near-tie (gap 0.001).
struct fake_step {
    token_id tok, runner;
    float    gap;
};

fake_step step_of(std::span<const token_id> prefix, std::uint64_t salt) {
    std::uint64_t h = 1469598103934665603ull ^ salt;
    for (token_id t : prefix) h = (h ^ (std::uint64_t) t) * 1099511628211ull;
    h ^= h >> 29;
    const token_id tok    = (token_id) (h % 50);
    const token_id runner = (token_id) ((tok + 1 + (h >> 8) % 49) % 50);
    return {tok, runner, ((h >> 20) % 8) == 0 ? 0.001f : 1.0f};
}

// Plain greedy from prefix `start` for n tokens.
plain_trace plain_run(std::vector<token_id> start, std::size_t n, std::uint64_t salt) {
    plain_trace t;
    for (std::size_t i = 0; i < n; ++i) {
        const fake_step s = step_of(start, salt);
        t.tokens.push_back(s.tok);
        t.runner_up.push_back(s.runner);
        t.gaps.push_back(s.gap);
        start.push_back(s.tok);
    }
    return t;
}

plain_resume resumer(std::size_t n, std::uint64_t salt) {
    return [n, salt](std::span<const token_id> prefix) {
        return plain_run({prefix.begin(), prefix.end()}, n - prefix.size(), salt);
    };
}

// A speculative output that flips to the runner-up at (up to) k near-ties and follows plain otherwise.
std::vector<token_id> spec_with_flips(std::size_t n, std::uint64_t salt, int k, int * flips) {
    std::vector<token_id> out;
    *flips = 0;
    while (out.size() < n) {
        const fake_step s    = step_of(out, salt);
        const bool      flip = s.gap < k_eps && *flips < k;
        out.push_back(flip ? s.runner : s.tok);
        *flips += flip;
    }
    return out;
}

TEST(exactness, identical_outputs_are_exact) {
    const plain_trace p = plain_run({}, 64, 1);
    const auto v = compare_to_plain(p, p.tokens, k_eps, resumer(64, 1));
    EXPECT_TRUE(v.ok);
    EXPECT_TRUE(v.exact());
    EXPECT_EQ(v.near_ties, 0);
}

TEST(exactness, random_runner_up_flips_at_near_ties_pass_and_are_counted) {
    for (std::uint64_t salt = 1; salt <= 200; ++salt) {
        const std::size_t n = 20 + salt % 50;
        int               flips = 0;
        const auto        spec  = spec_with_flips(n, salt, (int) (salt % 4), &flips);
        const auto        v     = compare_to_plain(plain_run({}, n, salt), spec, k_eps, resumer(n, salt));
        ASSERT_TRUE(v.ok) << "salt " << salt << ": " << v.why;
        EXPECT_EQ(v.near_ties, flips) << "salt " << salt;
        EXPECT_EQ(v.exact(), flips == 0);
    }
}

TEST(exactness, truncated_or_longer_output_fails) {
    const plain_trace p = plain_run({}, 40, 2);
    std::vector<token_id> shorter(p.tokens.begin(), p.tokens.end() - 1);
    auto v = compare_to_plain(p, shorter, k_eps, resumer(40, 2));
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.why.find("stops"), std::string::npos) << v.why;
    std::vector<token_id> longer = p.tokens;
    longer.push_back(3);
    EXPECT_FALSE(compare_to_plain(p, longer, k_eps, resumer(40, 2)).ok);
}

// The first index of plain p at or after `from` whose gap is (or is not) a near-tie.
std::size_t find_step(const plain_trace & p, bool near_tie, std::size_t from = 0) {
    for (std::size_t i = from; i < p.gaps.size(); ++i) {
        if ((p.gaps[i] < k_eps) == near_tie) return i;
    }
    return p.gaps.size();
}

TEST(exactness, divergence_where_plain_recorded_no_gap_fails) {
    plain_trace p = plain_run({}, 30, 6);
    auto spec     = p.tokens;
    spec[3]       = p.runner_up[3];
    p.gaps.resize(3);  // a run recorded without its top-2 (e.g. a sampled one)
    const auto v = compare_to_plain(p, spec, k_eps, resumer(30, 6));
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.why.find("no top-2 gap"), std::string::npos) << v.why;
}

TEST(exactness, divergence_without_a_near_tie_fails) {
    const plain_trace p = plain_run({}, 60, 3);
    const std::size_t k = find_step(p, false, 5);
    ASSERT_LT(k, p.tokens.size());
    auto spec = p.tokens;
    spec[k]   = p.runner_up[k];  // even the runner-up is not allowed where plain is not near a tie
    const auto v = compare_to_plain(p, spec, k_eps, resumer(60, 3));
    EXPECT_FALSE(v.ok);
    EXPECT_EQ(v.first_divergence, (std::int32_t) k);
    EXPECT_NE(v.why.find("not a near-tie"), std::string::npos) << v.why;
}

TEST(exactness, near_tie_to_a_token_that_is_not_the_runner_up_fails) {
    const plain_trace p = plain_run({}, 80, 4);
    const std::size_t k = find_step(p, true);
    ASSERT_LT(k, p.tokens.size());
    auto spec = p.tokens;
    spec[k]   = (p.runner_up[k] + 1) % 50 == p.tokens[k] ? (p.runner_up[k] + 2) % 50 : (p.runner_up[k] + 1) % 50;
    const auto v = compare_to_plain(p, spec, k_eps, resumer(80, 4));
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.why.find("runner-up"), std::string::npos) << v.why;
}

TEST(exactness, a_real_divergence_after_an_allowed_one_fails) {
    const std::size_t n = 80;
    for (std::uint64_t salt = 5; salt < 40; ++salt) {
        int  flips = 0;
        auto spec  = spec_with_flips(n, salt, 1, &flips);
        if (flips != 1) continue;
        // Plain resumed after the flip: corrupt a later token where that run is not near a tie.
        const plain_trace p = plain_run({}, n, salt);
        const std::size_t f = (std::size_t) compare_to_plain(p, spec, k_eps, resumer(n, salt)).first_divergence;
        const plain_trace after = resumer(n, salt)(std::span<const token_id>(spec).subspan(0, f + 1));
        const std::size_t j = find_step(after, false, 2);
        if (j >= after.tokens.size()) continue;
        spec[f + 1 + j] = after.runner_up[j];
        // The same bug would pass a check that stops at the first (allowed) divergence.
        const auto v = compare_to_plain(p, spec, k_eps, resumer(n, salt));
        EXPECT_FALSE(v.ok) << "salt " << salt;
        EXPECT_EQ(v.near_ties, 1);
        EXPECT_NE(v.why.find("not a near-tie"), std::string::npos) << v.why;
        return;
    }
    FAIL() << "no salt gave a usable case";
}

// resume_plain_greedy replays the prefix through single-row plain passes: its tokens are the greedy continuation
// after prompt + prefix, with a top-2 record per token, and a run that fills the context (n_predict -1) resumes to
// the same end as the original run.
TEST(exactness, resume_replays_the_prefix_and_continues_greedily) {
    for (const int n_predict : {40, -1}) {
        rest_test::fake_target m(30, 64, 1, 9);
        const std::vector<token_id> prompt = {1, 2, 3};
        greedy_sampler greedy;
        request r;
        r.params.n_predict = n_predict;
        r.sampler          = &greedy;
        decoder(m, nullptr).run(r, prompt);
        const std::vector<token_id> full = r.output;
        ASSERT_GT(full.size(), 20u);
        for (const size_t k : {(size_t) 0, (size_t) 5, full.size() - 2, full.size() - 1, full.size()}) {
            std::vector<token_id> prefix(full.begin(), full.begin() + (std::ptrdiff_t) k);
            if (k > 0) prefix.back() = (prefix.back() + 1) % 30;  // a different token there, as after a near-tie
            const plain_trace t = resume_plain_greedy(m, prompt, n_predict, prefix, {});
            std::vector<token_id> ctx = prompt, want;
            ctx.insert(ctx.end(), prefix.begin(), prefix.end());
            while (prefix.size() + want.size() < full.size()) {  // same end: n_predict or the context
                want.push_back(argmax(m.logits_for(ctx)));
                ctx.push_back(want.back());
            }
            EXPECT_EQ(t.tokens, want) << "n_predict " << n_predict << ", prefix " << k;
            EXPECT_EQ(t.gaps.size(), t.tokens.size());
            EXPECT_EQ(t.runner_up.size(), t.tokens.size());
        }
    }
}

TEST(exactness, near_tie_count_over_the_bound_fails) {
    rest_test::lossless_tally t;
    t.cases     = 20;
    t.near_ties = 2;
    EXPECT_NONFATAL_FAILURE(rest_test::expect_near_ties_at_most(t, 0.05, "over"), "more near-ties");
    t.near_ties = 1;
    rest_test::expect_near_ties_at_most(t, 0.05, "at the bound");
    t.near_ties = 1;
    EXPECT_NONFATAL_FAILURE(rest_test::expect_near_ties_at_most(t, 0.0, "quantized"), "more near-ties");
}

}  // namespace
