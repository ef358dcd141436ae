// Speculative sampling is distribution-exact on real trained models (issue 22). test-llama-sampling.cpp proves it on
// a fake model whose tree and chain logits are bit-identical; here the logits are llama.cpp's, where a batched
// verification row may round differently from a single-token decode (F32/F16 weights on CPUs run without flash
// attention), so identity per seed is not promised (it is measured and printed), only the output distribution.
//
// Per model: the joint distribution of the first two sampled tokens after a prompt whose continuation the drafter
// knows, with llama.cpp's sampler chain as model::new_sampler builds it (repetition penalty, top-k, top-p,
// temperature, dist). Plain samples, speculative samples on each verification layout (chains: the CPU default;
// trees) and REST's per-path resampling (every root-to-leaf path draws its own samples and the longest accepted
// path wins: biased towards drafts), each arm from its own seeds. A two-sample chi-square test at alpha = 0.001 of
// each speculative arm against plain must pass; the same test of REST's scheme against plain must fail. Drafts must
// be accepted often, so that the pass is not vacuous: the second token is then drawn from a verification row, after
// the sampler has accepted the first one (the penalty state).
//   - stories260K (F32) with a tinystories-A datastore and the context (skipped without ../shared/data);
//   - the demo model models/pystdlib-demo-f16.gguf (F16) with drafts from the context.
// Seeds are fixed, so a run is reproducible on one machine; on another the logits, and so the samples, may round
// differently, and each of the four pass decisions then fails by chance with probability 0.001.
#include "rest/datastore.h"
#include "rest/decoder.h"
#include "rest/drafter.h"
#include "rest/index-builder.h"
#include "rest/llama-model.h"
#include "sampling-stats.h"
#include "test-util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

using namespace rest;

namespace {

constexpr double k_alpha   = 0.001;  // significance of every chi-square decision here
constexpr int    k_samples = 6000;   // per arm
constexpr int    k_same    = 500;    // seeds whose speculative and plain runs are compared token by token

struct sampling_case {
    std::string           name;
    const model *         m  = nullptr;
    const datastore *     ds = nullptr;  // null: no datastore source
    drafter_params        dp;
    std::vector<token_id> prompt;
    sampler_params        sp;
    int                   n_draft_max = 16;
    double                min_one_pass = 0.3;  // least fraction of speculative samples with both tokens in one pass
};

// Outcomes of one arm, keyed by the token pair t0 * n_vocab + t1.
struct arm {
    std::map<std::int64_t, int> cells;
    int          n          = 0;
    int          n_one_pass = 0;  // both tokens from the first verification pass (its first draft node accepted)
    std::int64_t n_drafted  = 0;
    std::int64_t n_accepted = 0;

    void add(const std::vector<token_id> & out, std::int32_t n_vocab) {
        ASSERT_EQ(out.size(), 2u);
        ++cells[(std::int64_t) out[0] * n_vocab + out[1]];
        ++n;
    }
};

sampler_params with_seed(sampler_params p, std::uint32_t seed) {
    p.seed = seed == 0xFFFFFFFFu ? 1 : seed;  // 0xFFFFFFFF means "random"
    return p;
}

std::uint32_t mix_seed(std::uint32_t seed, std::uint64_t a, std::uint64_t b) {
    std::uint64_t x = (std::uint64_t) seed * 0x9e3779b97f4a7c15ull ^ (a << 32) ^ b;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (std::uint32_t) (x ^ (x >> 31));
}

// The first two tokens the decoder emits (plain or speculative) for one seed.
std::vector<token_id> run_decoder(const sampling_case & c, target_model & ctx, std::uint32_t seed, bool speculate,
                                  arm * stats) {
    auto    s = c.m->new_sampler(with_seed(c.sp, seed));
    drafter d(c.ds, nullptr, c.dp);
    decoder dec(ctx, nullptr);
    request r;
    r.params.n_predict   = 2;
    r.params.n_draft_max = c.n_draft_max;
    r.params.stop_at_eog = false;
    r.sampler            = s.get();
    r.draft              = speculate ? &d : nullptr;
    dec.run(r, c.prompt);
    if (stats) {
        stats->n_one_pass += r.stats.n_steps == 1;
        stats->n_drafted += r.stats.n_drafted;
        stats->n_accepted += r.stats.n_accepted;
    }
    return r.output;
}

// REST's per-path resampling (the control of test-llama-sampling.cpp on real logits): at each step every
// root-to-leaf path of the draft tree draws its own tokens along itself (its own sampler state and seed) until a
// draw leaves the path, and the longest result is emitted. Each distinct context's tree and logit rows are computed
// once, by one tree pass on a tree-layout context, and cached.
class rest_per_path {
  public:
    rest_per_path(const sampling_case & c, target_model & tree_ctx) : c_(c), ctx_(tree_ctx) {}

