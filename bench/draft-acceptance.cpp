// Offline acceptance estimate: how much of a model's greedy output the draft trees would have predicted, with no
// verifier. For each prompt, replays speculative decoding against the recorded greedy tokens: draft a tree of N
// nodes, accept its longest path that matches the next greedy tokens, add the bonus token, repeat. Prompts are
// replayed in order and each finished output enters the history store, as in a server.
//
//   bench-draft-acceptance -m MODEL.gguf --index A.idx --prompts B.jsonl [--field prompt] --generations GEN.jsonl
//                          [--budgets 8,16,32,64] [--alpha DS,CTX,HIST] [--weights DS,CTX,HIST] [--chain 1]
//
// --chain 1 replays what the decoder verifies on CPUs: the best path of a bushier tree (min(4N, 32) nodes), cut to
// N nodes.
//
// GEN.jsonl is `rest generate -f B.jsonl --field prompt --no-spec --json` output (one record per prompt, in order,
// with "tokens"). Prompts are tokenized as rest generate does (BOS added, special tokens parsed).
//
// Per source set and budget it prints: hit1 (the next token is a root child), acc/step (mean accepted draft
// tokens per step), tokens/step (accepted + the bonus token: the speedup bound M of a free verifier), pred/step
// (the tree's expected_accepted(N): what the scores predict), and the share of accepted tokens each source proposed.
#include "generations.h"
#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/history-store.h"
#include "rest/llama-model.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

using namespace rest;

namespace {

struct totals {
    std::uint64_t steps = 0, hit1 = 0, accepted = 0, tokens = 0, by_source[3] = {0, 0, 0};
    double        predicted = 0;
};

// Longest root path of the tree that matches out[0..]; counts which sources proposed each accepted node.
std::size_t walk(const draft_tree & t, std::span<const token_id> out, totals & tot) {
    std::int32_t node = -1;
    std::size_t  n    = 0;
    while (n < out.size()) {
        std::int32_t next = -1;
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (t.parents[i] == node && t.tokens[i] == out[n]) {
                next = static_cast<std::int32_t>(i);
                break;
            }
        }
        if (next < 0) {
            break;
        }
        for (int s = 0; s < 3; ++s) {
            tot.by_source[s] += (t.sources[static_cast<std::size_t>(next)] >> s) & 1;
        }
        node = next;
        ++n;
    }
    return n;
}


}  // namespace

int main(int argc, char ** argv) {
    rest_bench::generations_args args;
    std::string                  budgets_arg = "8,16,32,64", weights_arg, alpha_arg;
    bool                         chain = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (args.take(a, v)) continue;
        if (a == "--budgets") budgets_arg = v;
        else if (a == "--alpha") alpha_arg = v;
        else if (a == "--weights") weights_arg = v;
        else if (a == "--chain") chain = v != "0";
        else {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            return 1;
        }
    }
    if (!args.complete()) {
        std::fprintf(stderr, "usage: %s -m MODEL --index IDX --prompts B.jsonl --generations GEN.jsonl "
                             "[--field prompt] [--budgets 8,16] [--alpha DS,CTX,HIST] [--weights DS,CTX,HIST]\n", argv[0]);
        return 1;
    }
    try {
        llama_log_quiet();
        const auto tok = load_tokenizer(args.model);
        const auto ds  = datastore::open(args.index, tok->fingerprint(), tok->description());
        const std::vector<rest_bench::generation> samples =
            rest_bench::load_generations(*tok, args.prompts, args.field, args.generations);
        std::uint64_t n_out = 0;
        for (const auto & s : samples) {
            n_out += s.output.size();
        }
        std::printf("%zu prompts, %llu greedy tokens; datastore %llu tokens\n", samples.size(),
                    (unsigned long long) n_out, (unsigned long long) ds->info().n_tokens);
        std::printf("%-16s %4s %7s %9s %11s %9s %8s %8s %8s %9s\n", "sources", "N", "hit1", "acc/step",
                    "tokens/step", "pred/step", "by-ds", "by-ctx", "by-hist", "us/draft");
        struct config {
            const char * name;
            bool         ds, ctx, hist;
        };
        const config configs[] = {{"datastore", true, false, false}, {"context", false, true, false},
                                  {"history", false, false, true},   {"datastore+ctx", true, true, false},
                                  {"all", true, true, true}};
        for (const std::string & b : rest_bench::split(budgets_arg, ',')) {
            const int n_budget = std::stoi(b);
            for (const config & c : configs) {
                drafter_params p;
                p.use_datastore = c.ds;
                p.use_context   = c.ctx;
                p.use_history   = c.hist;
                if (!alpha_arg.empty()) {
                    const auto al     = rest_bench::split(alpha_arg, ',');
                    p.alpha_datastore = std::stod(al.at(0));
                    p.alpha_context   = std::stod(al.at(1));
                    p.alpha_history   = std::stod(al.at(2));
                }
                if (!weights_arg.empty()) {
                    const auto w       = rest_bench::split(weights_arg, ',');
                    p.weight_datastore = std::stod(w.at(0));
                    p.weight_context   = std::stod(w.at(1));
                    p.weight_history   = std::stod(w.at(2));
                }
                history_store hist({.n_tokens_max = 1 << 20});
                drafter       dr(ds.get(), &hist, p);
                totals        tot;
                double        t_us = 0;
                for (const rest_bench::generation & s : samples) {
                    dr.reset(s.prompt);
                    for (std::size_t pos = 0; pos < s.output.size();) {
                        const draft_tree t =
                            chain ? draft_chain(dr, n_budget, n_budget, INT32_MAX) : dr.draft(n_budget);
                        t_us += dr.last_stats().t_draft_us;
                        const std::span<const token_id> rest_out(s.output.data() + pos, s.output.size() - pos);
                        for (std::size_t i = 0; i < t.size(); ++i) {
                            tot.hit1 += t.parents[i] < 0 && t.tokens[i] == rest_out[0];
                        }
                        tot.predicted += t.expected_accepted(t.size());
                        const std::size_t a    = walk(t, rest_out, tot);
                        const std::size_t step = std::min(a + 1, rest_out.size());
                        tot.accepted += a;
                        tot.tokens += step;
                        tot.steps++;
                        dr.accept(rest_out.first(step));
                        pos += step;
                    }
                    dr.finish();
                }
                const double steps = static_cast<double>(std::max<std::uint64_t>(tot.steps, 1));
                const double acc   = static_cast<double>(std::max<std::uint64_t>(tot.accepted, 1));
                std::printf("%-16s %4d %7.3f %9.3f %11.3f %9.3f %8.2f %8.2f %8.2f %9.1f\n", c.name, n_budget,
                            tot.hit1 / steps, tot.accepted / steps, tot.tokens / steps, tot.predicted / steps,
                            tot.by_source[0] / acc, tot.by_source[1] / acc, tot.by_source[2] / acc, t_us / steps);
            }
        }
    } catch (const std::exception & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
