// How predictable the target's greedy output is from each draft source, by suffix-match length: an upper bound on
// what re-ranking the drafter's candidates can achieve, independent of the drafter's scoring.
//
//   bench-draft-sources -m MODEL.gguf --index A.idx --prompts B.jsonl --generations GEN.jsonl [--field prompt]
//
// At every position of every recorded generation (GEN.jsonl: `rest generate -f B.jsonl --no-spec --json`), each
// source predicts the next token as the most frequent continuation of the context's last l tokens:
//   datastore: the index (exact counts from suffix-array ranges);
//   history:   the prompts and outputs of the generations before this one (a server's past outputs);
//   context:   this prompt and output so far.
// Printed: per l, how often a source's prediction at exactly l is right where the suffix occurs; per source, the
// accuracy of its longest match; "any": some source's longest-match prediction is right (the ceiling of choosing
// among them); "best rule": the best choice of source per combination of match-length buckets, fitted in-sample
// (optimistic: it sees the answers); "drafter": the real drafter's first node (rest::drafter, default parameters),
// of a tree (draft(), the GPU layout's) and of a grown chain (draft_chain(), the CPU layout's);
// two online rules that choose a source by the running accuracy, over earlier positions only, of its predictions in
// the same cell of match-length buckets or at the same bucket of its own match length.
#include "generations.h"
#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/history-store.h"
#include "rest/llama-model.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

using namespace rest;

namespace {

constexpr int k_len = 16;  // REST's longest suffix match
constexpr int k_src = 3;   // datastore, history, context
const char *  k_names[k_src] = {"datastore", "history", "context"};

struct prediction {
    int      length = 0;  // longest suffix length that occurs (0: none)
    token_id token  = -1; // most frequent continuation at that length
};

struct counts {
    std::array<long, k_len + 1> n{}, hit{};
};

// Most frequent value of a continuation histogram (ties: the smaller token).
token_id mode(const std::map<token_id, long> & h) {
    token_id best = -1;
    long     c    = -1;
    for (const auto & [t, n] : h) {
        if (n > c) { c = n; best = t; }
    }
    return best;
}

std::uint64_t hash_of(std::span<const token_id> s) {
    std::uint64_t x = 1469598103934665603ull ^ s.size();
    for (token_id t : s) x = (x ^ (std::uint64_t) (std::uint32_t) t) * 1099511628211ull;
    return x;
}

// The past generations' n-grams (l = 1..k_len) with their continuation counts.
class ngram_history {
  public:
    void add(std::span<const token_id> seq) {
        for (std::size_t j = 1; j < seq.size(); ++j) {
            for (int l = 1; l <= k_len && l <= (int) j; ++l) map_[hash_of(seq.subspan(j - l, l))][seq[j]]++;
        }
    }
    const std::map<token_id, long> * find(std::span<const token_id> suffix) const {
        const auto it = map_.find(hash_of(suffix));
        return it == map_.end() ? nullptr : &it->second;
    }

  private:
    std::unordered_map<std::uint64_t, std::map<token_id, long>> map_;
};

// Continuations of the context's last l tokens at earlier positions of the context itself.
std::map<token_id, long> context_continuations(std::span<const token_id> ctx, int l) {
    std::map<token_id, long> h;
    const std::size_t        n = ctx.size();
    for (std::size_t end = l; end < n; ++end) {  // occurrence ctx[end-l, end), continued by ctx[end]
        if (std::equal(ctx.begin() + (end - l), ctx.begin() + end, ctx.end() - l)) h[ctx[end]]++;
    }
    return h;
}

// Chooses the source whose predictions were right most often (Laplace-smoothed) under the same key, over earlier
// positions only, then learns from this one. key(k) names source k's statistics; ties go to the later source.
class online_rule {
  public:
    template <class Key>
    bool pick_and_learn(const std::array<prediction, k_src> & p, token_id target, Key key) {
        int    pick = -1;
        double best = -1;
        for (int k = 0; k < k_src; ++k) {
            if (p[k].length == 0) continue;
            const auto & c = counts_[key(k)][k];
            const double a = (c[1] + 1.0) / (c[0] + 2.0);
            if (a >= best) { best = a; pick = k; }
        }
        for (int k = 0; k < k_src; ++k) {
            if (p[k].length == 0) continue;
            auto & c = counts_[key(k)][k];
            c[0]++;
            c[1] += p[k].token == target;
        }
        return pick >= 0 && p[pick].token == target;
    }

  private:
    std::map<std::array<int, 3>, std::array<std::array<long, 2>, k_src>> counts_;  // key -> source -> {n, right}
};

int bucket(int l) { return l <= 3 ? l : l <= 5 ? 4 : l <= 8 ? 5 : l <= 12 ? 6 : 7; }

}  // namespace

