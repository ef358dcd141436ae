// The budget trace (src/decode/budget-trace.h): with REST_BUDGET_TRACE set, the policies make_budget_policy() builds
// record every step they observe, whole lines, and decide exactly as the policies they wrap.
#include "budget-fixtures.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

using namespace rest;
using namespace rest_test;

// REST_BUDGET_TRACE=FILE: every policy the factory builds appends each step it observes to FILE, and decides exactly
// as the policy it wraps; without it (or where the file cannot be opened) the factory's policy is the policy itself.
TEST(budget_trace, records_every_observed_step_and_decides_as_the_policy_it_wraps) {
    const std::string path = ::testing::TempDir() + "rest-budget-trace.tsv";
    std::remove(path.c_str());
    budget_spec spec;
    spec.costs = k_cpu;
    ::setenv("REST_BUDGET_TRACE", path.c_str(), 1);
    auto traced = make_budget_policy(spec);
    budget_spec fixed_spec;
    fixed_spec.n_fixed = 2;
    auto other  = make_budget_policy(fixed_spec);  // a second policy writing to the same file meanwhile
    ::unsetenv("REST_BUDGET_TRACE");
    auto plain = make_budget_policy(spec);
    ASSERT_EQ(dynamic_cast<online_budget *>(traced.get()), nullptr) << "wrapped";
    ASSERT_NE(dynamic_cast<online_budget *>(plain.get()), nullptr) << "the policy itself";
    traced->observe_warm_up(4);
    plain->observe_warm_up(4);
    traced->observe_other_pass();
    plain->observe_other_pass();
    const draft_tree t = chain(6, 0.8f);
    for (int k = 0; k < 40; ++k) {
        const budget_query q{&t, 10 + k, 6};
        std::int32_t       a = -1, b = -1;
        traced->choose({&q, 1}, {&a, 1});
        plain->choose({&q, 1}, {&b, 1});
        ASSERT_EQ(a, b) << "step " << k;
        const step_report r = step_of(1 + a, 100.0 + 30 * a + k % 3, 2.0, 1 + a / 2, true);
        traced->observe_step(r);
        plain->observe_step(r);
        for (int j = 0; j < 30; ++j) other->observe_step(r);  // lines of its own, long enough to fill buffers
    }
    // Every other decision and getter, as the wrapped policy's.
    EXPECT_EQ(traced->draft_nodes_hint(), plain->draft_nodes_hint());
    EXPECT_EQ(traced->tree_draft_nodes(), plain->tree_draft_nodes());
    EXPECT_EQ(traced->chain_score_min(), plain->chain_score_min());
    EXPECT_EQ(traced->want_draft(1, false), plain->want_draft(1, false));
    EXPECT_EQ(traced->want_draft(3, true), plain->want_draft(3, true));
    for (int rows : {1, 2, 5, 17}) EXPECT_EQ(traced->threads_for(rows, 1), plain->threads_for(rows, 1)) << rows;
    const budget_query qs[2] = {{&t, 50, 6}, {&t, 60, 6}};
    EXPECT_EQ(traced->choose_equal(qs), plain->choose_equal(qs));
    traced->observe_request(true);
    plain->observe_request(true);
    const draft_tree t4 = chain(4, 0.9f);
    const std::int32_t accepted_path[] = {0, 1};
    traced->observe_acceptance(t4, 4, accepted_path);
    plain->observe_acceptance(t4, 4, accepted_path);
    const budget_state st = traced->export_state(), sp = plain->export_state();
    ASSERT_EQ(st.acceptance.size(), sp.acceptance.size());
    for (std::size_t i = 0; i < st.acceptance.size(); ++i) {
        EXPECT_EQ(st.acceptance[i].n, sp.acceptance[i].n) << i;
        EXPECT_EQ(st.acceptance[i].accepted, sp.acceptance[i].accepted) << i;
    }
    EXPECT_EQ(st.shape_values, sp.shape_values);
    traced.reset();  // closes the file
    other.reset();
    std::FILE * f = std::fopen(path.c_str(), "r");
    ASSERT_NE(f, nullptr);
    char line[512];
    int  steps = 0, others = 0, warm = 0, fixed_lines = 0;
    while (std::fgets(line, sizeof line, f)) {
        const std::string s(line);
        if (s.rfind("fixed 2#", 0) == 0) {
            int tab = 0;
            for (char c : s) tab += c == '\t';
            EXPECT_EQ(tab, 12) << "a whole line: " << s;
            ++fixed_lines;
            continue;
        }
        ASSERT_EQ(s.rfind("auto#", 0), 0u) << s;
        if (s.find("\tother") != std::string::npos) ++others;
        else if (s.find("\twarm-up\t4") != std::string::npos) ++warm;
        else {
            ++steps;
            int tab = 0;
            for (char c : s) tab += c == '\t';
            EXPECT_EQ(tab, 12) << s;
            EXPECT_NE(s.find("\t" + std::to_string(steps) + "\t"), std::string::npos) << "numbered: " << s;
        }
    }
    std::fclose(f);
    EXPECT_EQ(steps, 40);
    EXPECT_EQ(others, 1);
    EXPECT_EQ(warm, 1);
    EXPECT_EQ(fixed_lines, 40 * 30);
    std::remove(path.c_str());

    ::setenv("REST_BUDGET_TRACE", "/nonexistent-dir/trace.tsv", 1);
    auto fallback = make_budget_policy(spec);
    ::unsetenv("REST_BUDGET_TRACE");
    EXPECT_NE(dynamic_cast<online_budget *>(fallback.get()), nullptr) << "a file that cannot be opened: no trace";
}
