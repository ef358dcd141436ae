// End-to-end losslessness with the real drafter (datastore + context + history sources) on real llama.cpp
// contexts: speculative greedy output equals plain greedy output, except at a float near-tie of the plain run to its
// runner-up (strict-compare.h), after which the comparison resumes; the near-ties are counted and bounded.
//   - stories260K with a tinystories-A datastore on every prompt of tinystories-B (skipped without ../shared/data);
//   - fixture models with a datastore built from their own greedy output (long accepted drafts, KV compaction).
#include "decode/online-budget.h"
#include "rest/datastore.h"
#include "rest/decoder.h"
#include "rest/drafter.h"
#include "rest/history-store.h"
#include "rest/index-builder.h"
#include "rest/llama-model.h"
#include "strict-compare.h"
#include "test-util.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

using namespace rest;
using rest_test::generate_greedy;
using rest_test::greedy_run;
using rest_test::lossless_tally;

namespace {

// Every prompt of tinystories-B with stories260K and a tinystories-A datastore, on one verification layout.
void stories260k_all_prompts_b(bool trees, int budget_nodes, double min_tokens_per_forward) {
    const std::string data = rest_test::shared_data();
    if (data.empty()) {
        GTEST_SKIP() << "../shared/data is absent";
    }
    const auto m = rest_test::load_model(data + "/models/stories260K.gguf");
    const std::string idx = rest_test::tmp_dir() + "/tinystories-A.idx";
    corpus_build_params bp;
    bp.corpus.split_paragraphs = true;
    bp.n_threads = 2;
    build_datastore(idx, {data + "/corpora/tinystories-A.txt"}, m->vocab(), bp);
    const auto ds = datastore::open(idx, m->vocab().fingerprint());

    context_params cp;
    cp.n_ctx = 512;
    cp.n_threads = 1;
    cp.trees = trees;
    auto ctx = m->new_context(cp);
    history_store history;
    fixed_budget  budget(budget_nodes);

    std::ifstream in(data + "/prompts/tinystories-B.jsonl");
    std::string   line;
    lossless_tally t;
    while (std::getline(in, line)) {
        const auto prompt = m->vocab().tokenize(nlohmann::json::parse(line)["prompt"].get<std::string>(), true, false);
        const greedy_run plain = generate_greedy(*m, *ctx, prompt, 128, nullptr, 0, nullptr);
        drafter d(ds.get(), &history, drafter_params{});
        const greedy_run spec = generate_greedy(*m, *ctx, prompt, 128, &d, 64, &budget);
        rest_test::expect_lossless(plain, spec, t, "prompt " + std::to_string(t.cases),
                                   rest_test::resume_plain(*m, *ctx, prompt, 128));
        if (::testing::Test::HasFatalFailure()) return;
    }
    std::printf("stories260K / tinystories-B, %s: %d prompts, %d identical, %d near-tie divergences, M = %.2f tokens "
                "per forward (budget %d)\n", trees ? "trees" : "chains", t.cases, t.exact, t.near_ties,
                t.tokens_per_forward(), budget_nodes);
    EXPECT_EQ(t.cases, 106);
    rest_test::expect_near_ties_at_most(t, rest_test::k_float_near_tie_fraction, "stories260K (F32)");
    EXPECT_GT(t.tokens_per_forward(), min_tokens_per_forward);
}

TEST(rest_e2e, stories260k_tinystories_all_prompts_b) {
    stories260k_all_prompts_b(true, 16, 2.5);
}

TEST(rest_e2e, stories260k_tinystories_all_prompts_b_chains) {
    stories260k_all_prompts_b(false, 4, 2.0);
}

TEST(rest_e2e, fixture_datastore_from_its_own_greedy_output) {
    for (const char * vocab : {"llama-spm", "qwen2"}) {
        fixture_params p;
        p.vocab = vocab;
        p.seed  = 11;
        const auto m = rest_test::load_model(rest_test::fixture_model(p));
        context_params cp;
        cp.n_ctx = 256;
        cp.n_threads = 1;
        auto ctx = m->new_context(cp);
        std::mt19937_64 rng(5);
        std::vector<std::vector<token_id>> prompts, docs;
        std::vector<greedy_run> plains;
        const int n_prompts = std::string(vocab) == "qwen2" ? 4 : 16;
        for (int i = 0; i < n_prompts; ++i) {
            std::vector<token_id> pr(std::uniform_int_distribution<int>(2, 8)(rng));
            for (auto & tk : pr) tk = std::uniform_int_distribution<int>(100, m->info().n_vocab - 1)(rng);
            plains.push_back(generate_greedy(*m, *ctx, pr, 96, nullptr, 0, nullptr));
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
        lossless_tally t;
        for (int i = 0; i < n_prompts; ++i) {
            drafter d(ds.get(), &history, drafter_params{});
            rest_test::expect_lossless(plains[i], generate_greedy(*m, *ctx, prompts[i], 96, &d, 64, &budget), t,
                                       std::string(vocab) + " " + std::to_string(i),
                                       rest_test::resume_plain(*m, *ctx, prompts[i], 96));
            if (HasFatalFailure()) return;
        }
        std::printf("%s own-output datastore: %d prompts, %d identical, %d near ties, M = %.2f\n", vocab, t.cases,
                    t.exact, t.near_ties, t.tokens_per_forward());
        EXPECT_GT(t.tokens_per_forward(), 4.0) << "drafts from the model's own output should be accepted at length";
        rest_test::expect_near_ties_at_most(t, rest_test::k_float_near_tie_fraction, std::string(vocab) + " f32");
    }
}

}  // namespace
