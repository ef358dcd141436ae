// draft_tree: the flat arrays, best-first truncation and check_integrity(), which must name each violation.
#include "rest/draft-tree.h"

#include <gtest/gtest.h>

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
        {"unknown source", [](draft_tree & t) { t.sources[1] = 8; }, "node 1: source mask 8"},
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
