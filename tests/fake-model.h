// A fake target model and drafters for testing the decoder without llama.cpp.
//
// fake_target's logits are a pure function of the token prefix (its last three tokens and its length), so a
// tree decode gives bit-identical logits to a chain decode: any difference between speculative and plain output
// is a decoder bug, never float rounding. It also checks the verifier's contract on every call (positions,
// parent order, commit paths) and fails the test on a violation.
#pragma once

#include "rest/decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace rest_test {

inline std::uint64_t splitmix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

class fake_target final : public rest::target_model {
  public:
    fake_target(int n_vocab, int n_ctx_slot, int n_slots, std::uint64_t seed, float scale = 3.0f) :
        n_vocab_(n_vocab), n_ctx_slot_(n_ctx_slot), seed_(seed), scale_(scale), slots_(n_slots) {}

    // The logits any model position sees after `prefix`.
    std::vector<float> logits_for(const std::vector<rest::token_id> & prefix) const {
        std::uint64_t h = seed_ ^ (prefix.size() % 7);
        for (size_t i = prefix.size() >= 3 ? prefix.size() - 3 : 0; i < prefix.size(); ++i) {
            h = splitmix(h ^ (std::uint64_t) prefix[i]);
        }
        std::vector<float> out(n_vocab_);
        for (int v = 0; v < n_vocab_; ++v) {
            const double u = (splitmix(h + (std::uint64_t) v) >> 11) * 0x1.0p-53;  // [0,1)
            out[v] = (float) (scale_ * std::log(u / (1.0 - u) + 1e-12));              // logistic spread
        }
        return out;
    }

    std::int32_t n_vocab() const override { return n_vocab_; }
    std::int32_t n_slots() const override { return (std::int32_t) slots_.size(); }
    std::int32_t n_ctx_slot() const override { return n_ctx_slot_; }
    std::int32_t n_leaves_max() const override { return leaves_max_; }
    std::int32_t n_rows_max() const override { return max_rows_; }
    bool trees() const override { return !chains_only_; }
    std::int32_t n_past(std::int32_t slot) const override { return (std::int32_t) slots_[slot].size(); }

    void prefill(std::int32_t slot, std::span<const rest::token_id> tokens) override {
        slots_[slot].insert(slots_[slot].end(), tokens.begin(), tokens.end());
        EXPECT_LE((int) slots_[slot].size(), n_ctx_slot_);
        if (!tokens.empty()) ++n_forward_;
    }

    rest::decode_status decode(std::span<const rest::tree_request> reqs) override {
        ++n_forward_;
        last_.clear();
        int rows = 0;
        rows_per_request.emplace_back();
        for (const auto & r : reqs) {
            rows += 1 + (int) r.tokens.size();
            rows_per_request.back().push_back(1 + (int) r.tokens.size());
            req_state st;
            st.slot  = r.slot;
            st.root  = r.root;
            st.nodes.assign(r.tokens.begin(), r.tokens.end());
            st.parents.assign(r.parents.begin(), r.parents.end());
            auto prefix = slots_[r.slot];
            prefix.push_back(r.root);
            st.logits.push_back(logits_for(prefix));
            EXPECT_LE((int) prefix.size(), n_ctx_slot_) << "root beyond the context";
            for (size_t i = 0; i < r.tokens.size(); ++i) {
                EXPECT_LT(r.parents[i], (int) i) << "parent after child";
                if (chains_only_) EXPECT_EQ(r.parents[i], (int) i - 1) << "a branch sent to a chains-only model";
                const int want_depth = r.parents[i] < 0 ? 1 : r.depths[r.parents[i]] + 1;
                EXPECT_EQ(r.depths[i], want_depth);
                EXPECT_LE((int) slots_[r.slot].size() + r.depths[i] + 1, n_ctx_slot_) << "node beyond the context";
                std::vector<rest::token_id> path;
                for (int v = (int) i; v >= 0; v = r.parents[v]) path.insert(path.begin(), r.tokens[v]);
                auto p = prefix;
                p.insert(p.end(), path.begin(), path.end());
                st.logits.push_back(logits_for(p));
            }
            last_.push_back(std::move(st));
        }
        // Queued prompt rows share the pass (as in llama.cpp's tree layout); their slot must not step in it.
        int queued = 0;
        for (const auto & [slot, toks] : queued_) {
            for (const auto & r : reqs) EXPECT_NE(r.slot, slot) << "a slot steps while its prompt is queued";
            queued += (int) toks.size();
        }
        queued_rows_hist.push_back(queued);
        rows_hist.push_back(rows + queued);
        if (rows + queued > max_rows_) {
            for (const auto & [slot, toks] : queued_) prefill(slot, toks);  // alone, as llama_target does
            queued_.clear();
            return rest::decode_status::no_memory;
        }
        for (const auto & [slot, toks] : queued_) {
            slots_[slot].insert(slots_[slot].end(), toks.begin(), toks.end());
            EXPECT_LE((int) slots_[slot].size(), n_ctx_slot_);
        }
        queued_.clear();
        return rest::decode_status::ok;
    }

    void queue_prefill(std::int32_t slot, std::span<const rest::token_id> tokens) override {
        if (!tokens.empty()) queued_.emplace_back(slot, std::vector<rest::token_id>(tokens.begin(), tokens.end()));
    }
    std::int32_t keep_prefix(std::int32_t slot, std::int32_t n) override {
        if (!keeps_prefix) {
            clear(slot);
            return 0;
        }
        slots_[slot].resize((std::size_t) std::clamp(n, 0, (std::int32_t) slots_[slot].size()));
        return (std::int32_t) slots_[slot].size();
    }

