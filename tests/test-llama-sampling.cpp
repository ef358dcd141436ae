// Sampling is exactly lossless: at every visited tree node the sampler chain draws once from that node's logits and
// the walk follows the child drafted with the drawn token. Drafts are deterministic, so the output distribution
// is the target's. Checked on a fake model with a small vocabulary (bit-identical logits for tree and chain), with
// llama.cpp's real sampler chain:
//   - per seed, speculative output equals plain output (the RNG is consumed once per emitted token either way);
//   - a chi-square two-sample test (alpha = 0.001) of first-3-token sequences, speculative vs independent plain
//     samples, passes; and the same test catches REST's per-path resampling, which is biased towards drafts.
// Configs 4 and 5 draft with the real drafter from the context and a wrong predicted output instead.
#include "fake-model.h"
#include "llama/llama-sampler.h"
#include "rest/drafter.h"
#include "sampling-stats.h"

#include <cmath>
#include <map>
#include <numeric>

using namespace rest;
using rest_test::chi2;
using rest_test::chi2_critical;
using rest_test::fake_target;

namespace {

constexpr int k_vocab = 5;
constexpr int k_len   = 3;

// Drafts the top-3 tokens of the target's logits at the root, each followed by its greedy chain: branchy trees
// that cover most of the probability mass, as a good retrieval drafter would.
class topk_drafter final : public draft_provider {
  public:
    explicit topk_drafter(const fake_target & m) : m_(m) {}
    void reset(std::span<const token_id> p) override { ctx_.assign(p.begin(), p.end()); }
    void accept(std::span<const token_id> t) override { ctx_.insert(ctx_.end(), t.begin(), t.end()); }
    draft_tree draft(int n_budget) override { return make(ctx_, n_budget); }

    draft_tree make(const std::vector<token_id> & ctx, int n_budget) const {
        draft_tree tree;
        const auto l = m_.logits_for(ctx);
        std::vector<int> order(l.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = (int) i;
        std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
        for (int b = 0; b < 3; ++b) {
            std::vector<token_id> p = ctx;
            int parent = -1;
            float score = 0.6f / (b + 1);
            for (int d = 0; d < 3 && (int) tree.size() < n_budget; ++d) {
                const token_id t = d == 0 ? order[b] : argmax(m_.logits_for(p));
                parent = tree.add(t, parent, score, 1);
                p.push_back(t);
                score *= 0.5f;
            }
        }
        return tree;  // parents precede children; the decoder needs nothing more
    }

  private:
    const fake_target & m_;
    std::vector<token_id> ctx_;
};

// Configs 0 and 1 are two sampler chains on a tree-capable model; 2 and 3 the same chains on a chains-only model
// (the CPU default layout), where the decoder verifies each tree's best path; 4 (trees) and 5 (chains) draft from
// the context and a predicted output that is wrong.
sampler_params params_for(int config, std::uint32_t seed) {
    sampler_params p;
    p.seed = seed;
    if (config % 2 == 0) { p.temp = 0.8f; p.top_k = 4; p.top_p = 1.0f; p.min_p = 0.0f; }
    else             { p.temp = 1.3f; p.top_k = 0; p.top_p = 0.9f; p.min_p = 0.02f; }
    return p;
}

std::vector<token_id> run_decoder(int config, std::uint32_t seed, bool speculate) {
    fake_target m(k_vocab, 64, 1, 77, 1.0f);
    m.chains_only_ = config == 2 || config == 3 || config == 5;
    llama_chain_sampler s(k_vocab, params_for(config, seed));
    topk_drafter d(m);
    drafter_params dp;
    dp.use_datastore = dp.use_history = false;
    drafter predicted(nullptr, nullptr, dp);
    static const std::vector<token_id> wrong = {4, 4, 3, 0, 1, 2, 2, 0, 4, 1};
    decoder dec(m, nullptr);
    request r;
    r.params.n_predict = k_len;
    r.params.n_draft_max = 16;
    r.sampler = &s;
    r.draft = !speculate ? nullptr : config >= 4 ? (draft_provider *) &predicted : &d;
    if (config >= 4) r.prediction = wrong;
    const std::vector<token_id> prompt = {1, 2};
    dec.run(r, prompt);
    return r.output;
}

// REST's official scheme, written here only to show the test catches it: every root-to-leaf path draws its own
// samples, and the path that accepts the most wins.
std::vector<token_id> run_rest_style(int config, std::uint32_t seed) {
    fake_target m(k_vocab, 64, 1, 77, 1.0f);
    llama_chain_sampler s(k_vocab, params_for(config, seed));
    topk_drafter d(m);
    std::vector<token_id> ctx = {1, 2}, out;
    while ((int) out.size() < k_len) {
        const draft_tree tree = d.make(ctx, 16);
        std::vector<token_id> best;
        for (size_t leaf = 0; leaf < tree.size(); ++leaf) {
            bool is_leaf = true;
            for (size_t j = 0; j < tree.size(); ++j) is_leaf &= tree.parents[j] != (int) leaf;
            if (!is_leaf) continue;
            std::vector<token_id> path;
            for (int v = (int) leaf; v >= 0; v = tree.parents[v]) path.insert(path.begin(), tree.tokens[v]);
            std::vector<token_id> got, p = ctx;
            for (size_t k = 0; k <= path.size(); ++k) {
                const token_id t = s.sample(m.logits_for(p));
                got.push_back(t);
                if (k == path.size() || t != path[k]) break;
                p.push_back(t);
            }
            if (got.size() > best.size()) best = got;
        }
        for (token_id t : best) {
            s.accept(t);
            out.push_back(t);
            ctx.push_back(t);
        }
    }
    out.resize(k_len);
    return out;
}

int cell(const std::vector<token_id> & t) {
    int c = 0;
    for (int i = 0; i < k_len; ++i) c = c * k_vocab + t[i];
    return c;
}

class sampling_exactness : public ::testing::TestWithParam<int> {};

TEST_P(sampling_exactness, speculative_equals_plain_per_seed_and_in_distribution) {
    const int config = GetParam();
    const int n = 6000;
    std::vector<int> spec(125, 0), plain(125, 0), rest_style(125, 0);
    int same = 0;
    for (int i = 0; i < n; ++i) {
        const auto a = run_decoder(config, 1000 + i, true);
        const auto b = run_decoder(config, 1000 + i, false);
        ASSERT_EQ((int) a.size(), k_len);
        same += a == b;
        ++spec[cell(a)];
        ++plain[cell(run_decoder(config, 5000000 + i, false))];  // independent plain samples
        ++rest_style[cell(run_rest_style(config, 1000 + i))];
    }
    EXPECT_EQ(same, n) << "with the same seed, speculation must reproduce plain sampling exactly";

    const auto [s_ok, df_ok] = chi2(spec, plain);
    const auto [s_bad, df_bad] = chi2(rest_style, plain);
    std::printf("config %d: exact chain walk chi2 = %.1f (df %d, critical %.1f); REST per-path chi2 = %.1f (df %d, "
                "critical %.1f)\n", config, s_ok, df_ok, chi2_critical(df_ok), s_bad, df_bad, chi2_critical(df_bad));
    EXPECT_LT(s_ok, chi2_critical(df_ok)) << "speculative sampling distribution differs from plain";
    EXPECT_GT(s_bad, chi2_critical(df_bad)) << "the test failed to detect REST's per-path resampling bias";
}

INSTANTIATE_TEST_SUITE_P(configs, sampling_exactness, ::testing::Values(0, 1, 2, 3, 4, 5));

}  // namespace
