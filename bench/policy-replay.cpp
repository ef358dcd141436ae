// Budget policies replayed offline against recorded greedy outputs, on a fixed cost model: compares the automatic
// budget with fixed ones without the machine's noise (±5-10% between runs of the same binary here).
//
//   bench-policy-replay -m MODEL.gguf --index A.idx --prompts B.jsonl --generations GEN.jsonl --costs COSTS.txt
//                       [--field prompt] [--budgets 1,2,3,4,6,8] [--draft-us 3,0.4]
//
// Greedy decoding is lossless, so every policy emits the same tokens; only the steps differ. At each step the
// drafter (all sources, the decoder's chain drafting) drafts from the context so far, the policy picks a budget
// as in the decoder (padding included), the chain is accepted as far as it matches the recorded output, and the
// step costs the cost table's steady time for its rows, plus its rebuild time when the rows differ from the last
// step's, plus drafting: A + B x the nodes drafted (--draft-us A,B; the default is bench-draft-acceptance's
// measurement on stories260K: 4.5 us for 4 nodes, 15.6 for 32). The policy is fed those times, so its online
// correction stays at 1.
// COSTS.txt is a cost-cache file (first line "rest-cost 4 ..."; named when a run measures one, in
// $RESTCPP_CACHE_DIR or ~/.cache/rest.cpp, under costs/). Plain
// decoding costs t(1) per token. Prompt processing is left out for every policy alike.
#include "generations.h"
#include "rest/budget.h"
#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/history-store.h"
#include "rest/llama-model.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

using namespace rest;

namespace {

struct outcome {
    double      t_us = 0;
    std::size_t tokens = 0, steps = 0, changes = 0;
};

// Replays every generation under `policy`, whose verified chains are at most cap nodes.
outcome replay(const std::vector<rest_bench::generation> & samples, const datastore & ds, const cost_table & costs,
               budget_policy & policy, std::int32_t cap, double draft_a, double draft_b) {
    history_store hist{};
    drafter       dr(&ds, &hist, drafter_params{});
    outcome       o;
    std::int32_t  last_rows = 0;
    for (const auto & s : samples) {
        dr.reset(s.prompt);
        policy.observe_other_pass();
        last_rows          = 0;
        std::int32_t n_past = (std::int32_t) s.prompt.size();
        for (std::size_t pos = 0; pos < s.output.size();) {
            // The decoder's chain drafting.
            const std::int32_t want    = std::min(cap, policy.draft_nodes_hint());
            const std::int32_t n_draft = chain_tree_nodes(want, INT32_MAX);
            draft_tree         tree    = draft_chain(dr, cap, want, INT32_MAX);
            const budget_query q{&tree, n_past, tree.empty() ? 0 : cap};
            std::int32_t       n = 0;
            policy.choose({&q, 1}, {&n, 1});
            const std::int32_t n_real = std::min<std::int32_t>(n, (std::int32_t) tree.size());
            std::int32_t       a      = 0;
            while (a < n_real && pos + a < s.output.size() && tree.tokens[a] == s.output[pos + a]) ++a;
            const std::int32_t rows = 1 + n;
            const double t = costs.predict_us(rows, n_past) + (rows != last_rows ? costs.rebuild_us : 0.0);
            o.changes += rows != last_rows && last_rows != 0;
            last_rows = rows;
            const double t_draft = draft_a + draft_b * n_draft;
            std::vector<std::int32_t> path(a);
            for (std::int32_t i = 0; i < a; ++i) path[i] = i;
            if (!tree.empty()) policy.observe_acceptance(tree, n_real, path);
            const std::size_t step = std::min<std::size_t>(a + 1, s.output.size() - pos);
            step_report rep;
            rep.n_rows = rows;
            rep.n_requests = 1;
            rep.n_past = n_past;
            rep.t_pass_us = t;
            rep.t_draft_us = t_draft;
            rep.n_tokens = (std::int64_t) step;
            rep.drafted = true;
            policy.observe_step(rep);
            dr.accept(std::span<const token_id>(s.output.data() + pos, step));
            pos += step;
            n_past += (std::int32_t) step;
            o.t_us += t + t_draft;
            o.tokens += step;
            ++o.steps;
        }
        dr.finish();
    }
    return o;
}

}  // namespace

int main(int argc, char ** argv) {
    rest_bench::generations_args args;
    std::string                  costs_path, budgets_arg = "1,2,3,4,6,8";
    double                       draft_a = 3, draft_b = 0.4;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (args.take(a, v)) continue;
        if (a == "--costs") costs_path = v;
        else if (a == "--budgets") budgets_arg = v;
        else if (a == "--draft-us") {
            const auto ab = rest_bench::split(v, ',');
            draft_a       = std::stod(ab.at(0));
            draft_b       = ab.size() > 1 ? std::stod(ab[1]) : 0.0;
        }
        else {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            return 1;
        }
    }
    if (!args.complete() || costs_path.empty()) {
        std::fprintf(stderr, "usage: %s -m MODEL --index IDX --prompts B.jsonl --generations GEN.jsonl --costs FILE "
                             "[--field prompt] [--budgets 1,2,4] [--draft-us A,B]\n", argv[0]);
        return 1;
    }
    try {
        llama_log_quiet();
        std::ifstream cf(costs_path);
        std::string   line;
        std::getline(cf, line);
        const cost_table costs = cost_table::parse(line);
        if (!costs.valid()) {
            std::fprintf(stderr, "error: %s: not a cost table (expected a line \"rest-cost 3 ...\")\n", costs_path.c_str());
            return 1;
        }
        const auto tok     = load_tokenizer(args.model);
        const auto ds      = datastore::open(args.index, tok->fingerprint(), tok->description());
        const auto samples = rest_bench::load_generations(*tok, args.prompts, args.field, args.generations);
        std::size_t n_out   = 0;
        double      t_plain = 0;  // one steady 1-row pass per token, at its context fill
        for (const auto & s : samples) {
            n_out += s.output.size();
            for (std::size_t i = 0; i < s.output.size(); ++i) t_plain += costs.predict_us(1, (std::int32_t) (s.prompt.size() + i));
        }
        std::printf("%zu prompts, %zu tokens; t(1) %.1f us, rebuild %.1f us, drafting %.1f + %.2f us per node\n",
                    samples.size(), n_out, costs.predict_us(1, 0), costs.rebuild_us, draft_a, draft_b);
        std::printf("%-10s %8s %8s %9s %9s\n", "policy", "M", "speedup", "changes", "ms");
        auto report = [&](const std::string & name, const outcome & o) {
            std::printf("%-10s %8.3f %7.3fx %9zu %9.1f\n", name.c_str(), (double) o.tokens / (double) o.steps,
                        t_plain / o.t_us, o.changes, o.t_us / 1000);
        };
        budget_spec automatic;
        automatic.costs = costs;
        report("auto", replay(samples, *ds, costs, *make_budget_policy(automatic), budget_cap(automatic), draft_a, draft_b));
        for (const std::string & b : rest_bench::split(budgets_arg, ',')) {
            budget_spec fixed;
            fixed.n_fixed = std::stoi(b);
            report("fixed " + b, replay(samples, *ds, costs, *make_budget_policy(fixed), fixed.n_fixed, draft_a, draft_b));
        }
    } catch (const std::exception & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
