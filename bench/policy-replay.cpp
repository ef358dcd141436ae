// Budget policies replayed offline against recorded greedy outputs, on a fixed cost model: compares the automatic
// budget with fixed ones without the machine's noise (±5-10% between runs of the same binary here).
//
//   bench-policy-replay -m MODEL.gguf --index A.idx --prompts B.jsonl --generations GEN.jsonl --costs COSTS.txt
//                       [--field prompt] [--budgets 1,2,3,4,6,8] [--draft-us 3,0.4] [--thresholds 0.5,0.2,0.1]
//                       [--chain-grow 0|1] [--backoff-levels N] [--backoff-confident N] [--sources dch]
//                       [--alpha DS,CTX,HIST] [--match MIN,MAX]
//                       [--true-costs FILE] [--jitter SIGMA] [--seed N] [--cold-us US] [--warm-rows N] [--warm-told N]
//
// Greedy decoding is lossless, so every policy emits the same tokens; only the steps differ. At each step where the
// policy wants a draft (else the step is plain, without drafting), the drafter (all sources, the decoder's chain
// drafting) drafts from the context so far, the policy picks a budget as in the decoder (padding included), the
// chain is accepted as far as it matches the recorded output, and the step costs the cost table's steady time for its rows, plus its rebuild time when the rows differ from the last
// step's, plus drafting: A + B x the nodes drafted (--draft-us A,B; the default is bench-draft-acceptance's
// measurement on stories260K: 4.5 us for 4 nodes, 15.6 for 32). The policy is fed those times, so its online
// correction stays at 1. Besides M it reports the mean verified rows per step (root + nodes, padding included: the
// verify cost), chain nodes drafted and measured drafting microseconds per step, so methods compare at equal verify cost; --thresholds adds points
// that verify whole chains (at most 32 nodes, no padding) grown while the drafter's score stays >= each value;
// --chain-grow 0 drafts chains as the best path of a tree (the way before), --backoff-levels 1 turns back-off off.
// COSTS.txt is a cost-cache file (first line "rest-cost 4 ..."; named when a run measures one, in
// $RESTCPP_CACHE_DIR or ~/.cache/rest.cpp, under costs/). Plain
// decoding costs t(1) per token. Prompt processing is left out for every policy alike.
// The machine can differ from what the policy expects, as real ones do: --true-costs charges steps from another
// table than the policy's prior (two start-up measurements of one model differ by 5-30% per shape); --jitter
// multiplies each pass's time by a lognormal of mean 1 (--seed); --cold-us charges a shape's first pass in the
// process that much more (each policy runs as one process over all prompts), except shapes of up to --warm-rows
// rows, which the decoder's warm-up ran (rest bench's warm-up marks them seen too; --warm-told: the policy is told
// another count, as where one large pass does not warm every smaller shape). Fixed budgets pay the same.
#include "generations.h"
#include "rest/budget.h"
#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/history-store.h"
#include "rest/llama-model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <cmath>
#include <string>
#include <vector>

using namespace rest;

namespace {

struct outcome {
    double      t_us = 0;
    std::size_t tokens = 0, steps = 0, changes = 0;
    std::size_t rows = 0;     // verified rows (root + nodes, padding included), summed over steps
    std::size_t drafted = 0;  // chain nodes drafted, summed over steps
    double      draft_us = 0; // measured drafting time (the drafter's own clock), summed over steps
    double      policy_us = 0; // measured time of the policy's choices, summed over steps
};

// Verifies every node the chain has (no padding): a chain then ends where the drafter's estimate falls below
// score_min, as llama.cpp's n-gram drafters end theirs where their statistics stop being confident. The drafter
// keeps the nodes a policy may take whatever their scores, so replay() cuts these chains itself (cut_at_score).
class whole_chain final : public budget_policy {
  public:
    whole_chain(std::int32_t n_max, float score_min) : n_max_(n_max), score_min_(score_min) {}
    void choose(std::span<const budget_query> qs, std::span<std::int32_t> n_out) override {
        // The drafter keeps a chain's first node whatever its score; a drafter that stops where its statistics do
        // would not have proposed it.
        for (std::size_t i = 0; i < qs.size(); ++i) {
            const draft_tree & t = *qs[i].tree;
            n_out[i] = t.empty() || t.scores[0] < score_min_ ? 0 : std::min((std::int32_t) t.size(), n_max_);
        }
    }
    std::int32_t draft_nodes_hint() const override { return n_max_; }
    float        chain_score_min() const override { return score_min_; }

