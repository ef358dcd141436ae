// Summaries of a `rest bench` run and the files it writes: results.json, results.md and the small TSV tables
// bench/plot.sh turns into PNGs (speedup.tsv, accept.tsv, cost.tsv).
#pragma once

#include "bench-methods.h"

#include "rest/cost-model.h"
#include "rest/exactness.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace bench {

struct bench_case {
    std::int32_t prompt = 0;   // record index in the prompt file
    std::int32_t turn = 0;     // 0-based turn (MT-Bench: 1 is the second turn)
    std::int32_t n_prompt = 0; // prompt tokens
};

// cells[case][method]; `ran` is false when the case was skipped for every method (e.g. the prompt does not fit).
struct bench_cell {
    bool                    ran = false;
    method_run              run;
    bool                    judged = false;  // verdict holds the strict comparison with plain (greedy runs)
    rest::exactness_verdict verdict;
};

struct method_summary {
    std::string name;
    std::int64_t n_cases = 0;
    std::int64_t n_tokens = 0, n_forward = 0, n_steps = 0, n_drafted = 0, n_accepted = 0;
    std::int64_t n_prediction_accepted = 0, n_prediction_rejected = 0;  // rest+pred methods
    std::int64_t n_recomputed = 0;  // tree layout: accepted tokens decoded again to keep KV cells in order
    double M = 0;               // sum tokens / sum forward passes, prompt chunks included
    double M_prompt_mean = 0;   // mean over cases of per-case M (llama-lookup's reports use this)
    double ms_per_token = 0;    // median over cases of decode-phase ms per token
    double ms_per_token_total = 0;  // sum decode time / sum tokens
    double speedup_median = 0;  // median over cases of plain ms/token over this method's
    double speedup_p25 = 0, speedup_p75 = 0, speedup_min = 0, speedup_max = 0;
    double speedup_total = 0;   // sum plain decode time / sum of this method's (same cases)
    double t_draft_ms_per_step = 0;
    double accepted_per_step = 0;
    std::int64_t n_equal = 0;   // cases whose output equals plain's token for token
    std::int64_t n_compared = 0;
    std::int64_t n_near_tie = 0;  // cases that pass the strict comparison only through near-ties
    std::int64_t n_near_tie_divergences = 0;  // near-ties allowed, summed over cases (a case may have several)
    std::vector<std::int64_t> accept_hist;
    std::vector<std::int64_t> budget_hist;
    std::vector<double>       speedups;  // per case (NaN where not compared)
    std::vector<std::int32_t> first_diff;  // per case: first differing token index, -1 when equal
    std::vector<double>       diff_gap;    // per case: plain's top-2 logit gap at first_diff (NaN when unknown)
};

// Greedy divergences at a plain top-2 logit gap below this, to plain's runner-up, are float near-ties (issue 5's
// allowance), not bugs; the comparison then resumes plain from the method's prefix (rest/exactness.h).
inline constexpr float k_near_tie_eps = 1e-2f;

// Judges every cell of one case against the reference (plain) cell with the strict comparison, greedy runs only:
// after an allowed near-tie, plain is resumed (untimed) by `plain` from the prompt plus the method's prefix.
void judge_case(std::vector<bench_cell> & row, int reference, method_runner & plain,
                std::span<const rest::token_id> prompt, std::int32_t n_predict);

// reference: index of the baseline method (plain), or -1 (then speedups and equality are not computed).
std::vector<method_summary> summarize(const std::vector<method_spec> & methods, const std::vector<bench_case> & cases,
                                      const std::vector<std::vector<bench_cell>> & cells, int reference);

std::string markdown_table(const std::vector<method_summary> & sums, const nlohmann::json & meta);

// The measured cost table as results.json and streams.json record it (the batch grid included).
nlohmann::json cost_table_json(const rest::cost_table & costs);

nlohmann::json results_json(const std::vector<method_summary> & sums, const std::vector<method_spec> & methods,
                            const std::vector<bench_case> & cases, const std::vector<std::vector<bench_cell>> & cells,
                            const rest::cost_table & costs, const nlohmann::json & meta);

// Writes text to dir/name; throws rest::user_error naming the file when it cannot be written whole.
void write_result_file(const std::string & dir, const std::string & name, const std::string & text);

// Writes speedup.tsv, accept.tsv and cost.tsv under dir.
void write_plot_tables(const std::string & dir, const std::vector<method_summary> & sums,
                       const rest::cost_table & costs);

}  // namespace bench
