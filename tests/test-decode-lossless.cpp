// The decoder on a fake model whose logits depend only on the prefix: speculative output must equal plain output
// exactly, for random trees, slots, context limits, EOG and stop callbacks.
#include "fake-model.h"
#include "decode/online-budget.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

using namespace rest;
using rest_test::fake_target;
using rest_test::oracle_drafter;

namespace {

// GPU-like: verification costs the same up to 64 rows, so the automatic budget drafts.
cost_table k_gpu_costs() {
    cost_table c;
    c.rows = {1, 2, 4, 8, 16, 32, 64};
    c.t_us = {1000, 1001, 1002, 1004, 1008, 1016, 1030};
    return c;
}

struct run_out {
    std::vector<token_id>       tokens;
    stop_reason                 stopped;
    generation_stats            stats;
    std::vector<token_id>       memory;
    std::vector<token_logprobs> logprobs;
};

run_out run_once(fake_target & m, std::span<const token_id> prompt, draft_provider * d, int n_predict,
                 token_id eog, int n_draft_max, int n_logprobs = -1) {
    greedy_sampler s;
    decoder        dec(m, nullptr);
    request        r;
    r.params.n_predict   = n_predict;
    r.params.n_draft_max = n_draft_max;
    r.sampler            = &s;
    r.draft              = d;
    r.is_eog             = [eog](token_id t) { return t == eog; };
    r.n_logprobs         = n_logprobs;
    dec.run(r, prompt);
    return {r.output, r.stopped, r.stats, m.memory(0), r.logprobs};
}

TEST(decoder_lossless, random_trees_equal_plain_greedy) {
    std::mt19937_64 rng(42);
    int n_cases = 0, n_long_accepts = 0;
    for (int c = 0; c < 300; ++c) {
        const int n_vocab = std::uniform_int_distribution<int>(3, 40)(rng);
        const int n_ctx   = std::uniform_int_distribution<int>(12, 200)(rng);
        const int n_pred  = std::uniform_int_distribution<int>(1, 150)(rng);
        const token_id eog = c % 3 == 0 ? 0 : -5;  // a third of the cases can stop on EOG
        std::vector<token_id> prompt(std::uniform_int_distribution<int>(1, 10)(rng));
        for (auto & t : prompt) t = std::uniform_int_distribution<int>(0, n_vocab - 1)(rng);

        fake_target plain_m(n_vocab, n_ctx, 1, c);
        const auto  plain = run_once(plain_m, prompt, nullptr, n_pred, eog, 0);

        fake_target    spec_m(n_vocab, n_ctx, 1, c);
        oracle_drafter d(spec_m, c * 7 + 1, std::uniform_real_distribution<double>(0.3, 1.0)(rng),
                         std::uniform_int_distribution<int>(0, 12)(rng), std::uniform_int_distribution<int>(1, 12)(rng));
        const int  budget = std::uniform_int_distribution<int>(1, 40)(rng);
        const auto spec   = run_once(spec_m, prompt, &d, n_pred, eog, budget);

        ASSERT_EQ(spec.tokens, plain.tokens) << "case " << c;
        ASSERT_EQ(spec.stopped, plain.stopped) << "case " << c;
        // What stays committed in memory must be the prompt and output, minus the last emitted token (the next
        // root), never a rejected node.
        // (When generation stops on a token that was an accepted draft node, that token is in memory too.)
        std::vector<token_id> all = prompt;
        all.insert(all.end(), plain.tokens.begin(), plain.tokens.end());
        ASSERT_TRUE(spec.memory.size() == plain.memory.size() || spec.memory.size() == plain.memory.size() + 1);
        ASSERT_TRUE(std::equal(spec.memory.begin(), spec.memory.end(), all.begin())) << "case " << c;
        EXPECT_LE(spec.stats.n_forward, plain.stats.n_forward);
        for (size_t k = 3; k < spec.stats.accept_hist.size(); ++k) n_long_accepts += (int) spec.stats.accept_hist[k];
        ++n_cases;
    }
    EXPECT_EQ(n_cases, 300);
    EXPECT_GT(n_long_accepts, 100) << "the oracle drafter should produce many long accepted paths";
}

TEST(decoder_lossless, chains_only_model_gets_best_paths) {
    std::mt19937_64 rng(7);
    int n_accepted = 0;
    for (int c = 0; c < 150; ++c) {
        const int n_vocab = std::uniform_int_distribution<int>(3, 40)(rng);
        const int n_ctx   = std::uniform_int_distribution<int>(12, 200)(rng);
        const int n_pred  = std::uniform_int_distribution<int>(1, 150)(rng);
        std::vector<token_id> prompt(std::uniform_int_distribution<int>(1, 10)(rng));
        for (auto & t : prompt) t = std::uniform_int_distribution<int>(0, n_vocab - 1)(rng);

        fake_target plain_m(n_vocab, n_ctx, 1, c);
        const auto  plain = run_once(plain_m, prompt, nullptr, n_pred, -5, 0);

        fake_target spec_m(n_vocab, n_ctx, 1, c);
        spec_m.chains_only_ = true;
        oracle_drafter d(spec_m, c * 3 + 1, 0.8, std::uniform_int_distribution<int>(0, 8)(rng), 8);
        const auto spec = run_once(spec_m, prompt, &d, n_pred, -5, std::uniform_int_distribution<int>(1, 16)(rng));
        ASSERT_EQ(spec.tokens, plain.tokens) << "case " << c;
        n_accepted += (int) spec.stats.n_accepted;
    }
    EXPECT_GT(n_accepted, 1000) << "best paths of oracle trees should be accepted often";
}

TEST(decoder_lossless, context_limit_hit_mid_tree) {
    // A tiny context forces trees to shrink and generation to end on the context, exactly where plain ends.
    for (int seed = 0; seed < 50; ++seed) {
        std::vector<token_id> prompt = {1, 2, 3};
        fake_target plain_m(5, 20, 1, seed);
        const auto plain = run_once(plain_m, prompt, nullptr, 1000, -5, 0);
        EXPECT_EQ(plain.stopped, stop_reason::context);
        fake_target spec_m(5, 20, 1, seed);
        oracle_drafter d(spec_m, seed, 1.0, 4, 10);
        const auto spec = run_once(spec_m, prompt, &d, 1000, -5, 30);
        ASSERT_EQ(spec.tokens, plain.tokens) << seed;
        ASSERT_EQ(spec.stopped, stop_reason::context);
    }
}

TEST(decoder_lossless, falls_back_to_plain_when_memory_is_short) {
    std::vector<token_id> prompt = {4, 5};
    fake_target plain_m(9, 300, 1, 3);
    const auto plain = run_once(plain_m, prompt, nullptr, 100, -5, 0);
    fake_target spec_m(9, 300, 1, 3);
    spec_m.max_rows_ = 4;  // the "KV memory" refuses batches of more than 4 rows
    oracle_drafter d(spec_m, 9, 0.9, 6, 8);
    const auto spec = run_once(spec_m, prompt, &d, 100, -5, 20);
    EXPECT_EQ(spec.tokens, plain.tokens);
}

// Four requests (prompts of 1-4 tokens, 40/50/60/70 tokens each, slots 0-3) stepped together to the end on m, with
// drafter(i) drafting for request i. Returns the finished requests (outputs and stats).
const std::vector<std::vector<token_id>> k_four_prompts = {{1}, {2, 3}, {4, 5, 6}, {7, 8, 9, 10}};

std::vector<request> run_four_slots(fake_target & m, budget_policy * policy, std::int32_t n_draft_max,
                                    const std::function<std::unique_ptr<oracle_drafter>(int)> & drafter) {
    std::vector<greedy_sampler>                  samplers(4);
    std::vector<std::unique_ptr<oracle_drafter>> drafters;
    std::vector<request>                         reqs(4);
    decoder                                      dec(m, policy);
    for (int i = 0; i < 4; ++i) {
        drafters.push_back(drafter(i));
        reqs[i].slot = i;
        reqs[i].params.n_predict = 40 + 10 * i;
        reqs[i].params.n_draft_max = n_draft_max;
        reqs[i].sampler = &samplers[i];
        reqs[i].draft = drafters[i].get();
        reqs[i].is_eog = [](token_id) { return false; };
        dec.start(reqs[i], k_four_prompts[i]);
    }
    std::vector<request *> ptrs = {&reqs[0], &reqs[1], &reqs[2], &reqs[3]};
    int steps = 0;
    while (std::any_of(reqs.begin(), reqs.end(), [](const request & r) { return !r.done(); })) {
        dec.step(ptrs);
        if (++steps >= 1000) {
            ADD_FAILURE() << "1000 steps and not done";
            break;
        }
    }
    return reqs;
}

// Each of run_four_slots' requests produced what it produces alone with plain decoding.
void expect_each_as_alone(const std::vector<request> & reqs, int n_vocab) {
    for (int i = 0; i < 4; ++i) {
        fake_target alone(n_vocab, 256, 1, 11);
        const auto plain = run_once(alone, k_four_prompts[i], nullptr, 40 + 10 * i, -5, 0);
        EXPECT_EQ(reqs[i].output, plain.tokens) << "slot " << i;
    }
}

TEST(decoder_lossless, several_slots_in_one_batch) {
    // Four requests stepped together must each produce what they produce alone.
    const int n_vocab = 17;
    fake_target m(n_vocab, 256, 4, 11);
    const auto reqs = run_four_slots(m, nullptr, 16, [&](int i) {
        return std::make_unique<oracle_drafter>(m, 100 + i, 0.8, 5, 6);
    });
    expect_each_as_alone(reqs, n_vocab);
}

// Chains of several requests (separate sequences) must hold equal row counts in every forward pass, because
// llama.cpp runs unequal per-sequence counts as several passes: shorter chains are padded, and the padding must not
// change any output. Without a policy (the longest chain sets k) and with the automatic one.
TEST(decoder_lossless, chains_of_several_slots_have_equal_rows_and_stay_lossless) {
    const int n_vocab = 17;
    for (const bool adaptive : {false, true}) {
        SCOPED_TRACE(adaptive ? "automatic budget" : "no policy");
        fake_target m(n_vocab, 256, 4, 11);
        m.chains_only_ = true;
        rest::online_budget policy(k_gpu_costs());
        // Chains of 2, 4, 6 and 8 nodes, with different oracle rates.
        const auto reqs = run_four_slots(m, adaptive ? &policy : nullptr, 8, [&](int i) {
            return std::make_unique<oracle_drafter>(m, 200 + i, 0.3 + 0.2 * i, 5, 2 + 2 * i);
        });
        int padded_steps = 0;
        for (const auto & rows : m.rows_per_request) {
            for (int v : rows) EXPECT_EQ(v, rows.front()) << "unequal rows in one forward pass";
            padded_steps += rows.size() > 1 && rows.front() > 1;
        }
        EXPECT_GT(padded_steps, 0) << "no step drafted";
        expect_each_as_alone(reqs, n_vocab);
        for (const auto & r : reqs) {
            EXPECT_LE(r.stats.n_accepted, r.stats.n_drafted) << "padding counted as accepted drafts";
        }
    }
}

TEST(decoder_lossless, stop_callback_ends_mid_path) {
    std::vector<token_id> prompt = {1, 2};
    for (int stop_at = 1; stop_at < 30; stop_at += 3) {
        auto run = [&](draft_provider * d, fake_target & m) {
            greedy_sampler s;
            decoder dec(m, nullptr);
            request r;
            r.params.n_predict = 100;
            r.params.n_draft_max = 10;
            r.sampler = &s;
            r.draft = d;
            int n = 0;
            r.on_token = [&](token_id) { return ++n < stop_at; };
            dec.run(r, prompt);
            EXPECT_EQ(r.stopped, stop_reason::stop);
            return r.output;
        };
        fake_target a(7, 200, 1, 5), b(7, 200, 1, 5);
        oracle_drafter d(b, 3, 1.0, 2, 8);
        EXPECT_EQ(run(nullptr, a), run(&d, b));
    }
}

}  // namespace