  private:
    std::int32_t n_max_;
    float        score_min_;
};

// The machine the replay charges steps on.
struct machine {
    cost_table   costs;              // the true steady times (the policy's prior is --costs; --true-costs: these)
    double       draft_a = 3, draft_b = 0.4;  // drafting: A + B x nodes drafted, microseconds
    double       cold_us = 0;        // a shape's first pass in the process costs this much more ...
    std::int32_t warm_rows = 0;      // ... but for shapes of up to these rows (the decoder's warm-up ran them)
    std::int32_t warm_told = -1;     // the rows the policy is told the warm-up warmed (-1: warm_rows)
    double       jitter = 0;         // each pass's time times a mean-1 lognormal of this sigma
    unsigned     seed = 1;           // of the jitter
};

// Replays every generation under `policy`, whose verified chains are at most cap nodes.
double us_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

outcome replay(const std::vector<rest_bench::generation> & samples, const datastore & ds, const machine & mc,
               budget_policy & policy, std::int32_t cap, const drafter_params & dp, bool cut_at_score = false) {
    history_store hist{};
    std::mt19937  rng(mc.seed);
    std::normal_distribution<double> gauss(0.0, 1.0);
    std::vector<char> ran((std::size_t) cap + 2, 0);  // [rows]: a pass of that shape ran in this process
    for (std::int32_t r = 1; r <= std::min(mc.warm_rows, cap + 1); ++r) ran[(std::size_t) r] = 1;
    policy.observe_warm_up(mc.warm_told >= 0 ? mc.warm_told : mc.warm_rows);
    drafter       dr(&ds, &hist, dp);
    outcome       o;
    std::int32_t  last_rows = 0;
    for (const auto & s : samples) {
        dr.reset(s.prompt);
        policy.observe_other_pass();
        last_rows          = 0;
        std::int32_t n_past = (std::int32_t) s.prompt.size();
        for (std::size_t pos = 0; pos < s.output.size();) {
            // The decoder's chain drafting, where the policy wants a draft (else a plain step, no drafting).
            const bool   drafting = policy.want_draft(1, false);
            draft_tree   tree;
            std::int32_t n_draft = 0, n = 0;
            if (drafting) {
                const auto         t_p0      = std::chrono::steady_clock::now();
                const std::int32_t want      = std::min(cap, policy.draft_nodes_hint());
                const float        score_min = policy.chain_score_min();
                o.policy_us += us_since(t_p0);
                const auto t_d0 = std::chrono::steady_clock::now();
                tree            = draft_chain(dr, cap, want, INT32_MAX, score_min);
                o.draft_us += us_since(t_d0);
                n_draft = dp.chain_grow ? (std::int32_t) tree.size() : chain_tree_nodes(want, INT32_MAX);
                if (cut_at_score) {  // a drafter that stops there: the nodes up to the first below it
                    std::size_t keep = tree.empty() ? 0 : 1;
                    while (keep < tree.size() && tree.scores[keep] >= score_min) ++keep;
                    n_draft = std::min<std::int32_t>(n_draft, (std::int32_t) keep + 1);
                    tree.truncate(keep);
                }
                const budget_query q{&tree, n_past, tree.empty() ? 0 : cap};
                const auto         t_c0 = std::chrono::steady_clock::now();
                policy.choose({&q, 1}, {&n, 1});
                o.policy_us += us_since(t_c0);
            }
            const std::int32_t n_real = std::min<std::int32_t>(n, (std::int32_t) tree.size());
            std::int32_t       a      = 0;
            while (a < n_real && pos + a < s.output.size() && tree.tokens[a] == s.output[pos + a]) ++a;
            const std::int32_t rows = 1 + n;
            double t = mc.costs.predict_us(rows, n_past) + (rows != last_rows ? mc.costs.rebuild_us : 0.0) +
                       (ran[(std::size_t) rows] ? 0.0 : mc.cold_us);
            ran[(std::size_t) rows] = 1;
            if (mc.jitter > 0) t *= std::exp(mc.jitter * gauss(rng) - 0.5 * mc.jitter * mc.jitter);  // mean 1
            o.changes += rows != last_rows && last_rows != 0;
            last_rows = rows;
            const double t_draft = drafting ? mc.draft_a + mc.draft_b * n_draft : 0.0;
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
            rep.drafted = drafting;
            policy.observe_step(rep);
            dr.accept(std::span<const token_id>(s.output.data() + pos, step));
            pos += step;
            n_past += (std::int32_t) step;
            o.t_us += t + t_draft;
            o.rows += (std::size_t) rows;
            o.drafted += (std::size_t) tree.size();
            o.tokens += step;
            ++o.steps;
        }
        dr.finish();
    }
    return o;
}

// The first line of a cost-cache file, parsed; throws if it is not a cost table.
cost_table read_costs(const std::string & path) {
    std::ifstream in(path);
    std::string   line;
    std::getline(in, line);
    cost_table t = cost_table::parse(line);
    if (!t.valid()) throw std::runtime_error(path + ": not a cost table (expected a line \"rest-cost 4 ...\")");
    return t;
}

}  // namespace

