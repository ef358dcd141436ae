// Tree verification on real llama.cpp contexts (fixture models): speculative greedy output equals plain greedy
// output token for token. Drafts replay the model's own greedy continuation (so long paths are accepted and the
// KV compaction is exercised) mixed with random branches. The one allowed divergence is a float near-tie to plain's
// runner-up (strict-compare.h), after which the comparison resumes; each suite bounds the near-ties it saw.
#include "rest/decoder.h"
#include "rest/llama-model.h"
#include "strict-compare.h"
#include "test-util.h"

#include <algorithm>
#include <cstring>
#include <random>

using namespace rest;
using rest_test::greedy_run;
using rest_test::lossless_tally;

namespace {

// Proposes the reference continuation (from the plain run) with probability p per token, plus random branches.
class replay_drafter final : public draft_provider {
  public:
    replay_drafter(std::vector<token_id> ref, int n_vocab, std::uint64_t seed, double p, int branches, int depth) :
        ref_(std::move(ref)), n_vocab_(n_vocab), rng_(seed), p_(p), branches_(branches), depth_(depth) {}
    void reset(std::span<const token_id> prompt) override { n_prompt_ = prompt.size(); n_ctx_ = prompt.size(); }
    void accept(std::span<const token_id> t) override { n_ctx_ += t.size(); }
    draft_tree draft(int n_budget) override {
        draft_tree tree;
        std::uniform_real_distribution<double> u(0, 1);
        std::uniform_int_distribution<int>     tok(0, n_vocab_ - 1);
        const size_t at = n_ctx_ - n_prompt_;  // index in ref_ of the token after the root
        int   parent = -1;
        float score  = 1.0f;
        for (int d = 0; d < depth_ && (int) tree.size() < n_budget; ++d) {
            token_id t = at + d < ref_.size() ? ref_[at + d] : tok(rng_);
            if (u(rng_) > p_) t = tok(rng_);
            score *= 0.95f;
            parent = tree.add(t, parent, score, 1);
        }
        for (int b = 0; b < branches_ && (int) tree.size() < n_budget; ++b) {
            const int par = std::uniform_int_distribution<int>(-1, (int) tree.size() - 1)(rng_);
            if (par >= 0 && tree.depths[par] >= depth_) continue;
            const token_id t = tok(rng_);
            bool dup = false;
            for (size_t i = 0; i < tree.size(); ++i) dup |= tree.parents[i] == par && tree.tokens[i] == t;
            if (dup) continue;
            // Give branches lower scores than their parent; append keeps parents first, and a stable sort by score
            // would too, but the verifier must not depend on order beyond parents-first, so keep append order.
            tree.add(t, par, (par < 0 ? 1.0f : tree.scores[par]) * 0.5f, 2);
        }
        return tree;
    }

