// slot_batch: continuous batching over a decoder's slots, as the server's engine and bench --streams use it.
// Requests of different lengths come and go through three slots; every output must be plain decoding's, every
// request must be reported done exactly once, and a slot is reusable once released.
#include "fake-model.h"
#include "rest/slot-batch.h"

#include <deque>
#include <memory>

using namespace rest;

namespace {

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
