// Quantized models are bit-exact through speculation, in both layouts, with one slot and with four: every greedy
// output equals plain decoding's token for token (0 differences, not near-ties). Q8_0 and Q4_0 fixtures use flash
// attention on the CPU, whose rows do not depend on the batch; the tree layout keeps each slot's KV cells in
// position order (llama-context.h), which is what makes its attention sum in plain decoding's order.
// The datastore holds every prompt's own greedy continuation plus perturbed copies, so trees carry competing
// branches that are rejected; with four slots requests of different lengths come and go, so slots interleave and
// free cells among each other's. Several slots in the tree layout are bit-exact with a context per slot
// (context_params::context_per_slot), not in one shared pool (see the disabled test).
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

    context_params context(int n_slots, bool trees, bool per_slot = false) const {
        context_params cp;
        cp.context_per_slot = per_slot;
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

// A context's shape: chains or trees, how many slots, and for trees whether each slot has a context of its own.
struct layout {
    bool trees    = false;
    int  n_slots  = 1;
    bool per_slot = false;
};

// Serves every prompt through n_slots slots (a queue, as the server's engine does) with 16-node drafts.
served serve_all(const workload & w, const layout & l) {
    const bool trees = l.trees;
    const int  n_slots = l.n_slots;
    auto ctx = w.m->new_context(w.set.context(n_slots, trees, l.per_slot));
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

void bit_exact(const std::string & type, const std::vector<layout> & layouts, const setting & set = {}) {
    const workload w = make_workload(type, set);
    for (const layout & l : layouts) {
        {
            const bool     trees = l.trees;
            const served   s     = serve_all(w, l);
            std::printf("%s %s, %d slot(s)%s: %d of %zu outputs differ from plain; %lld of %lld drafted tokens "
                        "accepted, %lld decoded again to keep cells in order, M %.2f\n", type.c_str(),
                        trees ? "tree" : "chain", l.n_slots, l.per_slot ? " (a context each)" : "", s.differ, w.prompts.size(), (long long) s.accepted, (long long) s.drafted,
                        (long long) s.recomputed, (double) s.tokens / (double) s.forwards);
            EXPECT_EQ(s.differ, 0);
            // Drafts were accepted at length and rejected often: the case the compaction exists for.
            EXPECT_GT((double) s.tokens / (double) s.forwards, 2.0);
            EXPECT_GT(s.drafted - s.accepted, s.drafted / 20);
            if (trees) EXPECT_GT(s.recomputed, 10) << "accepted paths that leave the first rows: the case commit moves";
        }
    }
}

const std::vector<layout> k_exact_layouts = {{false, 1}, {false, 4}, {true, 1}, {true, 4, true}};

TEST(exact_quantized, q8_0_chain_and_tree_one_and_four_slots) {
    bit_exact("q8_0", k_exact_layouts);
}

TEST(exact_quantized, q4_0_chain_and_tree_one_and_four_slots) {
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
    bit_exact("q8_0", {{false, 1}, {true, 1}, {true, 2, true}}, set);
}

// Conversations through the prompt cache and chunked prefill (issue 19): each turn's prompt is the last turn's
// prompt and output plus new tokens, and starts on the free slot whose memory holds most of it (slot_batch's
// reuse), while other conversations generate, so prompts arrive in chunks beside their steps. Every output must
// equal plain decoding of its whole prompt, token for token: reused cells were computed by verification passes and
// chunks, the reference's by one prompt pass, which flash attention on a quantized model with a bf16 cache makes
// no difference to.
// With no more conversations than slots, a turn finds its last turn's slot free: it must reuse most of its prompt.
void converse(const std::string & type, bool trees, int n_slots, int n_convos, bool per_slot = false) {
    // Several slots sharing one tree pool are not bit-exact (below): there, the strict comparison.
    const bool exact = !(trees && n_slots > 1) || per_slot;
    setting set;
    set.n_ctx_slot = 400;
    set.n_prompts  = n_convos;
    // With an f16 cache, CPU flash attention takes a tiled kernel for passes of 64+ rows (above): the reference's
    // prompt pass then computes rows that chunks and verification passes compute with the other kernel (measured
    // with f16: 2-4 of 9-24 turns differ, with the prompt cache or without it). bf16 takes one kernel throughout.
    set.cache_type = "bf16";
    const workload w         = make_workload(type, set);
    auto           ctx       = w.m->new_context(set.context(n_slots, trees, per_slot));
    auto           plain_ctx = w.m->new_context(set.context(1, false));
    fixed_budget   budget(16);
    decoder        dec(*ctx, &budget);
    slot_batch     batch(dec, n_slots);
    std::mt19937_64 rng(5);
    const int       n_vocab = w.m->info().n_vocab, n_turns = 3;
    struct convo {
        std::vector<token_id> prompt;
        int                   turn = 0;
    };
    std::vector<convo> convos;
    std::deque<size_t> ready;
    for (size_t i = 0; i < w.prompts.size(); ++i) {
        convos.push_back({w.prompts[i], 0});
        ready.push_back(i);
    }
    std::vector<request>                  reqs((size_t) n_slots);
    std::vector<greedy_sampler>           samplers((size_t) n_slots);
    std::vector<std::unique_ptr<drafter>> drafters;
    std::vector<size_t>                   who((size_t) n_slots);
    for (int k = 0; k < n_slots; ++k) drafters.push_back(std::make_unique<drafter>(w.ds.get(), nullptr, drafter_params{}));
    int          differ = 0, turns = 0;
    std::int64_t cached = 0, prompt_tokens = 0;
    while (true) {
        for (std::int32_t k; !ready.empty() && (k = batch.free_slot_for(convos[ready.front()].prompt)) >= 0;) {
            const size_t c = ready.front();
            ready.pop_front();
            request & r         = reqs[(size_t) k];
            r                   = request{};
            r.params.n_predict  = std::uniform_int_distribution<int>(20, 50)(rng);
            r.params.n_draft_max = 16;
            r.sampler           = &samplers[(size_t) k];
            r.draft             = drafters[(size_t) k].get();
            r.is_eog            = [&w](token_id t) { return w.m->is_eog(t); };
            who[(size_t) k]     = c;
            batch.start(k, r, convos[c].prompt, true);
        }
        if (batch.n_busy() == 0) break;
        for (const std::int32_t k : batch.step()) {
            request & r = reqs[(size_t) k];
            convo &   c = convos[who[(size_t) k]];
            const auto plain = rest_test::generate_greedy(*w.m, *plain_ctx, c.prompt, r.params.n_predict, nullptr, 0, nullptr);
            if (r.output != plain.tokens) {
                ++differ;
                const auto v = compare_to_plain(plain.trace(), r.output, rest_test::k_tie_eps,
                                                rest_test::resume_plain(*w.m, *plain_ctx, c.prompt, r.params.n_predict));
                if (exact || !v.ok) {
                    ADD_FAILURE() << "conversation " << who[(size_t) k] << " turn " << c.turn << " differs from plain "
                                  << "at token " << v.first_divergence << ": " << v.why;
                }
            }
            ++turns;
            cached += r.stats.n_cached;
            prompt_tokens += r.stats.n_prompt;
            batch.release(k);
            if (++c.turn < n_turns) {
                c.prompt.insert(c.prompt.end(), r.output.begin(), r.output.end());
                for (int i = std::uniform_int_distribution<int>(20, 60)(rng); i > 0; --i) {
                    c.prompt.push_back(std::uniform_int_distribution<int>(100, n_vocab - 1)(rng));
                }
                ready.push_back(who[(size_t) k]);
            }
        }
    }
    std::printf("%s %s, %d slot(s)%s: %d turns, %d differ from plain; %lld of %lld prompt tokens reused from a slot's "
                "memory; prompt rows cost %.0f us each in the steps they shared (plain step %.0f us)\n",
                type.c_str(), trees ? "tree" : "chain", n_slots, per_slot ? " (a context each)" : "", turns, differ, (long long) cached,
                (long long) prompt_tokens, batch.pacer().row_us(), batch.pacer().plain_us());
    EXPECT_EQ(turns, n_turns * (int) w.prompts.size());
    if (exact) EXPECT_EQ(differ, 0);
    if (n_convos <= n_slots) EXPECT_GT(cached, prompt_tokens / 3) << "turns 2 and 3 reuse most of their prompts";
    if (n_slots > 1) EXPECT_GT(batch.pacer().row_us(), 0) << "some prompts arrived beside other requests' steps";
}

TEST(exact_quantized, q8_0_conversations_prompt_cache_and_chunked_prefill) {
    converse("q8_0", false, 4, 8);
    converse("q8_0", false, 4, 4);
    converse("q8_0", true, 1, 1);
    // Prompt chunks share the verification passes in the tree layout (one unified pool).
    converse("q8_0", true, 2, 3);
    // A context per slot: bit-exact, chunks in passes of their own.
    converse("q8_0", true, 2, 3, true);
}

TEST(exact_quantized, q4_0_conversations_prompt_cache_and_chunked_prefill) {
    converse("q4_0", false, 4, 8);
    converse("q4_0", false, 3, 3);
}

// Known gap, kept visible as a disabled test (run it with --gtest_also_run_disabled_tests): several slots in the
// tree layout share llama.cpp's unified KV pool, whose allocator hands a slot's next rows the lowest free cells,
// often below its earlier ones, and the pinned llama.cpp has no call that moves cells. Then attention sums in
// another order than plain decoding (measured here: 5 of these 10 outputs differ). Plain decoding itself has the
// property: 4 slots in the unified pool, no drafts, already differ from 1-slot plain in 1 of these 10 outputs.
// context_params::context_per_slot is the bit-exact alternative (tested above).
TEST(exact_quantized, DISABLED_q8_0_tree_four_slots) {
    bit_exact("q8_0", {{true, 4}});
}

}  // namespace
