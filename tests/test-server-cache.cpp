// The server's prompt cache (issue 19): a slot keeps its KV after a request, and a request that starts with tokens
// a free slot holds processes only the rest (llama-server's cache_prompt, on by default). On a Q8_0 fixture with a
// bf16 KV cache every row computes alike whatever pass it is in (test-llama-exact-quantized), so a reused prefix
// must give exactly the output a full prompt pass gives: turns of a conversation are compared token for token with
// the same prompt sent with cache_prompt false, one conversation alone and 8 at once over 4 slots. Both run again in
// the tree layout with a context per slot (--context-per-slot), where slots share no KV pool.
// A chat on stories260K (a real F32 model without a template: the ChatML fallback) reuses its turns too; there
// batched float kernels round differently from a prompt pass, so it is held to the strict comparison (a divergence
// only at a near-tie, to plain's runner-up) against the same messages sent with cache_prompt false.
#include "test-server-util.h"

#include <mutex>
#include <random>
#include <thread>

using json = nlohmann::json;
using namespace rest_test;

namespace {

// A suite's `rest serve` on a Q8_0 fixture with a bf16 cache, 4 slots, plus Derived::layout_args().
template <class Derived> class cache_suite : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        rest::fixture_params fp;
        fp.type      = "q8_0";
        fp.seed      = 41;
        start_error_ = "SetUpTestSuite failed before starting the server";  // (if what follows throws)
        model_path_  = fixture_model(fp);
        srv_         = new server_process();
        std::vector<std::string> args = {"-m", model_path_, "-c", "2048", "--np", "4", "-t", "1", "--draft-fixed", "8",
                                         "--cache-type-k", "bf16", "--cache-type-v", "bf16"};
        for (const auto & a : Derived::layout_args()) args.push_back(a);
        start_error_ = srv_->start(args, tmp_dir() + "/" + Derived::log_name());
    }
    static void TearDownTestSuite() {
        if (start_error_.empty()) {
            srv_->signal(SIGTERM);
            EXPECT_EQ(srv_->wait_exit(60), 0) << srv_->log_tail();
        }
        delete srv_;
    }
    void SetUp() override { ASSERT_EQ(start_error_, "") << "server did not start: " << start_error_; }

    struct turn {
        std::vector<int> output;
        std::int64_t     cached = -1;
    };

    // A completion of a token prompt; fails the test on an error.
    static turn complete(const std::vector<int> & prompt, int max_tokens, bool cache) {
        const json body = {{"prompt", prompt},       {"max_tokens", max_tokens}, {"temperature", 0},
                           {"return_tokens", true}, {"cache_prompt", cache}};
        const http_reply r = client(srv_->port()).post("/v1/completions", body);
        turn             t;
        EXPECT_EQ(r.status, 200) << r.body;
        if (r.status != 200) return t;
        t.output = r.json["rest"]["tokens"].get<std::vector<int>>();
        t.cached = r.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::int64_t>();
        return t;
    }

    static std::vector<int> random_tokens(std::mt19937 & rng, int n) {
        std::vector<int> v((size_t) n);
        for (auto & t : v) t = std::uniform_int_distribution<int>(300, 20000)(rng);
        return v;
    }

    // One conversation of 3 turns: each turn reuses what its slot holds and outputs what the same prompt does alone.
    static void turns_reuse_their_prefix() {
        std::mt19937     rng(7);
        std::vector<int> prompt = random_tokens(rng, 40);
        for (int k = 0; k < 3; ++k) {
            const turn cached = complete(prompt, 30, true);
            const turn fresh  = complete(prompt, 30, false);
            EXPECT_EQ(fresh.cached, 0) << "cache_prompt false reuses nothing";
            EXPECT_EQ(cached.output, fresh.output) << "turn " << k;
            if (k > 0) {
                // The last turn's prompt and all of its output but the last token are in the slot.
                EXPECT_GT(cached.cached, 40 * k) << "turn " << k;
            }
            std::printf("%s turn %d: %zu prompt tokens, %lld reused\n", Derived::log_name(), k, prompt.size(),
                        (long long) cached.cached);
            prompt.insert(prompt.end(), cached.output.begin(), cached.output.end());
            const auto more = random_tokens(rng, 25);
            prompt.insert(prompt.end(), more.begin(), more.end());
        }
    }

    // 8 conversations of 3 turns at once over the 4 slots; then each turn alone with cache_prompt false: the same
    // tokens.
    static void eight_conversations_stay_lossless() {
        const int                        n_conv = 8, n_turns = 3;
        std::vector<std::vector<std::vector<int>>> prompts(n_conv), outputs(n_conv);
        std::vector<std::int64_t>        reused(n_conv, 0);
        std::vector<std::thread>         threads;
        for (int c = 0; c < n_conv; ++c) {
            threads.emplace_back([&, c] {
                std::mt19937     rng(100 + c);
                std::vector<int> prompt = random_tokens(rng, 10 + 7 * c);
                for (int k = 0; k < n_turns; ++k) {
                    const turn t = complete(prompt, 20 + 3 * c, true);
                    prompts[c].push_back(prompt);
                    outputs[c].push_back(t.output);
                    reused[c] += std::max<std::int64_t>(0, t.cached);
                    prompt.insert(prompt.end(), t.output.begin(), t.output.end());
                    const auto more = random_tokens(rng, 15);
                    prompt.insert(prompt.end(), more.begin(), more.end());
                }
            });
        }
        for (auto & t : threads) t.join();
        std::int64_t total_reused = 0;
        for (int c = 0; c < n_conv; ++c) {
            total_reused += reused[c];
            for (int k = 0; k < n_turns; ++k) {
                const turn fresh = complete(prompts[c][(size_t) k], 20 + 3 * c, false);
                EXPECT_EQ(outputs[c][(size_t) k], fresh.output) << "conversation " << c << " turn " << k;
            }
        }
        std::printf("%s: 8 conversations x 3 turns over 4 slots: %lld prompt tokens reused\n", Derived::log_name(),
                    (long long) total_reused);
    }

    static inline std::string      model_path_;
    static inline server_process * srv_ = nullptr;
    static inline std::string      start_error_;
};