int main(int argc, char ** argv) {
    rest_bench::generations_args args;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!args.take(argv[i], argv[i + 1])) {
            std::fprintf(stderr, "unknown option %s\n", argv[i]);
            return 1;
        }
    }
    if (!args.complete()) {
        std::fprintf(stderr, "usage: %s -m MODEL --index IDX --prompts B.jsonl --generations GEN.jsonl [--field prompt]\n",
                     argv[0]);
        return 1;
    }
    try {
        llama_log_quiet();
        const auto tok     = load_tokenizer(args.model);
        const auto ds      = datastore::open(args.index, tok->fingerprint(), tok->description());
        const auto samples = rest_bench::load_generations(*tok, args.prompts, args.field, args.generations);

        std::array<counts, k_src> by_len;
        std::array<long, k_src>   longest_hit{};
        long                      n_pos = 0, any_hit = 0;
        // [datastore bucket][history bucket][context bucket][source]: right predictions, for the in-sample rule.
        std::map<std::array<int, 3>, std::array<long, k_src>> cells;
        ngram_history hist;
        // The real drafter's first node at every position (its history store gets outputs only, as in the decoder),
        // and two online choice rules: per cell of match-length buckets, or per (source, own bucket).
        history_store dhist({.n_tokens_max = 1 << 20});
        drafter       dr(ds.get(), &dhist, drafter_params{});
        history_store chist({.n_tokens_max = 1 << 20});  // the chain grower's own (draft_chain(), the CPU layout)
        drafter       dc(ds.get(), &chist, drafter_params{});
        long chain_hit = 0;
        long drafter_hit = 0, online_cell_hit = 0, online_src_hit = 0;
        online_rule by_cell, by_source;
        for (const auto & s : samples) {
            std::vector<token_id> ctx = s.prompt;
            dr.reset(s.prompt);
            dc.reset(s.prompt);
            for (token_id target : s.output) {
                {
                    const draft_tree t = dr.draft(1);
                    drafter_hit += !t.empty() && t.tokens[0] == target;
                    const token_id one[] = {target};
                    dr.accept(one);
                    const draft_tree c = dc.draft_chain(1, 1, 1, 0.0f);
                    chain_hit += !c.empty() && c.tokens[0] == target;
                    dc.accept(one);
                }
                ++n_pos;
                std::array<prediction, k_src> p;
                for (int l = 1; l <= k_len && l <= (int) ctx.size(); ++l) {
                    const std::span<const token_id> suffix(ctx.data() + ctx.size() - l, l);
                    bool any = false;
                    if (p[0].length == l - 1) {
                        const auto m = find_all(*ds, suffix);
                        // The most frequent continuation that is a token (a document end predicts nothing).
                        const auto c = m.empty() ? std::vector<token_count>{} : next_token_counts(*ds, m, 2);
                        for (const token_count & tc : c) {
                            if (tc.token != k_doc_end) {
                                p[0] = {l, tc.token};
                                break;
                            }
                        }
                    }
                    if (p[1].length == l - 1) {
                        if (const auto * h = hist.find(suffix)) p[1] = {l, mode(*h)};
                    }
                    if (p[2].length == l - 1) {
                        const auto h = context_continuations(ctx, l);
                        if (!h.empty()) p[2] = {l, mode(h)};
                    }
                    for (int k = 0; k < k_src; ++k) {
                        if (p[k].length != l) continue;
                        any = true;
                        by_len[k].n[l]++;
                        by_len[k].hit[l] += p[k].token == target;
                    }
                    if (!any) break;
                }
                online_cell_hit += by_cell.pick_and_learn(p, target, [&](int) {
                    return std::array<int, 3>{bucket(p[0].length), bucket(p[1].length), bucket(p[2].length)};
                });
                online_src_hit += by_source.pick_and_learn(p, target, [&](int k) {
                    return std::array<int, 3>{k, bucket(p[k].length), 0};
                });
                bool some = false;
                auto & cell = cells[{bucket(p[0].length), bucket(p[1].length), bucket(p[2].length)}];
                for (int k = 0; k < k_src; ++k) {
                    const bool right = p[k].length > 0 && p[k].token == target;
                    longest_hit[k] += right;
                    cell[k] += right;
                    some = some || right;
                }
                any_hit += some;
                ctx.push_back(target);
            }
            std::vector<token_id> seq = s.prompt;
            seq.insert(seq.end(), s.output.begin(), s.output.end());
            hist.add(seq);
            dr.finish();
            dc.finish();
        }
        long rule_hit = 0;
        for (const auto & [key, c] : cells) rule_hit += *std::max_element(c.begin(), c.end());
        const double n = (double) std::max(1L, n_pos);
        std::printf("%zu generations, %ld positions; datastore %llu tokens\n\n", samples.size(), n_pos,
                    (unsigned long long) ds->info().n_tokens);
        std::printf("%3s", "l");
        for (const char * name : k_names) std::printf(" %10s n %6s", name, "right");
        std::printf("\n");
        for (int l = 1; l <= k_len; ++l) {
            std::printf("%3d", l);
            for (int k = 0; k < k_src; ++k) {
                const long m = by_len[k].n[l];
                std::printf(" %12ld %6.3f", m, m ? (double) by_len[k].hit[l] / (double) m : 0.0);
            }
            std::printf("\n");
        }
        std::printf("\nnext token right, share of all positions:\n");
        for (int k = 0; k < k_src; ++k) std::printf("  %-10s longest match  %.3f\n", k_names[k], longest_hit[k] / n);
        std::printf("  drafter's first node      %.3f\n", drafter_hit / n);
        std::printf("  chain's first node        %.3f\n", chain_hit / n);
        std::printf("  online rule, per cell     %.3f\n  online rule, per source   %.3f\n", online_cell_hit / n,
                    online_src_hit / n);
        std::printf("  best rule (in-sample)     %.3f\n  any source                %.3f\n", rule_hit / n, any_hit / n);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