  private:
    std::vector<token_id> ref_;
    int n_vocab_;
    std::mt19937_64 rng_;
    double p_;
    int branches_, depth_;
    size_t n_prompt_ = 0, n_ctx_ = 0;
};

void run_cases(const std::string & vocab, int n_cases, int n_ctx, lossless_tally & t, std::uint64_t seed,
               bool trees = true) {
    fixture_params p;
    p.vocab = vocab;
    p.seed  = 7;
    const auto m = rest_test::load_model(rest_test::fixture_model(p));
    context_params cp;
    cp.n_ctx     = n_ctx;
    cp.n_threads = 1;  // ctest runs suites in parallel: one thread each avoids ggml spin-waiting on a busy CPU
    cp.trees     = trees;
    auto ctx = m->new_context(cp);
    EXPECT_EQ(ctx->trees(), trees);
    std::mt19937_64 rng(seed);
    const int n_vocab = m->info().n_vocab;
    for (int c = 0; c < n_cases; ++c) {
        std::vector<token_id> prompt(std::uniform_int_distribution<int>(1, 12)(rng));
        for (auto & tk : prompt) tk = std::uniform_int_distribution<int>(100, n_vocab - 1)(rng);
        const int  n     = std::uniform_int_distribution<int>(8, n_ctx)(rng);  // sometimes runs into n_ctx
        const greedy_run plain = rest_test::generate_greedy(*m, *ctx, prompt, n, nullptr, 0, nullptr);
        replay_drafter d(plain.tokens, n_vocab, rng(), std::uniform_real_distribution<double>(0.5, 1.0)(rng),
                         std::uniform_int_distribution<int>(0, 10)(rng), std::uniform_int_distribution<int>(1, 12)(rng));
        const greedy_run spec =
            rest_test::generate_greedy(*m, *ctx, prompt, n, &d, std::uniform_int_distribution<int>(1, 48)(rng), nullptr);
        rest_test::expect_lossless(plain, spec, t, vocab + " case " + std::to_string(c),
                                   rest_test::resume_plain(*m, *ctx, prompt, n));
        if (::testing::Test::HasFatalFailure()) return;
    }
}

TEST(verify_greedy, fixture_llama_spm_u16_vocab) {
    lossless_tally t;
    run_cases("llama-spm", 150, 256, t, 1);
    std::printf("llama-spm: %d cases, %d exact, %d near-tie divergences, %ld accepted draft tokens, %ld paths >= 4\n",
                t.cases, t.exact, t.near_ties, t.accepted, t.long_paths);
    EXPECT_EQ(t.cases, 150);
    rest_test::expect_near_ties_at_most(t, rest_test::k_float_near_tie_fraction, "llama-spm f32 trees");
    EXPECT_GT(t.long_paths, 200);
}

TEST(verify_greedy, fixture_qwen2_vocab_above_65535) {
    lossless_tally t;
    run_cases("qwen2", 20, 96, t, 2);
    std::printf("qwen2: %d cases, %d exact, %d near-tie divergences, %ld accepted draft tokens, %ld paths >= 4\n",
                t.cases, t.exact, t.near_ties, t.accepted, t.long_paths);
    EXPECT_EQ(t.cases, 20);
    rest_test::expect_near_ties_at_most(t, rest_test::k_float_near_tie_fraction, "qwen2 f32 trees");
    EXPECT_GT(t.long_paths, 20);
}

TEST(verify_greedy, chain_layout_verifies_best_paths) {
    // The chain layout (one sequence per slot, no pool): the decoder sends each tree's best path, and commit trims
    // the rejected tail of the slot's own sequence.
    lossless_tally t;
    run_cases("llama-spm", 60, 256, t, 4, false);
    std::printf("llama-spm, chains: %d cases, %d exact, %d near-tie divergences, %ld accepted draft tokens\n", t.cases,
                t.exact, t.near_ties, t.accepted);
    EXPECT_EQ(t.cases, 60);
    rest_test::expect_near_ties_at_most(t, rest_test::k_float_near_tie_fraction, "llama-spm f32 chains");
    EXPECT_GT(t.long_paths, 60);
}

TEST(verify_greedy, generation_into_n_ctx) {
    lossless_tally t;
    run_cases("llama-spm", 40, 48, t, 3);  // n up to n_ctx: most cases end on the context
    EXPECT_EQ(t.cases, 40);
    rest_test::expect_near_ties_at_most(t, rest_test::k_float_near_tie_fraction, "llama-spm f32 into n_ctx");
}

// A Q8_0 fixture, and a context of two slots of 160 positions each on one thread: with flash attention its rows
// compute bit for bit as a one-slot context's do.
std::unique_ptr<model> q8_fixture() {
    fixture_params fp;
    fp.type = "q8_0";
    return rest_test::load_model(rest_test::fixture_model(fp));
}

context_params two_slots() {
    context_params cp;
    cp.n_ctx     = 2 * 160;
    cp.n_slots   = 2;
    cp.n_threads = 1;
    return cp;
}

bool same_logits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A context per slot (context_params::context_per_slot) decodes each slot's tree in that slot's own context. When one
// slot's context cannot take its tree after another's took its own, the step must leave no trace in either: the
// decoder retries it without drafts, and slot 0's logits then equal a one-slot plain context's, bit for bit. (Without
// the take-back, slot 0's root would already sit in its memory and the retry would put it there twice.)
TEST(verify_greedy, context_per_slot_takes_a_step_back_when_another_slot_cannot_take_its_tree) {
    const auto     m    = q8_fixture();
    context_params cp   = two_slots();
    cp.n_batch          = 64;
    cp.context_per_slot = true;
    auto           ctx  = m->new_context(cp);
    context_params one  = cp;
    one.n_ctx           = 160;
    one.n_slots         = 1;
    auto ref            = m->new_context(one);
    ASSERT_EQ(ctx->n_slots(), 2);
    ASSERT_TRUE(ctx->trees());

    const std::vector<token_id> prompt = {101, 202, 303, 404, 505};
    ctx->prefill(0, prompt);
    ctx->prefill(1, prompt);
    ref->prefill(0, prompt);
    auto chain = [](int n, std::vector<token_id> & t, std::vector<std::int32_t> & par, std::vector<std::int32_t> & dep) {
        for (int i = 0; i < n; ++i) {
            t.push_back(300 + i);
            par.push_back(i - 1);
            dep.push_back(i + 1);
        }
    };
    std::vector<token_id>     t0, t1;
    std::vector<std::int32_t> p0, p1, d0, d1;
    chain(3, t0, p0, d0);
    chain(80, t1, p1, d1);  // 81 rows: more than the 64 a pass of slot 1's context takes
    const token_id root = 7;
    std::vector<tree_request> step = {{0, root, t0, p0, d0}, {1, root, t1, p1, d1}};
    EXPECT_EQ(ctx->decode(step), decode_status::no_memory);

    token_id next = root;
    for (int k = 0; k < 4; ++k) {
        const std::vector<tree_request> plain = {{0, next}, {1, next}};
        const std::vector<tree_request> alone = {{0, next}};
        ASSERT_EQ(ctx->decode(plain), decode_status::ok) << "step " << k;
        ASSERT_EQ(ref->decode(alone), decode_status::ok);
        const auto a = ctx->logits(0, -1), b = ref->logits(0, -1);
        EXPECT_TRUE(same_logits(a, b)) << "slot 0's logits at step " << k;
        next = (token_id) (std::max_element(b.begin(), b.end()) - b.begin());
        ctx->commit(0, {});
        ctx->commit(1, {});
        ref->commit(0, {});
    }
    EXPECT_EQ(ctx->n_past(0), (std::int32_t) prompt.size() + 4);
}

// The chain layout puts a prompt chunk (queue_prefill) in the same llama_decode as the other slots' chains when it has
// as many rows as each (issue 19; llama.cpp then runs one pass with the chains and the chunk, their slots being next
// to each other), and every slot's logits still equal a one-slot plain context's, bit for bit (Q8_0, flash
// attention). A chunk of any other size goes first, in a call of its own. The prompt arrives on the slot above the
// chain's and on the one below (whose rows then come first in the batch, or llama.cpp would run them in a pass of
// their own: llama_decode calls are counted here, not passes, so that order is not observed; the case checks the
// rows' bookkeeping when the prompt goes first).
TEST(verify_greedy, chain_layout_shares_a_step_with_a_prompt_chunk) {
    const auto     m  = q8_fixture();
    context_params cp = two_slots();
    cp.trees          = false;
    context_params one = cp;
    one.n_ctx          = 160;
    one.n_slots        = 1;
    const std::vector<token_id> prompt_a = {101, 202, 303, 404, 505};
    std::vector<token_id>       prompt_b;
    for (int i = 0; i < 40; ++i) prompt_b.push_back(600 + 7 * i);
    for (const auto [sa, sb] : {std::pair{0, 1}, {1, 0}}) {
        SCOPED_TRACE("chain on slot " + std::to_string(sa) + ", prompt on slot " + std::to_string(sb));
        auto ctx = m->new_context(cp);
        ASSERT_FALSE(ctx->trees());
        auto ref_a = m->new_context(one), ref_b = m->new_context(one);
        ctx->prefill(sa, prompt_a);
        ref_a->prefill(0, prompt_a);
        ref_b->prefill(0, prompt_b);
        // A 3-token chain (4 rows) while the prompt arrives in chunks of 4, 6, 2, 4 and the rest.
        const std::vector<token_id>     chain = {11, 12, 13};
        const std::vector<std::int32_t> parents = {-1, 0, 1}, depths = {1, 2, 3};
        const std::vector<int>          chunks = {4, 6, 2, 4, 24};
        const std::vector<int>          calls  = {1, 2, 2, 1, 2};  // llama_decode calls each step takes
        std::size_t                     fed    = 0;
        token_id                        root   = 9;
        for (std::size_t k = 0; k < chunks.size(); ++k) {
            const std::span<const token_id> chunk(prompt_b.data() + fed, (std::size_t) chunks[k]);
            ctx->queue_prefill(sb, chunk);
            const std::vector<tree_request> step  = {{sa, root, chain, parents, depths}};
            const std::vector<tree_request> alone = {{0, root, chain, parents, depths}};
            const std::int64_t f0 = ctx->n_forward();
            ASSERT_EQ(ctx->decode(step), decode_status::ok);
            EXPECT_EQ(ctx->n_forward() - f0, calls[k]) << "step " << k << ", a chunk of " << chunks[k];
            ASSERT_EQ(ref_a->decode(alone), decode_status::ok);
            for (int node = -1; node < 3; ++node) {
                EXPECT_TRUE(same_logits(ctx->logits(0, node), ref_a->logits(0, node))) << "step " << k << " node " << node;
            }
            fed += (std::size_t) chunks[k];
            EXPECT_EQ(ctx->n_past(sb), (std::int32_t) fed);
            ctx->commit(0, {});  // keep the root only
            ref_a->commit(0, {});
            root = (token_id) (20 + k);
        }
        // The prompt's slot holds it as a one-slot prompt pass computed it.
        const std::vector<tree_request> b = {{sb, 77}}, b_ref = {{0, 77}};
        ASSERT_EQ(ctx->decode(b), decode_status::ok);
        ASSERT_EQ(ref_b->decode(b_ref), decode_status::ok);
        EXPECT_TRUE(same_logits(ctx->logits(0, -1), ref_b->logits(0, -1)));
    }
}

}  // namespace