int main(int argc, char ** argv) {
    rest_bench::generations_args args;
    std::string                  costs_path, true_costs_path, budgets_arg = "1,2,3,4,6,8", thresholds_arg;
    drafter_params               dp;
    machine                      mc;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (args.take(a, v)) continue;
        if (a == "--costs") costs_path = v;
        else if (a == "--budgets") budgets_arg = v;
        else if (a == "--thresholds") thresholds_arg = v;
        else if (a == "--true-costs") true_costs_path = v;
        else if (a == "--cold-us") mc.cold_us = std::stod(v);
        else if (a == "--warm-rows") mc.warm_rows = std::stoi(v);
        else if (a == "--warm-told") mc.warm_told = std::stoi(v);
        else if (a == "--jitter") mc.jitter = std::stod(v);
        else if (a == "--seed") mc.seed = (unsigned) std::stoul(v);
        else if (a == "--chain-grow") dp.chain_grow = v != "0";
        else if (a == "--backoff-levels") dp.backoff_levels = std::stoi(v);
        else if (a == "--alpha") {  // datastore,context,history
            const auto v3 = rest_bench::split(v, ',');
            dp.alpha_datastore = std::stod(v3.at(0));
            dp.alpha_context   = std::stod(v3.at(1));
            dp.alpha_history   = std::stod(v3.at(2));
        }
        else if (a == "--match") {  // n_match_min,n_match_max
            const auto mm  = rest_bench::split(v, ',');
            dp.n_match_min = std::stoi(mm.at(0));
            dp.n_match_max = std::stoi(mm.at(1));
        }
        else if (a == "--backoff-confident") dp.backoff_confident = std::stoull(v);
        else if (a == "--sources") {  // some of d (datastore), c (context), h (history)
            dp.use_datastore = v.find('d') != std::string::npos;
            dp.use_context   = v.find('c') != std::string::npos;
            dp.use_history   = v.find('h') != std::string::npos;
        }
        else if (a == "--draft-us") {
            const auto ab = rest_bench::split(v, ',');
            mc.draft_a    = std::stod(ab.at(0));
            mc.draft_b    = ab.size() > 1 ? std::stod(ab[1]) : 0.0;
        }
        else {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            return 1;
        }
    }
    if (!args.complete() || costs_path.empty()) {
        std::fprintf(stderr, "usage: %s -m MODEL --index IDX --prompts B.jsonl --generations GEN.jsonl --costs FILE "
                             "[--field prompt] [--budgets 1,2,4] [--draft-us A,B] [--thresholds S,...] [--true-costs FILE] "
                             "[--jitter SIGMA] [--seed N] [--cold-us US] [--warm-rows N] [--warm-told N] (more: see the "
                             "source's head)\n", argv[0]);
        return 1;
    }
    try {
        llama_log_quiet();
        const cost_table costs = read_costs(costs_path);
        mc.costs               = true_costs_path.empty() ? costs : read_costs(true_costs_path);
        const auto tok     = load_tokenizer(args.model);
        const auto ds      = datastore::open(args.index, tok->fingerprint(), tok->description());
        const auto samples = rest_bench::load_generations(*tok, args.prompts, args.field, args.generations);
        std::size_t n_out   = 0;
        double      t_plain = 0;  // one steady 1-row pass per token, at its context fill (jitter's mean is 1; the
                                  // one cold pass of plain's shape is left out)
        for (const auto & s : samples) {
            n_out += s.output.size();
            for (std::size_t i = 0; i < s.output.size(); ++i) t_plain += mc.costs.predict_us(1, (std::int32_t) (s.prompt.size() + i));
        }
        std::printf("%zu prompts, %zu tokens; t(1) %.1f us, rebuild %.1f us, drafting %.1f + %.2f us per node\n",
                    samples.size(), n_out, mc.costs.predict_us(1, 0), mc.costs.rebuild_us, mc.draft_a, mc.draft_b);
        std::printf("%-12s %8s %9s %9s %9s %8s %9s %9s %9s\n", "policy", "M", "rows/step", "drafted", "draft_us", "speedup", "changes", "ms",
                    "choose_us");
        auto report = [&](const std::string & name, const outcome & o) {
            const auto steps = (double) o.steps;
            std::printf("%-12s %8.3f %9.2f %9.2f %9.2f %7.3fx %9zu %9.1f %9.2f\n", name.c_str(), (double) o.tokens / steps,
                        (double) o.rows / steps, (double) o.drafted / steps, o.draft_us / steps, t_plain / o.t_us,
                        o.changes, o.t_us / 1000, o.policy_us / steps);
        };
        budget_spec automatic;
        automatic.costs = costs;
        report("auto", replay(samples, *ds, mc, *make_budget_policy(automatic), budget_cap(automatic), dp));
        for (const std::string & b : rest_bench::split(budgets_arg, ',')) {
            budget_spec fixed;
            fixed.n_fixed = std::stoi(b);
            fixed.costs   = costs;
            report("fixed " + b, replay(samples, *ds, mc, *make_budget_policy(fixed), fixed.n_fixed, dp));
        }
        for (const std::string & th : rest_bench::split(thresholds_arg, ',')) {
            whole_chain policy(32, std::stof(th));
            report("score>=" + th, replay(samples, *ds, mc, policy, 32, dp, true));
        }
    } catch (const std::exception & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
