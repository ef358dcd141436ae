// slot_batch: continuous batching over a decoder's slots, as the server's engine and bench --streams use it.
// Requests of different lengths come and go through three slots; every output must be plain decoding's, every
// request must be reported done exactly once, and a slot is reusable once released.
#include "fake-model.h"
#include "rest/slot-batch.h"

#include <deque>
#include <memory>

using namespace rest;

namespace {

// An argmax that records what it is told was seen (the penalty window's input).
struct recording_sampler final : token_sampler {
    std::vector<token_id> seen;
    token_id sample(std::span<const float> logits) override { return argmax(logits); }
    void     accept(token_id t) override { seen.push_back(t); }
    bool     is_greedy() const override { return true; }
};

// A sampler is told the whole prompt, then each emitted token, once and in order, as llama.cpp's server feeds its
// sampler: also when drafts are verified several tokens a step, and when a request reuses a slot's prefix (its
// prompt is still all in the window, though only the rest of it is processed).
TEST(slot_batch, each_sampler_sees_its_prompt_then_its_output_once) {
    rest_test::fake_target m(40, 400, 1, 7);
    decoder                dec(m, nullptr);
    slot_batch             batch(dec, 1);
    auto run = [&](request & r, recording_sampler & s, rest_test::oracle_drafter & d, const std::vector<token_id> & p,
                   bool reuse) {
        r.params.n_predict   = 24;
        r.params.n_draft_max = 8;
        r.sampler            = &s;
        r.draft              = &d;
        batch.start(0, r, p, reuse);
        for (int steps = 0; !r.done(); ++steps) {
            ASSERT_LT(steps, 100);
            batch.step();
        }
        batch.release(0);
        std::vector<token_id> want = p;
        want.insert(want.end(), r.output.begin(), r.output.end());
        EXPECT_EQ(s.seen, want);
        EXPECT_LT(r.stats.n_steps, (std::int64_t) r.output.size()) << "no step verified a draft";
    };
    const std::vector<token_id> a_prompt = {1, 2, 3, 4};
    request                     a, b;
    recording_sampler           sa, sb;
    rest_test::oracle_drafter   da(m, 20, 0.9, 2, 6), db(m, 21, 0.9, 2, 6);
    run(a, sa, da, a_prompt, false);
    std::vector<token_id> b_prompt = a_prompt;
    b_prompt.insert(b_prompt.end(), a.output.begin(), a.output.begin() + 6);
    b_prompt.push_back(5);
    run(b, sb, db, b_prompt, true);
    EXPECT_GT(b.stats.n_cached, 0) << "the second request did not reuse the slot's prefix";
}

TEST(slot_batch, requests_come_and_go_through_the_slots_with_plain_outputs) {
    rest_test::fake_target m(40, 400, 3, 7);
    decoder                dec(m, nullptr);
    slot_batch             batch(dec, 3);
    const int              n_req = 8;
    std::vector<std::unique_ptr<rest_test::oracle_drafter>> drafters;
    std::vector<greedy_sampler> samplers(n_req);
    std::vector<request>        reqs(n_req);
    std::vector<std::vector<token_id>> prompts;
    std::deque<int> queue;
    for (int i = 0; i < n_req; ++i) {
        prompts.push_back({(token_id) (1 + i), (token_id) (2 + i), 3});
        drafters.push_back(std::make_unique<rest_test::oracle_drafter>(m, 20 + i, 0.7, 2, 6));
        reqs[i].params.n_predict   = i == 3 ? 0 : 5 + 7 * i;  // one that is done before its first step
        reqs[i].params.n_draft_max = 8;
        reqs[i].sampler            = &samplers[i];
        reqs[i].draft              = drafters[i].get();
        queue.push_back(i);
    }
    std::vector<int> who(3, -1), reported(n_req, 0);
    int              steps = 0;
    while (true) {
        for (std::int32_t k; !queue.empty() && (k = batch.free_slot()) >= 0;) {
            who[k] = queue.front();
            queue.pop_front();
            batch.start(k, reqs[who[k]], prompts[who[k]]);
            EXPECT_EQ(reqs[who[k]].slot, k);
            EXPECT_THROW(batch.start(k, reqs[who[k]], prompts[who[k]]), std::invalid_argument) << "slot is busy";
        }
        if (batch.n_busy() == 0) break;
        ASSERT_LT(++steps, 1000);
        for (const std::int32_t k : batch.step()) {
            ASSERT_GE(who[k], 0);
            EXPECT_TRUE(reqs[who[k]].done());
            ++reported[who[k]];
            batch.release(k);
            EXPECT_EQ(batch.at(k), nullptr);
            who[k] = -1;
        }
    }
    for (int i = 0; i < n_req; ++i) {
        EXPECT_EQ(reported[i], 1) << "request " << i;
        // The fake's logits depend only on the token prefix, so every slot's output is the 1-slot plain one.
        EXPECT_EQ(reqs[i].output, rest_test::plain_output(7, prompts[i], reqs[i].params.n_predict)) << "request " << i;
    }
}

}  // namespace
