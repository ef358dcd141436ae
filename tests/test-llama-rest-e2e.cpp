// End-to-end losslessness with the real drafter (datastore + context + history sources) on real llama.cpp
// contexts: speculative greedy output equals plain greedy output, except at a float near-tie of the plain run
// (top-2 logit gap < k_tie_eps), which is checked at the exact divergence point and counted.
//   - stories260K with a tinystories-A datastore on every prompt of tinystories-B (skipped without ../shared/data);
//   - fixture models with a datastore built from their own greedy output (long accepted drafts, KV compaction).
#include "rest/datastore.h"
#include "rest/decoder.h"
#include "rest/drafter.h"
#include "rest/history-store.h"
#include "rest/index-builder.h"
#include "rest/llama-model.h"
#include "test-util.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

using namespace rest;

namespace {

constexpr float k_tie_eps = 1e-2f;

class gap_recorder final : public token_sampler {
  public:
    token_id sample(std::span<const float> l) override {
        float a = -1e30f, b = -1e30f;
        for (float v : l) {
            if (v > a) { b = a; a = v; } else if (v > b) { b = v; }
        }
        gaps.push_back(a - b);
        return argmax(l);
    }
    void accept(token_id) override {}
    bool is_greedy() const override { return true; }
    std::vector<float> gaps;
};

struct outcome {
    std::vector<token_id> tokens;
    std::vector<float>    gaps;
    generation_stats      stats;
};

outcome generate(const model & m, target_model & ctx, std::span<const token_id> prompt, int n, draft_provider * d,
                 budget_policy * policy) {
    gap_recorder s;
    decoder      dec(ctx, policy);
    request      r;
    r.params.n_predict   = n;
    r.params.n_draft_max = d ? 64 : 0;
    r.sampler            = &s;
    r.draft              = d;
    r.is_eog             = [&](token_id t) { return m.is_eog(t); };
    dec.run(r, prompt);
    return {r.output, s.gaps, r.stats};
}

struct tally {
    int    prompts = 0, exact = 0, near_ties = 0;
    double tokens = 0, forwards = 0;
};

void compare(const outcome & plain, const outcome & spec, tally & t, const std::string & what) {
    ++t.prompts;
    t.tokens += (double) spec.stats.n_tokens;
    t.forwards += (double) spec.stats.n_forward;
    const auto mm = std::mismatch(plain.tokens.begin(), plain.tokens.end(), spec.tokens.begin(), spec.tokens.end());
    if (mm.first == plain.tokens.end() && mm.second == spec.tokens.end()) {
        ++t.exact;
        return;
    }
    const size_t k = mm.first - plain.tokens.begin();
    ASSERT_LT(k, plain.gaps.size()) << what << ": outputs differ in length only";
    ASSERT_LT(plain.gaps[k], k_tie_eps) << what << ": divergence at token " << k << " with top-2 gap " << plain.gaps[k];
    ++t.near_ties;
}

TEST(rest_e2e, stories260k_tinystories_all_prompts_b) {
    const std::string data = rest_test::shared_data();
    if (data.empty()) {
        GTEST_SKIP() << "../shared/data is absent";
    }
    const auto m = model::load(data + "/models/stories260K.gguf");
    const std::string idx = rest_test::tmp_dir() + "/tinystories-A.idx";
    corpus_build_params bp;
    bp.corpus.split_paragraphs = true;
    bp.n_threads = 2;
    build_datastore(idx, {data + "/corpora/tinystories-A.txt"}, m->vocab(), bp);
    const auto ds = datastore::open(idx, m->vocab().fingerprint());

    context_params cp;
    cp.n_ctx = 512;
    cp.n_threads = 1;
    auto ctx = m->new_context(cp);
    history_store history;
    fixed_budget  budget(16);

    std::ifstream in(data + "/prompts/tinystories-B.jsonl");
    std::string   line;
    tally         t;
    while (std::getline(in, line)) {
        const auto prompt = m->vocab().tokenize(nlohmann::json::parse(line)["prompt"].get<std::string>(), true, false);
        const outcome plain = generate(*m, *ctx, prompt, 128, nullptr, nullptr);
        drafter d(ds.get(), &history, drafter_params{});
        const outcome spec = generate(*m, *ctx, prompt, 128, &d, &budget);
        compare(plain, spec, t, "prompt " + std::to_string(t.prompts));
        if (HasFatalFailure()) return;
    }
    std::printf("stories260K / tinystories-B: %d prompts, %d identical, %d near-tie divergences, M = %.2f tokens per "
                "forward (budget 16)\n", t.prompts, t.exact, t.near_ties, t.tokens / t.forwards);
    EXPECT_EQ(t.prompts, 106);
    EXPECT_GT(t.tokens / t.forwards, 2.5);
}

TEST(rest_e2e, fixture_datastore_from_its_own_greedy_output) {
    for (const char * vocab : {"llama-spm", "qwen2"}) {
        fixture_params p;
        p.vocab = vocab;
        p.seed  = 11;
        const auto m = model::load(rest_test::fixture_model(p));
        context_params cp;
        cp.n_ctx = 256;
        cp.n_threads = 2;
        auto ctx = m->new_context(cp);
        std::mt19937_64 rng(5);
        std::vector<std::vector<token_id>> prompts, docs;
        std::vector<outcome> plains;
        const int n_prompts = std::string(vocab) == "qwen2" ? 4 : 16;
        for (int i = 0; i < n_prompts; ++i) {
            std::vector<token_id> pr(std::uniform_int_distribution<int>(2, 8)(rng));
            for (auto & tk : pr) tk = std::uniform_int_distribution<int>(100, m->info().n_vocab - 1)(rng);
            plains.push_back(generate(*m, *ctx, pr, 96, nullptr, nullptr));
            std::vector<token_id> doc = pr;
            doc.insert(doc.end(), plains.back().tokens.begin(), plains.back().tokens.end());
            docs.push_back(doc);
            prompts.push_back(pr);
        }
        const std::string idx = rest_test::tmp_dir() + "/own-output-" + vocab + ".idx";
        write_datastore(idx, docs, identity_of(m->vocab()));
        const auto ds = datastore::open(idx, m->vocab().fingerprint());
        history_store history;
        fixed_budget  budget(24);
        tally t;
        for (int i = 0; i < n_prompts; ++i) {
            drafter d(ds.get(), &history, drafter_params{});
            compare(plains[i], generate(*m, *ctx, prompts[i], 96, &d, &budget), t, std::string(vocab) + " " + std::to_string(i));
            if (HasFatalFailure()) return;
        }
        std::printf("%s own-output datastore: %d prompts, %d identical, %d near ties, M = %.2f\n", vocab, t.prompts,
                    t.exact, t.near_ties, t.tokens / t.forwards);
        EXPECT_GT(t.tokens / t.forwards, 4.0) << "drafts from the model's own output should be accepted at length";
    }
}

}  // namespace
