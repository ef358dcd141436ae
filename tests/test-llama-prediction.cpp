// Predicted outputs end to end on real llama.cpp contexts: whatever the prediction (exact, edited, unrelated, empty,
// longer than the output, as long as the context), greedy output equals plain decoding's token for token, and the
// accepted / rejected counters add up. A quantized fixture in the chain layout is bit-exact (0 differences are
// required); the tree layout (F32) is held to the strict comparison of strict-compare.h.
#include "../apps/bench/edit-workload.h"
#include "decode/online-budget.h"
#include "rest/decoder.h"
#include "rest/drafter.h"
#include "rest/llama-model.h"
#include "strict-compare.h"
#include "test-util.h"

#include <random>

using namespace rest;
using rest_test::greedy_run;

namespace {

struct run_out {
    std::vector<token_id> tokens;
    generation_stats      stats;
};

run_out generate(const model & m, target_model & ctx, std::span<const token_id> prompt, int n,
                 std::span<const token_id> prediction, budget_policy * policy, bool speculate = true,
                 const sampler_params & sp = {}) {
    drafter_params dp;
    dp.use_datastore = false;
    dp.use_history   = false;
    drafter  d(nullptr, nullptr, dp);
    auto     sampler = m.new_sampler(sp);
    decoder  dec(ctx, policy);
    request  r;
    r.params.n_predict   = n;
    r.params.n_draft_max = speculate ? 64 : 0;
    r.sampler            = sampler.get();
    r.draft              = speculate ? &d : nullptr;
    r.prediction         = prediction;
    r.is_eog             = [&](token_id t) { return m.is_eog(t); };
    dec.run(r, prompt);
    return {r.output, r.stats};
}

// A cost table where every extra row costs 10% of a pass: long chains pay when drafts are right.
cost_table cheap_rows() {
    cost_table t;
    for (const std::int32_t rows : {1, 2, 4, 8, 16, 32, 64}) {
        t.rows.push_back(rows);
        t.t_us.push_back(1000.0 + 100.0 * (rows - 1));
    }
    return t;
}

struct case_set {
    std::vector<std::vector<token_id>> prompts, plain, plain_long;
};

case_set make_cases(const model & m, target_model & ctx, int n_prompts, int n) {
    case_set        c;
    std::mt19937_64 rng(3);
    for (int i = 0; i < n_prompts; ++i) {
        std::vector<token_id> pr(std::uniform_int_distribution<int>(2, 8)(rng));
        for (auto & tk : pr) tk = std::uniform_int_distribution<int>(100, m.info().n_vocab - 1)(rng);
        c.prompts.push_back(pr);
        c.plain_long.push_back(generate(m, ctx, pr, 2 * n, {}, nullptr, false).tokens);
        c.plain.push_back(std::vector<token_id>(c.plain_long.back().begin(),
                                                c.plain_long.back().begin() + std::min<std::size_t>(n, c.plain_long.back().size())));
    }
    return c;
}

// A fixture model of this weight type and a 256-position context on one thread, in the given layout.
struct fixture_setup {
    std::unique_ptr<model>        m;
    std::unique_ptr<target_model> ctx;
};

fixture_setup open_fixture(const std::string & type, std::uint32_t seed, bool trees, float output_scale = 8.0f) {
    fixture_params fp;
    fp.type         = type;
    fp.seed         = seed;
    fp.output_scale = output_scale;
    fixture_setup f;
    f.m = rest_test::load_model(rest_test::fixture_model(fp));
    context_params cp;
    cp.n_ctx     = 256;
    cp.n_threads = 1;
    cp.trees     = trees;
    f.ctx        = f.m->new_context(cp);
    return f;
}

void lossless_with_every_prediction(const std::string & type, bool trees) {
    const fixture_setup f   = open_fixture(type, 21, trees);
    const auto &        m   = f.m;
    const auto &        ctx = f.ctx;
    const int           n   = 96;
    const case_set c   = make_cases(*m, *ctx, 6, n);

    fixed_budget                    fixed(16);
    auto                            online = make_budget_policy(budget_spec{true, -1, 64, cheap_rows(), nullptr});
    std::vector<token_id>           whole_window;  // as many tokens as the context holds
    while ((std::int32_t) whole_window.size() < ctx->n_ctx_slot()) {
        whole_window.insert(whole_window.end(), c.plain_long[0].begin(), c.plain_long[0].end());
    }
    whole_window.resize((std::size_t) ctx->n_ctx_slot());
    int n_differ = 0;
    std::vector<double> m_exact[2];  // M with an exact prediction: automatic, fixed
    for (std::size_t i = 0; i < c.prompts.size(); ++i) {
        const std::vector<std::pair<std::string, std::vector<token_id>>> predictions = {
            {"exact", c.plain[i]},
            {"2 edits/128", bench::random_edits(c.plain[i], 2, m->info().n_vocab, 7 + (std::uint32_t) i)},
            {"8 edits/128", bench::random_edits(c.plain[i], 8, m->info().n_vocab, 9 + (std::uint32_t) i)},
            {"unrelated", c.plain[(i + 1) % c.plain.size()]},
            {"empty", {}},
            {"longer than the output", c.plain_long[i]},
            {"the whole context window", whole_window},
        };
        for (const auto & [what, pred] : predictions) {
            for (budget_policy * policy : {(budget_policy *) &fixed, online.get()}) {
                const run_out r = generate(*m, *ctx, c.prompts[i], n, pred, policy);
                const std::string where = type + (trees ? " tree" : " chain") + ", prompt " + std::to_string(i) +
                                          ", prediction " + what + (policy == &fixed ? ", fixed 16" : ", automatic");
                if (r.tokens != c.plain[i]) {
                    ++n_differ;
                    const auto plain = rest_test::generate_greedy(*m, *ctx, c.prompts[i], n, nullptr, 0, nullptr);
                    const auto v     = compare_to_plain(plain.trace(), r.tokens, rest_test::k_tie_eps,
                                                        rest_test::resume_plain(*m, *ctx, c.prompts[i], n));
                    EXPECT_TRUE(v.ok) << where << ": " << v.why;
                }
                if (!trees) EXPECT_EQ(r.tokens, c.plain[i]) << where;
                EXPECT_LE(r.stats.n_prediction_accepted + r.stats.n_prediction_rejected, r.stats.n_drafted) << where;
                EXPECT_LE(r.stats.n_prediction_accepted, r.stats.n_accepted) << where;
                if (what == "empty") EXPECT_EQ(r.stats.n_prediction_accepted + r.stats.n_prediction_rejected, 0) << where;
                if (what == "exact" || what == "longer than the output") {
                    // Only the first token of the output is not drafted from an exact prediction.
                    EXPECT_GE(r.stats.n_prediction_accepted, (std::int64_t) r.tokens.size() - 1 - (std::int64_t) r.stats.n_steps) << where;
                    // Fixed: 16-node chains, nearly all accepted. Automatic: what the measured costs make pay,
                    // judged on the median below (one run's M moves with the machine's load: once 1.5 here).
                    if (policy == &fixed) EXPECT_GT(r.stats.tokens_per_forward(), 8.0) << where;
                    m_exact[policy == &fixed].push_back(r.stats.tokens_per_forward());
                }
            }
        }
    }
    auto median = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v.empty() ? 0.0 : v[v.size() / 2]; };
    std::printf("%s %s: %d of %zu runs differ from plain; M with an exact prediction: automatic %.2f, fixed 16 %.2f\n",
                type.c_str(), trees ? "tree" : "chain", n_differ, c.prompts.size() * 14, median(m_exact[0]), median(m_exact[1]));
    if (trees) EXPECT_LE(n_differ, 2) << "tree layout: more differences than float near-ties explain";
    EXPECT_GT(median(m_exact[0]), 2.5) << "the automatic budget does not use an exact prediction";
}