    std::vector<token_id> sample(std::uint32_t seed) {
        std::vector<token_id> out;
        for (int step = 0; out.size() < 2; ++step) {
            const node_rows & at = rows_for(out);
            std::vector<token_id> best;
            for (size_t k = 0; k < at.paths.size(); ++k) {
                auto s = c_.m->new_sampler(with_seed(c_.sp, mix_seed(seed, step, k)));
                for (token_id t : c_.prompt) s->accept(t);  // the penalty window, as the decoder fills it
                for (token_id t : out) s->accept(t);
                std::vector<token_id> got;
                const std::vector<std::int32_t> & path = at.paths[k];
                for (size_t d = 0; d <= path.size(); ++d) {
                    const token_id t = s->sample(at.rows[d == 0 ? 0 : 1 + path[d - 1]]);
                    s->accept(t);
                    got.push_back(t);
                    if (d == path.size() || t != at.tree.tokens[path[d]]) break;
                }
                if (got.size() > best.size()) best = got;
            }
            out.insert(out.end(), best.begin(), best.end());
        }
        out.resize(2);
        return out;
    }

    int n_leaves_first() { return (int) rows_for({}).paths.size(); }

  private:
    struct node_rows {
        draft_tree                             tree;
        std::vector<std::vector<float>>        rows;   // [0]: the root's logits, [1 + i]: node i's
        std::vector<std::vector<std::int32_t>> paths;  // node indices of each root-to-leaf path (one empty: no tree)
    };

    const node_rows & rows_for(const std::vector<token_id> & emitted) {
        auto it = cache_.find(emitted);
        if (it != cache_.end()) return it->second;
        node_rows & nr = cache_[emitted];
        std::vector<token_id> context = c_.prompt;
        context.insert(context.end(), emitted.begin(), emitted.end());
        drafter d(c_.ds, nullptr, c_.dp);
        d.reset(context);
        nr.tree = d.draft(c_.n_draft_max);
        ctx_.clear(0);
        ctx_.prefill(0, std::span<const token_id>(context).first(context.size() - 1));
        tree_request tr;
        tr.root    = context.back();
        tr.tokens  = nr.tree.tokens;
        tr.parents = nr.tree.parents;
        tr.depths  = nr.tree.depths;
        EXPECT_EQ(ctx_.decode({&tr, 1}), decode_status::ok);
        for (std::int32_t i = -1; i < (std::int32_t) nr.tree.size(); ++i) {
            const auto l = ctx_.logits(0, i);
            nr.rows.emplace_back(l.begin(), l.end());
        }
        for (std::int32_t leaf = 0; leaf < (std::int32_t) nr.tree.size(); ++leaf) {
            if (std::find(nr.tree.parents.begin(), nr.tree.parents.end(), leaf) != nr.tree.parents.end()) continue;
            std::vector<std::int32_t> path;
            for (std::int32_t v = leaf; v >= 0; v = nr.tree.parents[v]) path.insert(path.begin(), v);
            nr.paths.push_back(path);
        }
        if (nr.paths.empty()) nr.paths.emplace_back();
        return nr;
    }

