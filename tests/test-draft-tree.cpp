// draft_tree: the flat arrays, best-first truncation and check_integrity(), which must name each violation.
#include "rest/draft-tree.h"

#include <gtest/gtest.h>

#include <random>

using namespace rest;

namespace {

constexpr std::uint8_t ds  = static_cast<std::uint8_t>(draft_source::datastore);
constexpr std::uint8_t ctx = static_cast<std::uint8_t>(draft_source::context);

draft_tree sample() {
    draft_tree t;
    t.add(10, -1, 0.8f, ds);        // 0
    t.add(11, 0, 0.6f, ds | ctx);   // 1
    t.add(12, -1, 0.2f, ctx);       // 2
    t.add(13, 1, 0.2f, ds);         // 3
    t.add(14, 2, 0.1f, ctx);        // 4
    return t;
}

}  // namespace

TEST(draft_tree, add_sets_depths_and_parents) {
    const draft_tree t = sample();
    ASSERT_EQ(t.size(), 5u);
    EXPECT_EQ(t.depths, (std::vector<std::int32_t>{1, 2, 1, 3, 2}));
    EXPECT_EQ(t.parents, (std::vector<std::int32_t>{-1, 0, -1, 1, 2}));
    EXPECT_EQ(t.check_integrity(), "");
}

TEST(draft_tree, expected_accepted_and_leaves_per_prefix) {
    const draft_tree t = sample();
    EXPECT_NEAR(t.expected_accepted(2), 1.4, 1e-6);
    EXPECT_NEAR(t.expected_accepted(100), 1.9, 1e-6);
    EXPECT_EQ(t.n_leaves(0), 0u);
    EXPECT_EQ(t.n_leaves(1), 1u);
    EXPECT_EQ(t.n_leaves(3), 2u);  // 1 and 2
    EXPECT_EQ(t.n_leaves(5), 2u);  // 3 and 4
}

TEST(draft_tree, every_prefix_is_valid) {
    const draft_tree t = sample();
    for (std::size_t n = 0; n <= t.size(); ++n) {
        draft_tree p = t;
        p.truncate(n);
        EXPECT_EQ(p.size(), n);
        EXPECT_EQ(p.check_integrity(), "") << "prefix " << n;
    }
    draft_tree c = t;
    c.clear();
    EXPECT_TRUE(c.empty());
    EXPECT_EQ(c.check_integrity(), "");
}

TEST(draft_tree, check_integrity_names_each_violation) {
    struct breakage {
        const char * what;
        void (*mutate)(draft_tree &);
        const char * expect;
    };
    const breakage cases[] = {
        {"sizes", [](draft_tree & t) { t.scores.pop_back(); }, "array sizes differ"},
        {"parent after", [](draft_tree & t) { t.parents[1] = 3; }, "node 1: parent 3 does not precede it"},
        {"parent self", [](draft_tree & t) { t.parents[2] = 2; }, "node 2: parent 2 does not precede it"},
        {"bad depth", [](draft_tree & t) { t.depths[3] = 2; }, "node 3: depth 2, expected 3"},
        {"negative token", [](draft_tree & t) { t.tokens[4] = -1; }, "node 4: token -1"},
        {"sibling repeat", [](draft_tree & t) { t.tokens[2] = 10; }, "node 2: token 10 repeats a sibling"},
        {"score > 1", [](draft_tree & t) { t.scores[0] = 1.5f; }, "node 0: score 1.5"},
        {"child beats parent", [](draft_tree & t) { t.scores[4] = 0.3f; t.scores[2] = 0.25f; }, "exceeds its parent"},
        {"not best-first", [](draft_tree & t) { t.scores[3] = 0.15f; t.scores[4] = 0.15f; t.scores[2] = 0.1f; }, "not best-first"},
        {"no source", [](draft_tree & t) { t.sources[1] = 0; }, "node 1: source mask 0"},
        {"unknown source", [](draft_tree & t) { t.sources[1] = 16; }, "node 1: source mask 16"},
    };
    for (const breakage & b : cases) {
        draft_tree t = sample();
        b.mutate(t);
        const std::string msg = t.check_integrity();
        EXPECT_NE(msg.find(b.expect), std::string::npos) << b.what << ": got '" << msg << "'";
    }
}

TEST(draft_tree, format_is_depth_first) {
    const draft_tree  t = sample();
    const std::string s = format_draft_tree(t, [](token_id x) { return "t" + std::to_string(x); });
    EXPECT_EQ(s, "#0 't10' 0.800 [d]\n"
                 "  #1 't11' 0.600 [dc]\n"
                 "    #3 't13' 0.200 [d]\n"
                 "#2 't12' 0.200 [c]\n"
                 "  #4 't14' 0.100 [c]\n");
}

TEST(draft_tree, keep_best_path_of_the_sample) {
    draft_tree t = sample();
    t.keep_best_path();
    EXPECT_EQ(t.tokens, (std::vector<token_id>{10, 11, 13}));
    EXPECT_EQ(t.parents, (std::vector<std::int32_t>{-1, 0, 1}));
    EXPECT_EQ(t.sources, (std::vector<std::uint8_t>{ds, ds | ctx, ds}));
    EXPECT_EQ(t.check_integrity(), "");
}

TEST(draft_tree, keep_best_path_equals_a_naive_walk_on_random_trees) {
    std::mt19937 rng(5);
    for (int c = 0; c < 500; ++c) {
        // A random best-first tree: each new node hangs under a random earlier node (or the root) with a score no
        // larger than the previous node's, so scores are non-increasing in array order and along every path.
        draft_tree t;
        float s = 1.0f;
        const int n = std::uniform_int_distribution<int>(0, 40)(rng);
        for (int i = 0; i < n; ++i) {
            const int parent = std::uniform_int_distribution<int>(-1, i - 1)(rng);
            s *= std::uniform_real_distribution<float>(0.5f, 1.0f)(rng);
            t.add(1000 + i, parent, s, ds);
        }
        // Naive: from the root, repeatedly take the child with the highest score (the lowest index on ties).
        std::vector<token_id> want;
        for (int cur = -1;;) {
            int best = -1;
            for (int i = 0; i < (int) t.size(); ++i) {
                if (t.parents[i] == cur && (best < 0 || t.scores[i] > t.scores[best])) best = i;
            }
            if (best < 0) break;
            want.push_back(t.tokens[best]);
            cur = best;
        }
        draft_tree p = t;
        p.keep_best_path();
        ASSERT_EQ(p.tokens, want) << "case " << c;
        for (int i = 0; i < (int) p.size(); ++i) ASSERT_EQ(p.parents[i], i - 1);
        ASSERT_EQ(p.check_integrity(), "") << "case " << c;
    }
}