    std::span<const float> logits(std::int32_t request, std::int32_t node) const override {
        return last_[request].logits[node + 1];
    }

    void commit(std::int32_t request, std::span<const std::int32_t> path) override {
        const req_state & st = last_[request];
        auto & mem = slots_[st.slot];
        mem.push_back(st.root);
        int prev = -1;
        for (int v : path) {
            EXPECT_EQ(st.parents[v], prev) << "commit path is not a chain from the root";
            mem.push_back(st.nodes[v]);
            prev = v;
        }
    }

    void clear(std::int32_t slot) override { slots_[slot].clear(); }
    std::int64_t n_forward() const override { return n_forward_; }

    const std::vector<rest::token_id> & memory(int slot) const { return slots_[slot]; }
    int max_rows_   = 1 << 20;
    int leaves_max_ = 255;
    bool chains_only_ = false;  // trees() == false: every request must be a single chain
    bool keeps_prefix = true;   // keep_prefix() keeps (false: the interface's default, a clear)
    std::vector<int> rows_hist;
    std::vector<int> queued_rows_hist;  // per decode() call: prompt rows that shared it
    std::vector<std::vector<int>> rows_per_request;  // per decode() call: each request's rows, in order

  private:
    struct req_state {
        int slot = 0;
        rest::token_id root = 0;
        std::vector<rest::token_id> nodes;
        std::vector<int> parents;
        std::vector<std::vector<float>> logits;
    };
    int n_vocab_, n_ctx_slot_;
    std::uint64_t seed_;
    float scale_;
    std::vector<std::vector<rest::token_id>> slots_;
    std::vector<req_state> last_;
    std::vector<std::pair<int, std::vector<rest::token_id>>> queued_;
    std::int64_t n_forward_ = 0;
};

// Greedy plain decoding of prompt on a fresh one-slot fake_target(40, n_ctx_slot, 1, seed): the reference output.
inline std::vector<rest::token_id> plain_output(std::uint64_t seed, const std::vector<rest::token_id> & prompt, int n,
                                                int n_ctx_slot = 400) {
    fake_target          m(40, n_ctx_slot, 1, seed);
    rest::greedy_sampler s;
    rest::request        r;
    r.params.n_predict = n;
    r.sampler          = &s;
    rest::decoder(m, nullptr).run(r, prompt);
    return r.output;
}

// Drafts random trees; with probability p_oracle per level it includes the greedy continuation, so long
// accepted paths (and the compaction after them) happen often.
class oracle_drafter final : public rest::draft_provider {
  public:
    oracle_drafter(const fake_target & m, std::uint64_t seed, double p_oracle, int branching, int depth_max) :
        m_(m), rng_(seed), p_oracle_(p_oracle), branching_(branching), depth_max_(depth_max) {}

    void reset(std::span<const rest::token_id> prompt) override { ctx_.assign(prompt.begin(), prompt.end()); }
    void accept(std::span<const rest::token_id> t) override { ctx_.insert(ctx_.end(), t.begin(), t.end()); }

    rest::draft_tree draft(int n_budget) override {
        rest::draft_tree tree;
        std::uniform_real_distribution<double> u(0, 1);
        std::uniform_int_distribution<int> tok(0, m_.n_vocab() - 1);
        // Greedy chain from the context (what the target will emit), kept while the coin says so.
        std::vector<rest::token_id> p = ctx_;
        int parent = -1;
        float score = 1.0f;
        for (int d = 0; d < depth_max_ && (int) tree.size() < n_budget; ++d) {
            const auto l = m_.logits_for(p);
            rest::token_id t = rest::argmax(l);
            if (u(rng_) > p_oracle_) t = tok(rng_);
            // siblings of this chain node: random distractors (distinct tokens)
            score *= level_score;
            parent = tree.add(t, parent, score, 1);
            p.push_back(t);
        }
        // Extra random branches hanging off random nodes.
        for (int b = 0; b < branching_ && (int) tree.size() < n_budget; ++b) {
            const int at = tree.empty() ? -1 : std::uniform_int_distribution<int>(-1, (int) tree.size() - 1)(rng_);
            const int depth = at < 0 ? 1 : tree.depths[at] + 1;
            if (depth > depth_max_) continue;
            const rest::token_id t = tok(rng_);
            bool dup = false;
            for (size_t i = 0; i < tree.size(); ++i) dup |= tree.parents[i] == at && tree.tokens[i] == t;
            if (dup) continue;
            tree.add(t, at, 0.5f * (at < 0 ? 1.0f : tree.scores[at]), 2);
        }
        // Best-first order is the drafter's promise; a stable sort by score keeps parents first.
        return sorted(tree);
    }

    float level_score = 0.9f;  // what the drafter claims per level of its greedy chain, right or not

    static rest::draft_tree sorted(const rest::draft_tree & in) {
        // Order by (score desc, index asc) then re-map parents; ancestors have scores >= descendants here.
        std::vector<int> order(in.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = (int) i;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return in.scores[a] > in.scores[b]; });
        std::vector<int> where(in.size());
        for (size_t k = 0; k < order.size(); ++k) where[order[k]] = (int) k;
        rest::draft_tree out;
        for (int i : order) {
            out.add(in.tokens[i], in.parents[i] < 0 ? -1 : where[in.parents[i]], in.scores[i], in.sources[i]);
        }
        return out;
    }

  private:
    const fake_target & m_;
    std::mt19937_64 rng_;
    double p_oracle_;
    int branching_, depth_max_;
    std::vector<rest::token_id> ctx_;
};

}  // namespace rest_test