TEST(prediction_e2e, q8_chain_layout_every_prediction_is_bit_exact) {
    lossless_with_every_prediction("q8_0", false);
}

TEST(prediction_e2e, q4_chain_layout_every_prediction_is_bit_exact) {
    lossless_with_every_prediction("q4_0", false);
}

TEST(prediction_e2e, f32_tree_layout_every_prediction) {
    lossless_with_every_prediction("f32", true);
}

// With sampling, a prediction changes only what is drafted: the same seed gives the same text with or without it
// (the chain layout on a quantized model computes bit-identical logits).
TEST(prediction_e2e, sampling_same_seed_same_text_with_any_prediction) {
    const fixture_setup f   = open_fixture("q8_0", 22, false, 2.0f);  // flatter logits: sampling has choices to make
    const auto &        m   = f.m;
    const auto &        ctx = f.ctx;
    fixed_budget        fixed(8);
    int        n_cases = 0;
    for (std::uint32_t seed = 1; seed <= 6; ++seed) {
        sampler_params sp;
        sp.temp  = 0.8f;
        sp.top_p = 0.95f;
        sp.seed  = seed;
        const std::vector<token_id> prompt = {1, 300, 301, 302};
        const run_out plain = generate(*m, *ctx, prompt, 64, {}, nullptr, false, sp);
        const auto    edited = bench::random_edits(plain.tokens, 8, m->info().n_vocab, seed);
        for (const auto & pred : {plain.tokens, edited, std::vector<token_id>(64, 500)}) {
            const run_out spec = generate(*m, *ctx, prompt, 64, pred, &fixed, true, sp);
            EXPECT_EQ(spec.tokens, plain.tokens) << "seed " << seed;
            ++n_cases;
        }
        // The exact prediction is accepted: that is what the sampled output was.
        EXPECT_GT(generate(*m, *ctx, prompt, 64, plain.tokens, &fixed, true, sp).stats.n_prediction_accepted, 32);
    }
    EXPECT_EQ(n_cases, 18);
}

}  // namespace