namespace {

// The reference: log-softmax by the definition, and the top tokens by a full sort.
token_logprobs naive_logprobs(const std::vector<float> & l, token_id t, int n_top) {
    double z = 0;
    for (float v : l) z += std::exp((double) v);
    token_logprobs out;
    out.token   = t;
    out.logprob = (float) std::log(std::exp((double) l[t]) / z);
    std::vector<token_id> ids(l.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (token_id) i;
    std::stable_sort(ids.begin(), ids.end(), [&](token_id a, token_id b) { return l[a] > l[b]; });
    for (int i = 0; i < n_top && i < (int) ids.size(); ++i) {
        out.top.emplace_back(ids[i], (float) std::log(std::exp((double) l[ids[i]]) / z));
    }
    return out;
}

void expect_near(const token_logprobs & a, const token_logprobs & b, const std::string & where) {
    EXPECT_EQ(a.token, b.token) << where;
    EXPECT_NEAR(a.logprob, b.logprob, 1e-4) << where;
    ASSERT_EQ(a.top.size(), b.top.size()) << where;
    for (size_t i = 0; i < a.top.size(); ++i) {
        EXPECT_EQ(a.top[i].first, b.top[i].first) << where << " top " << i;
        EXPECT_NEAR(a.top[i].second, b.top[i].second, 1e-4) << where << " top " << i;
    }
}

}  // namespace

TEST(logprobs, match_the_definition_on_random_logits) {
    std::mt19937_64 rng(7);
    for (int c = 0; c < 200; ++c) {
        std::vector<float> l(std::uniform_int_distribution<int>(1, 300)(rng));
        // Coarse values so that ties occur: the lower token id comes first.
        for (auto & v : l) v = (float) std::uniform_int_distribution<int>(-40, 40)(rng) / 4.0f;
        const token_id t = std::uniform_int_distribution<int>(0, (int) l.size() - 1)(rng);
        const int      k = std::uniform_int_distribution<int>(0, 25)(rng);
        expect_near(logprobs_of(l, t, k), naive_logprobs(l, t, k), "case " + std::to_string(c));
    }
}

TEST(decoder_lossless, logprobs_follow_every_emitted_token_with_speculation) {
    std::mt19937_64 rng(11);
    int n_checked = 0;
    for (int c = 0; c < 60; ++c) {
        const int             n_vocab = std::uniform_int_distribution<int>(3, 40)(rng);
        const int             n_top   = std::uniform_int_distribution<int>(0, 5)(rng);
        std::vector<token_id> prompt(std::uniform_int_distribution<int>(1, 8)(rng));
        for (auto & t : prompt) t = std::uniform_int_distribution<int>(0, n_vocab - 1)(rng);
        fake_target    plain_m(n_vocab, 200, 1, c), spec_m(n_vocab, 200, 1, c);
        oracle_drafter d(spec_m, c + 3, 0.8, 4, 8);
        const token_id no_eog = -5;
        const auto     plain  = run_once(plain_m, prompt, nullptr, 60, no_eog, 0, n_top);
        const auto     spec   = run_once(spec_m, prompt, &d, 60, no_eog, 16, n_top);
        ASSERT_EQ(spec.tokens, plain.tokens) << "case " << c;
        ASSERT_EQ(plain.logprobs.size(), plain.tokens.size());
        ASSERT_EQ(spec.logprobs.size(), spec.tokens.size());
        std::vector<token_id> prefix = prompt;
        for (size_t i = 0; i < plain.tokens.size(); ++i) {
            const std::string where = "case " + std::to_string(c) + " token " + std::to_string(i);
            const auto        ref   = naive_logprobs(plain_m.logits_for(prefix), plain.tokens[i], n_top);
            expect_near(plain.logprobs[i], ref, where);
            expect_near(spec.logprobs[i], ref, where + " (speculative)");
            prefix.push_back(plain.tokens[i]);
            ++n_checked;
        }
    }
    EXPECT_GT(n_checked, 1000);
}
