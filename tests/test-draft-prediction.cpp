// The prediction source (src/draft/prediction-source.h) against the brute-force alignment of tests/ref, on random
// edits of random predictions, and the cases the alignment rule is written for.
#include "../apps/bench/edit-workload.h"
#include "../src/draft/prediction-source.h"
#include "rest/drafter.h"

#include "ref/ref-draft.h"

#include <gtest/gtest.h>

#include <random>

using namespace rest;

namespace {

// Feeds out in random chunks (as accepted drafts arrive) and checks s and m after every chunk.
void expect_matches_reference(std::mt19937 & rng, const std::vector<token_id> & pred, const std::vector<token_id> & out,
                              int n_max) {
    const auto        ref = rest_ref::naive_prediction_align(pred, out, n_max);
    prediction_source src(n_max);
    src.reset(pred);
    EXPECT_EQ(src.start(), 0);
    std::uniform_int_distribution<std::size_t> chunk(1, 6);
    for (std::size_t at = 0; at < out.size();) {
        const std::size_t n = std::min(out.size() - at, chunk(rng));
        src.append(std::span(out).subspan(at, n));
        at += n;
        ASSERT_EQ(src.start(), ref.start[at - 1]) << "after " << at << " output tokens";
        ASSERT_EQ(src.match_len(), ref.len[at - 1]) << "after " << at << " output tokens";
    }
}

}  // namespace

TEST(PredictionSource, RandomEditsMatchNaiveAlignment) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 300; ++trial) {
        const int n_vocab = trial % 3 == 0 ? 4 : trial % 3 == 1 ? 30 : 1000;
        const int n_max   = trial % 4 == 0 ? 2 : 32;
        const auto pred   = rest_ref::random_documents(rng, 1, 120, n_vocab)[0];
        const auto out    = bench::random_edits(pred, 4 * (trial % 9), n_vocab, (std::uint32_t) trial);
        expect_matches_reference(rng, pred, out, n_max);
    }
}

TEST(PredictionSource, UnrelatedOutputMatchesNaiveAlignment) {
    std::mt19937 rng(12);
    for (int trial = 0; trial < 100; ++trial) {
        const auto pred = rest_ref::random_documents(rng, 1, 80, 50)[0];
        const auto out  = rest_ref::random_documents(rng, 1, 80, 50)[0];
        expect_matches_reference(rng, pred, out, 32);
    }
}

// p = 0 1 2 ... 19: the place after an edit is the one the edit leaves.
TEST(PredictionSource, RealignsAfterInsertionDeletionSubstitution) {
    std::vector<token_id> pred;
    for (token_id t = 0; t < 20; ++t) pred.push_back(t);
    auto run = [&](std::vector<token_id> out) {
        prediction_source src;
        src.reset(pred);
        src.append(out);
        return src.start();
    };
    EXPECT_EQ(run({0, 1, 2, 3}), 4);
    EXPECT_EQ(run({0, 1, 2, 100, 101, 102}), 6);  // inserted tokens that occur nowhere: s moves on, one per token
    EXPECT_EQ(run({0, 1, 2, 100, 101, 3}), 4);    // ... and snaps back when the text resumes
    EXPECT_EQ(run({0, 1, 2, 7}), 8);              // deletion of 3..6
    EXPECT_EQ(run({0, 1, 2, 100}), 4);            // substitution of 3: the draft goes on with 4
    EXPECT_EQ(run({0, 1, 2, 100, 4}), 5);
    EXPECT_EQ(run({0, 1, 2, 9}), 10);             // a token from nearby (a deletion of 3..8): its occurrence
    EXPECT_EQ(run({0, 1, 2, 15}), 4);             // one token from far away is no evidence: a substitution
    EXPECT_EQ(run({0, 1, 2, 15, 16}), 17);        // two are: the text jumped there
    EXPECT_EQ(run(pred), 20);                     // at the end: an empty draft
    EXPECT_EQ(run({0, 1, 2, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117}), 20);
}

// A prediction that repeats itself: the source stays on the repetition it follows, and after an edit it re-finds
// the nearest one, not the first.
TEST(PredictionSource, RepeatingPredictionKeepsItsPlace) {
    const std::vector<token_id> unit = {5, 6, 7, 8};
    std::vector<token_id>       pred;
    for (int r = 0; r < 6; ++r) pred.insert(pred.end(), unit.begin(), unit.end());
    prediction_source src(3);
    src.reset(pred);
    for (std::size_t i = 0; i < 13; ++i) {
        src.append(std::span(pred).subspan(i, 1));
        EXPECT_EQ(src.start(), (std::int64_t) i + 1);
    }
    // Output: 13 tokens of the prediction, then 7 where 6 was expected (a deletion of one token): the nearest 7 is
    // the one after it (index 14), not the first one in the prediction.
    src.append(std::vector<token_id>{7});
    EXPECT_EQ(src.start(), 15);
    std::mt19937 rng(13);
    expect_matches_reference(rng, pred, bench::random_edits(pred, 16, 9, 5), 3);
}