class ServerCache : public cache_suite<ServerCache> {
  public:
    static std::vector<std::string> layout_args() { return {}; }
    static const char *             log_name() { return "server-cache.log"; }
};

class ServerCacheTreePerSlot : public cache_suite<ServerCacheTreePerSlot> {
  public:
    static std::vector<std::string> layout_args() { return {"--draft-layout", "tree", "--context-per-slot"}; }
    static const char *             log_name() { return "server-cache-tree-per-slot.log"; }
};


TEST_F(ServerCache, TurnsReuseTheirPrefixAndEqualAFullPromptPass) {
    turns_reuse_their_prefix();
}

TEST_F(ServerCache, EightConversationsOverFourSlotsStayLossless) {
    eight_conversations_stay_lossless();
}

TEST_F(ServerCacheTreePerSlot, TurnsReuseTheirPrefixAndEqualAFullPromptPass) {
    turns_reuse_their_prefix();
}

TEST_F(ServerCacheTreePerSlot, EightConversationsOverFourSlotsStayLossless) {
    eight_conversations_stay_lossless();
}

class ServerCacheChat : public stories_server_test<ServerCacheChat> {
  public:
    static std::vector<std::string> server_args() { return {"-c", "2048", "--np", "2", "-t", "1"}; }
    static const char *             log_name() { return "server-cache-chat.log"; }
};

TEST_F(ServerCacheChat, AThreeTurnChatReusesItsTurnsLosslessly) {
    const client c(srv_->port());
    json         messages = json::array({{{"role", "user"}, {"content", "Tell me a story about a cat."}}});
    const std::vector<std::string> next = {"What did the cat eat?", "And then what happened?"};
    int near_ties = 0;
    for (int k = 0; k < 3; ++k) {
        json body = {{"messages", messages}, {"max_tokens", 48}, {"temperature", 0}, {"return_tokens", true}};
        const http_reply cached = c.post("/v1/chat/completions", body);
        body["cache_prompt"]    = false;
        const http_reply fresh  = c.post("/v1/chat/completions", body);
        ASSERT_EQ(cached.status, 200) << cached.body;
        ASSERT_EQ(fresh.status, 200) << fresh.body;
        const auto got  = cached.json["rest"]["tokens"].get<std::vector<int>>();
        const auto want = fresh.json["rest"]["tokens"].get<std::vector<int>>();
        const std::int64_t n_cached = cached.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::int64_t>();
        EXPECT_EQ(fresh.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::int64_t>(), 0);
        if (k > 0) EXPECT_GT(n_cached, 0) << "turn " << k << " reuses the turns before it";
        const http_reply rendered = c.post("/apply-template", json{{"messages", messages}});
        ASSERT_EQ(rendered.status, 200) << rendered.body;
        EXPECT_EQ(check_greedy(*model_, rendered.json["prompt"].get<std::string>(), got, want, &near_ties), "")
            << "turn " << k;
        std::printf("chat turn %d: %lld prompt tokens, %lld reused\n", k,
                    (long long) cached.json["usage"]["prompt_tokens"].get<std::int64_t>(), (long long) n_cached);
        if (k < 2) {
            messages.push_back({{"role", "assistant"}, {"content", cached.json["choices"][0]["message"]["content"]}});
            messages.push_back({{"role", "user"}, {"content", next[(size_t) k]}});
        }
    }
    EXPECT_LE(near_ties, 1);
}

}  // namespace