    const sampling_case &                      c_;
    target_model &                             ctx_;
    std::map<std::vector<token_id>, node_rows> cache_;  // by the tokens emitted after the prompt
};

// The first verification pass of the speculative arm and, for it, the largest |difference| between the root's
// logits from that batched pass and from a plain single-token decode (0: bit-identical rows).
struct first_pass {
    draft_tree tree;
    double     max_root_diff = 0;
};

first_pass measure_first_pass(const sampling_case & c, target_model & ctx) {
    first_pass fp;
    drafter d(c.ds, nullptr, c.dp);
    d.reset(c.prompt);
    const std::int32_t n_past = (std::int32_t) c.prompt.size() - 1;
    fp.tree = ctx.trees() ? d.draft(c.n_draft_max)
                          : draft_chain(d, c.n_draft_max, c.n_draft_max, ctx.n_ctx_slot() - n_past - 1);
    std::vector<float> rows[2];
    for (int with_tree = 0; with_tree < 2; ++with_tree) {
        ctx.clear(0);
        ctx.prefill(0, std::span<const token_id>(c.prompt).first((size_t) n_past));
        tree_request tr;
        tr.root = c.prompt.back();
        if (with_tree) {
            tr.tokens  = fp.tree.tokens;
            tr.parents = fp.tree.parents;
            tr.depths  = fp.tree.depths;
        }
        EXPECT_EQ(ctx.decode({&tr, 1}), decode_status::ok);
        const auto l = ctx.logits(0, -1);
        rows[with_tree].assign(l.begin(), l.end());
    }
    for (size_t i = 0; i < rows[0].size(); ++i) {
        fp.max_root_diff = std::max(fp.max_root_diff, (double) std::fabs(rows[0][i] - rows[1][i]));
    }
    return fp;
}

void print_chi2(const std::string & what, const rest_test::chi2_result & r) {
    std::printf("  %-36s chi2 = %7.1f  df = %3d  p = %.3g\n", (what + ":").c_str(), r.stat, r.df, r.p);
}

// The most frequent pair of an arm, as text with its share.
std::string top_pair(const sampling_case & c, const arm & a) {
    std::int64_t best = 0;
    int          n    = 0;
    for (const auto & [k, v] : a.cells) {
        if (v > n) { n = v; best = k; }
    }
    const std::int32_t n_vocab = c.m->info().n_vocab;
    const token_id pair[2] = {(token_id) (best / n_vocab), (token_id) (best % n_vocab)};
    char share[32];
    std::snprintf(share, sizeof(share), " %.1f%%", 100.0 * n / std::max(1, a.n));
    return "'" + c.m->vocab().detokenize(pair) + "'" + share;
}

// Samples every arm (see the top of the file), prints the statistics and checks them.
void check_sampling_exact(const sampling_case & c) {
    const auto t0 = std::chrono::steady_clock::now();
    context_params cp;
    cp.n_ctx     = 256;  // llama.cpp's least (it pads to 256 cells); plenty for prompt + tree
    cp.n_threads = 1;
    cp.n_leaves_max = 16;  // trees of <= 16 nodes; a pool smaller than 32 makes llama.cpp's batch checks cheaper
    cp.trees     = false;
    const auto chain_ctx = c.m->new_context(cp);
    cp.trees     = true;
    const auto tree_ctx  = c.m->new_context(cp);
    target_model * layouts[2] = {chain_ctx.get(), tree_ctx.get()};
    const std::int32_t n_vocab = c.m->info().n_vocab;

    arm plain, control, spec[2];
    int same[2] = {0, 0};
    for (int i = 0; i < k_samples; ++i) {
        plain.add(run_decoder(c, *chain_ctx, 50000000 + (std::uint32_t) i, false, nullptr), n_vocab);
        for (int l = 0; l < 2; ++l) {
            const std::uint32_t seed = 1000000 * (l + 1) + (std::uint32_t) i;
            const auto out = run_decoder(c, *layouts[l], seed, true, &spec[l]);
            spec[l].add(out, n_vocab);
            if (i < k_same) same[l] += out == run_decoder(c, *chain_ctx, seed, false, nullptr);
        }
        if (::testing::Test::HasFatalFailure()) return;
    }
    rest_per_path rest_style(c, *tree_ctx);
    for (int i = 0; i < k_samples; ++i) {
        control.add(rest_style.sample(90000000 + (std::uint32_t) i), n_vocab);
        if (::testing::Test::HasFatalFailure()) return;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::printf("%s (%s), prompt of %zu tokens, at most %d draft nodes, temp %.2f top-k %d top-p %.2f repeat penalty "
                "%.2f: %d samples per arm, alpha %g, %.1f s\n", c.name.c_str(), c.m->info().description.c_str(),
                c.prompt.size(), c.n_draft_max, c.sp.temp, c.sp.top_k, c.sp.top_p, c.sp.repeat_penalty, k_samples,
                k_alpha, secs);
    std::printf("  plain: %zu distinct first-two-token pairs, most frequent %s\n", plain.cells.size(),
                top_pair(c, plain).c_str());
    for (int l = 0; l < 2; ++l) {
        const char * name = l ? "trees" : "chains";
        const first_pass fp = measure_first_pass(c, *layouts[l]);
        const double one_pass = (double) spec[l].n_one_pass / spec[l].n;
        const auto r = rest_test::chi2_two_sample(spec[l].cells, plain.cells);
        std::printf("  speculative, %s: %zu pairs, most frequent %s; %.1f%% of samples took both tokens from the first "
                    "pass (%zu draft nodes), %.3f draft tokens accepted per sample; root logits of that pass vs a "
                    "single-token decode: max |diff| %.3g; same seed as plain: %d / %d identical\n", name,
                    spec[l].cells.size(), top_pair(c, spec[l]).c_str(), 100.0 * one_pass, fp.tree.size(),
                    (double) spec[l].n_accepted / spec[l].n, fp.max_root_diff, same[l], k_same);
        print_chi2(std::string("speculative (") + name + ") vs plain", r);
        EXPECT_GE(one_pass, c.min_one_pass) << name << ": drafts are rarely accepted, the test would be vacuous";
        EXPECT_GE(r.df, 10) << name << ": too few outcomes for a meaningful test";
        EXPECT_GT(r.p, k_alpha) << name << ": speculative sampling's distribution differs from plain sampling's";
        // Each run draws once per emitted token, in order, so a seed gives the same tokens unless a logit rounding
        // difference moves a draw across a boundary of the cumulative distribution (or reorders near-equal
        // candidates, which the chain's sort puts in logit order). A misaligned draw would make this ~0.
        EXPECT_GE(same[l], k_same / 2) << name << ": the same seed rarely gives the same tokens";
    }
    const auto r = rest_test::chi2_two_sample(control.cells, plain.cells);
    std::printf("  REST per-path resampling (trees): %zu pairs, most frequent %s; %d leaves at the first step\n",
                control.cells.size(), top_pair(c, control).c_str(), rest_style.n_leaves_first());
    print_chi2("REST per-path (control) vs plain", r);
    EXPECT_GE(rest_style.n_leaves_first(), 2) << "a single path cannot show the per-path bias";
    EXPECT_LT(r.p, k_alpha) << "the test failed to detect REST's per-path resampling bias";
}

sampler_params chain_params() {
    sampler_params p;
    p.temp           = 0.9f;
    p.top_k          = 40;
    p.top_p          = 0.9f;
    p.min_p          = 0.0f;
    p.repeat_penalty = 1.3f;
    p.repeat_last_n  = 64;
    return p;
}

std::string demo_model_path() {
    // The repository's models/ folder: from this file's path, else from REST_BIN (build/bin).
    namespace fs = std::filesystem;
    const fs::path here = fs::path(__FILE__).parent_path().parent_path() / "models" / "pystdlib-demo-f16.gguf";
    if (fs::exists(here)) return here.string();
    const char * bin = std::getenv("REST_BIN");
    return bin ? (fs::path(bin) / ".." / ".." / "models" / "pystdlib-demo-f16.gguf").string() : here.string();
}

TEST(sampling_real, stories260k_tinystories_datastore) {
    const std::string data = rest_test::shared_data();
    if (data.empty()) {
        GTEST_SKIP() << "../shared/data is absent (set REST_SHARED_DATA): stories260K and tinystories-A are needed";
    }
    llama_log_quiet();
    const auto m = rest_test::load_model(data + "/models/stories260K.gguf");
    const std::string idx = rest_test::tmp_dir() + "/sampling-real-tinystories-A.idx";  // not shared with other tests
    corpus_build_params bp;
    bp.corpus.split_paragraphs = true;
    build_datastore(idx, {data + "/corpora/tinystories-A.txt"}, m->vocab(), bp);
    const auto ds = datastore::open(idx, m->vocab().fingerprint());

    sampling_case c;
    c.name = "stories260K + tinystories-A datastore";
    c.m    = m.get();
    c.ds   = ds.get();
    c.dp.use_history = false;
    c.dp.depth_max   = 3;  // only two tokens are emitted: a wider tree for the same nodes
    // The datastore continues "loved to" with " play" (the model: ~49%) and a dozen other tokens.
    c.prompt = m->vocab().tokenize("Lily loved to", true, false);
    c.sp     = chain_params();
    c.n_draft_max = 16;
    check_sampling_exact(c);
}

TEST(sampling_real, demo_model_context_drafts) {
    const std::string path = demo_model_path();
    if (!std::filesystem::exists(path)) {
        GTEST_FAIL() << "the demo model is missing: " << path;
    }
    llama_log_quiet();
    const auto m = rest_test::load_model(path);
    sampling_case c;
    c.name = "pystdlib-demo + context drafts";
    c.m    = m.get();
    c.dp.use_datastore = false;
    c.dp.use_history   = false;
    c.dp.depth_max     = 3;
    // The context drafts both raise statements seen: " ValueError(" (twice: the best path, the chain verified) and
    // " TypeError(". At this prompt length a batched row's logits differ from a single-token decode's by ~2e-3.
    c.prompt = m->vocab().tokenize("    if a is None:\n        raise ValueError(a)\n"
                                   "    if b is None:\n        raise ValueError(b)\n"
                                   "    if c is None:\n        raise TypeError(c)\n"
                                   "    if d is None:\n        raise",
                                   true, false);
    c.sp     = chain_params();
    // The prompt is in the penalty window (as llama.cpp puts it): a window of 64 would penalise the very raise
    // statements the drafts repeat (8% of samples took a drafted token). A short one still penalises the tokens of
    // the path being verified, which is what a draw at a drafted node must account for.
    c.sp.repeat_last_n = 4;
    c.n_draft_max = 16;
    check_sampling_exact(c);
}

}  // namespace