TEST(PredictionSource, DraftIsTheChainFromTheStart) {
    const std::vector<token_id> pred = {3, 1, 4, 1, 5, 9, 2, 6};
    prediction_source           src;
    src.reset(pred);
    cand_tree t;
    src.draft(5, t);
    ASSERT_EQ(t.nodes.size(), 5u);
    for (std::size_t i = 0; i < t.nodes.size(); ++i) {
        EXPECT_EQ(t.nodes[i].token, pred[i]);
        EXPECT_EQ(t.nodes[i].parent, (std::int32_t) i - 1);
        EXPECT_EQ(t.nodes[i].depth, (std::int32_t) i + 1);
        if (i > 0) EXPECT_LT(t.nodes[i].score, t.nodes[i - 1].score);
    }
    const double before = src.conditional_score(src.run());
    src.append(std::vector<token_id>{3, 1, 4});
    EXPECT_EQ(src.run(), 3);
    EXPECT_GT(src.conditional_score(src.run()), before);  // a prediction that was right is trusted more
    src.draft(64, t);
    ASSERT_EQ(t.nodes.size(), 5u);  // cut at the prediction's end
    EXPECT_EQ(t.nodes[0].token, 1);
    src.reset({});
    EXPECT_FALSE(src.active());
    src.append(std::vector<token_id>{1, 2});
    EXPECT_TRUE(src.draft(8, t).nodes.empty());
}

TEST(PredictionSource, TrustedUntilItsTokensSayOtherwise) {
    // A caller's prediction is trusted from its first token (an even prior lost the best path to the datastore's
    // drafts for an exact prediction's first 6-15 steps), and an unrelated one sinks within a few tokens.
    const std::vector<token_id> pred = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
    prediction_source           src;
    src.reset(pred);
    EXPECT_GT(src.conditional_score(0), 0.8);
    src.append(std::vector<token_id>{40, 41, 42});  // none of them in the prediction
    EXPECT_EQ(src.run(), 0);
    EXPECT_LT(src.conditional_score(src.run()), 0.3);
}

// The drafter merges the prediction's chain with the context's: a valid tree whose best path is the prediction, with
// the prediction's source bit, and the prediction ends with the request.
TEST(PredictionSource, DrafterMergesThePredictionIntoAValidTree) {
    drafter_params p;
    p.use_datastore = p.use_history = false;
    drafter d(nullptr, nullptr, p);
    const std::vector<token_id> prompt = {1, 2, 3, 1, 2, 3, 1, 2};
    const std::vector<token_id> pred   = {7, 8, 9, 10, 11, 12};
    d.reset(prompt);
    d.set_prediction(pred);
    EXPECT_TRUE(d.has_prediction());
    d.accept(std::vector<token_id>{7, 8, 9});
    draft_tree t = d.draft(16);
    EXPECT_EQ(t.check_integrity(), "");
    bool has_pred = false;
    for (const auto m : t.sources) has_pred = has_pred || (m & (std::uint8_t) draft_source::prediction);
    EXPECT_TRUE(has_pred);
    t.keep_best_path();
    ASSERT_GE(t.size(), 3u);
    EXPECT_EQ(t.tokens[0], 10);
    EXPECT_EQ(t.tokens[2], 12);
    d.accept(std::vector<token_id>{10, 11, 12});
    EXPECT_FALSE(d.has_prediction()) << "a prediction used up is no longer one";
    d.reset(prompt);
    EXPECT_FALSE(d.has_prediction()) << "reset() clears the prediction";
}

// A chain that follows the prediction goes on along it beyond what the hint (want) asks of the tree, to
// min(cap, room, n_budget_max, k_chain_nodes_max), with non-increasing scores whose conditionals are the prediction's; a chain that
// left the prediction is not extended.
TEST(PredictionSource, ChainFollowingThePredictionGoesOnAlongIt) {
    drafter_params p;
    p.use_datastore = p.use_history = false;
    p.n_budget_max                  = 24;
    drafter d(nullptr, nullptr, p);
    std::vector<token_id> pred;
    for (int i = 0; i < 40; ++i) pred.push_back(100 + i);
    d.reset(std::vector<token_id>{1, 2, 3});
    d.set_prediction(pred);
    d.accept(std::vector<token_id>{100, 101});
    const draft_tree c = d.draft_chain(64, 1, 1000, 0.0f);  // want 1: the tree alone gives chain_tree_nodes(1) = 4
    EXPECT_EQ(c.check_integrity(), "");
    ASSERT_EQ(c.size(), 24u) << "cut at n_budget_max";
    for (std::size_t i = 0; i < c.size(); ++i) {
        EXPECT_EQ(c.tokens[i], 102 + (token_id) i);
        EXPECT_EQ(c.parents[i], (std::int32_t) i - 1);
    }
    EXPECT_NEAR(c.scores[5] / c.scores[4], 1.0, 0.3);  // the prediction's conditional, not a cut
    EXPECT_EQ(d.draft_chain(10, 1, 1000, 0.0f).size(), 10u) << "cut at cap";
    drafter_params q = p;
    q.n_budget_max   = 64;
    drafter g(nullptr, nullptr, q);
    g.reset(std::vector<token_id>{1, 2, 3});
    g.set_prediction(pred);
    EXPECT_EQ(g.draft_chain(64, 1, 1000, 0.0f).size(), (std::size_t) k_chain_nodes_max) << "a chain stays under 64 rows";
    EXPECT_EQ(d.draft_chain(64, 1, 7, 0.0f).size(), 7u) << "cut at the room left";

    // The context says 5 follows 4 (twice); the prediction is unrelated and wrong so far: the best path leaves it.
    drafter e(nullptr, nullptr, p);
    e.reset(std::vector<token_id>{4, 5, 6, 4, 5, 6, 4});
    e.set_prediction(std::vector<token_id>{50, 51, 52, 53, 54, 55, 56, 57, 58, 59});
    e.accept(std::vector<token_id>{5, 6, 4});  // three misses: the prediction's scores sink
    const draft_tree f = e.draft_chain(64, 1, 1000, 0.0f);
    ASSERT_FALSE(f.empty());
    EXPECT_EQ(f.tokens[0], 5);
    EXPECT_LE(f.size(), 4u) << "a chain that left the prediction is not extended";
}
