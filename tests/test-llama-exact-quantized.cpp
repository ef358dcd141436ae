// Quantized models are bit-exact through speculation, in both layouts, with one slot and with four: every greedy
// output equals plain decoding's token for token (0 differences, not near-ties). Q8_0 and Q4_0 fixtures use flash
// attention on the CPU, whose rows do not depend on the batch; the tree layout keeps each slot's KV cells in
// position order (llama-context.h), which is what makes its attention sum in plain decoding's order.
// The datastore holds every prompt's own greedy continuation plus perturbed copies, so trees carry competing
// branches that are rejected; with four slots requests of different lengths come and go, so slots interleave and
// free cells among each other's. Four slots in the tree layout are the one case not bit-exact (see the disabled test).
#include "decode/online-budget.h"
#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/index-builder.h"
#include "rest/llama-model.h"
#include "rest/slot-batch.h"
#include "strict-compare.h"
#include "test-util.h"

#include <deque>
#include <random>

using namespace rest;

namespace {

// The context every run of a workload uses (per slot), and the generation lengths.
struct setting {
    std::int32_t n_ctx_slot = 256, n_threads = 1, n_min = 40, n_max = 120, n_prompts = 10;
    std::string  cache_type = "f16";  // K and V

    context_params context(int n_slots, bool trees) const {
        context_params cp;
        cp.n_ctx        = n_ctx_slot * n_slots;
        cp.n_slots      = n_slots;
        cp.n_threads    = n_threads;
        cp.trees        = trees;
        cp.cache_type_k = cp.cache_type_v = cache_type;
        return cp;
    }
};

struct workload {
    setting                            set;
    std::unique_ptr<model>             m;
    std::vector<std::vector<token_id>> prompts, plain;
    std::vector<int>                   n_predict;
    std::vector<plain_trace>           trace;
    std::unique_ptr<datastore>         ds;
};

workload make_workload(const std::string & type, const setting & set = {}) {
    fixture_params fp;
    fp.type = type;
    fp.seed = 31;
    workload w;
    w.set = set;
    w.m   = rest_test::load_model(rest_test::fixture_model(fp));
    auto            plain_ctx = w.m->new_context(set.context(1, false));
    std::mt19937_64 rng(17);
    const int       n_vocab = w.m->info().n_vocab;
    std::vector<std::vector<token_id>> docs;
    for (int i = 0; i < set.n_prompts; ++i) {
        std::vector<token_id> pr(std::uniform_int_distribution<int>(2, 8)(rng));
        for (auto & t : pr) t = std::uniform_int_distribution<int>(100, n_vocab - 1)(rng);
        const int n = std::uniform_int_distribution<int>(set.n_min, set.n_max)(rng);
        w.prompts.push_back(pr);
        w.n_predict.push_back(n);
        const auto run = rest_test::generate_greedy(*w.m, *plain_ctx, pr, n, nullptr, 0, nullptr);
        w.plain.push_back(run.tokens);
        w.trace.push_back(run.trace());
        std::vector<token_id> doc = pr;
        doc.insert(doc.end(), w.plain.back().begin(), w.plain.back().end());
        docs.push_back(doc);
        // Two identical copies with a substitution every ~5 tokens outvote the true continuation there: the best
        // branch is rejected and the accepted path runs through a later sibling (the case commit must move). One
        // more copy with its own substitutions adds branches that are simply rejected.
        std::vector<token_id> bad = doc, noise = doc;
        for (size_t k = pr.size(); k < doc.size(); ++k) {
            if (rng() % 5 == 0) bad[k] = std::uniform_int_distribution<int>(100, n_vocab - 1)(rng);
            if (rng() % 4 == 0) noise[k] = std::uniform_int_distribution<int>(100, n_vocab - 1)(rng);
        }
        docs.insert(docs.end(), {bad, bad, noise});
    }
    const std::string idx = rest_test::tmp_dir() + "/exact-quantized-" + type + ".idx";
    write_datastore(idx, docs, identity_of(w.m->vocab()));
    w.ds = datastore::open(idx, w.m->vocab().fingerprint());
    return w;
}

struct served {
    int          differ = 0;
    std::int64_t accepted = 0, drafted = 0, tokens = 0, forwards = 0, recomputed = 0;
};

// Serves every prompt through n_slots slots (a queue, as the server's engine does) with 16-node drafts.
served serve_all(const workload & w, bool trees, int n_slots) {
    auto ctx = w.m->new_context(w.set.context(n_slots, trees));
    EXPECT_EQ(ctx->trees(), trees);
    fixed_budget budget(16);
    decoder      dec(*ctx, &budget);
    slot_batch   batch(dec, n_slots);
    const size_t n = w.prompts.size();
    std::vector<std::unique_ptr<drafter>> drafters;
    std::vector<greedy_sampler>           samplers(n);
    std::vector<request>                  reqs(n);
    std::deque<size_t>                    queue;
    for (size_t i = 0; i < n; ++i) {
        drafters.push_back(std::make_unique<drafter>(w.ds.get(), nullptr, drafter_params{}));
        reqs[i].params.n_predict   = w.n_predict[i];
        reqs[i].params.n_draft_max = 16;
        reqs[i].sampler            = &samplers[i];
        reqs[i].draft              = drafters[i].get();
        reqs[i].is_eog             = [&w](token_id t) { return w.m->is_eog(t); };
        queue.push_back(i);
    }
    std::vector<size_t> who((size_t) n_slots);
    while (true) {
        for (std::int32_t k; !queue.empty() && (k = batch.free_slot()) >= 0;) {
            who[(size_t) k] = queue.front();
            queue.pop_front();
            batch.start(k, reqs[who[(size_t) k]], w.prompts[who[(size_t) k]]);
        }
        if (batch.n_busy() == 0) break;
        for (const std::int32_t k : batch.step()) batch.release(k);
    }
    served s;
    for (size_t i = 0; i < n; ++i) {
        if (reqs[i].output != w.plain[i]) {
            ++s.differ;
            const auto v = compare_to_plain(w.trace[i], reqs[i].output, rest_test::k_tie_eps,
                                          [](std::span<const token_id>) { return plain_trace{}; });
            ADD_FAILURE() << "prompt " << i << " differs from plain at token " << v.first_divergence
                          << " (plain's top-2 gap there " << v.gap_at_first << ")";
        }
        s.accepted += reqs[i].stats.n_accepted;
        s.drafted += reqs[i].stats.n_drafted;
        s.tokens += reqs[i].stats.n_tokens;
        s.forwards += reqs[i].stats.n_forward;
        s.recomputed += reqs[i].stats.n_recomputed;
    }
    return s;
}

void bit_exact(const std::string & type, const std::vector<std::pair<bool, int>> & layouts, const setting & set = {}) {
    const workload w = make_workload(type, set);
    for (const auto & [trees, n_slots] : layouts) {
        {
            const served s = serve_all(w, trees, n_slots);
            std::printf("%s %s, %d slot(s): %d of %zu outputs differ from plain; %lld of %lld drafted tokens accepted, "
                        "%lld decoded again to keep cells in order, M %.2f\n", type.c_str(), trees ? "tree" : "chain",
                        n_slots, s.differ, w.prompts.size(), (long long) s.accepted, (long long) s.drafted,
                        (long long) s.recomputed, (double) s.tokens / (double) s.forwards);
            EXPECT_EQ(s.differ, 0);
            // Drafts were accepted at length and rejected often: the case the compaction exists for.
            EXPECT_GT((double) s.tokens / (double) s.forwards, 2.0);
            EXPECT_GT(s.drafted - s.accepted, s.drafted / 20);
            if (trees) EXPECT_GT(s.recomputed, 10) << "accepted paths that leave the first rows: the case commit moves";
        }
    }
}

// (trees, slots)
const std::vector<std::pair<bool, int>> k_exact_layouts = {{false, 1}, {false, 4}, {true, 1}};

TEST(exact_quantized, q8_0_chain_one_and_four_slots_tree_one_slot) {
    bit_exact("q8_0", k_exact_layouts);
}

TEST(exact_quantized, q4_0_chain_one_and_four_slots_tree_one_slot) {
    bit_exact("q4_0", k_exact_layouts);
}

// Past 512 KV cells, llama.cpp's CPU flash attention splits an f16 cache over the threads for single-row decodes
// (and not for batched rows): with two threads plain decoding then sums in another order than verification does
// (measured: 4 of 4 900-token outputs of rest-context@8 differ). A bf16 (or quantized) cache takes one kernel for
// every row, and outputs are bit-exact at any length.
TEST(exact_quantized, q8_0_past_512_cells_two_threads_bf16_cache) {
    setting set;
    set.n_ctx_slot = 1024;
    set.n_threads  = 2;
    set.n_min      = 600;
    set.n_max      = 900;
    set.n_prompts  = 3;
    set.cache_type = "bf16";
    bit_exact("q8_0", {{false, 1}, {true, 1}}, set);
}

// Known gap, kept visible as a disabled test (run it with --gtest_also_run_disabled_tests): several slots in the
// tree layout share llama.cpp's unified KV pool, whose allocator hands a slot's next rows the lowest free cells,
// often below its earlier ones, and the pinned llama.cpp has no call that moves cells. Then attention sums in
// another order than plain decoding. Plain decoding itself has the property: 4 slots in the unified pool, no drafts,
// already differ from 1-slot plain in 1 of these 10 outputs (measured).
TEST(exact_quantized, DISABLED_q8_0_tree_four_slots) {
    bit_exact("q8_0", {{true, 4}});
}

}  // namespace
