// How many draft nodes to verify this step. The decoder asks a policy after drafting, with every request's
// scored tree in hand, so one choice covers the whole forward pass (continuous batching).
//
// Front ends never name a policy class: make_budget_policy() builds the one a budget_spec asks for, and a policy's
// learned state (budget_state) goes to and from the on-disk cache through export_state() and the spec.
#pragma once

#include "rest/cost-model.h"
#include "rest/draft-tree.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace rest {

struct budget_query {
    const draft_tree * tree = nullptr;  // best-first candidates; the policy picks a prefix length
    std::int32_t       n_past = 0;      // committed tokens of this request (attention cost grows with it)
    std::int32_t       n_max = 0;       // hard cap from the caller (context room, --draft-max, sequence ids)
    // A query may be given more nodes than its tree has (up to n_max): the decoder pads the chain with filler
    // tokens, which a policy asks for when the extra rows keep the batch shape or cost nothing. Policies leave an
    // empty tree at 0 (a plain step, computed exactly as plain decoding computes it).
};

// What the decoder measured over one step, reported after the walk.
struct step_report {
    std::int32_t n_rows = 0;      // rows of the forward pass (roots + nodes, padding included)
    std::size_t  n_requests = 0;  // requests in the pass
    // The number of requests when the pass was choose_equal()'s (equal chains in separate sequences) and ran as one
    // pass; 1 for other single passes; 0 when llama.cpp ran it as several, whose time prices no one shape.
    std::size_t  n_equal = 1;
    // Sequences the pass's tokens belong to: in the tree layout the leaves of every request's tree (at least one
    // each), in the chain layout one per request; 0: not reported. llama.cpp builds another graph when it changes,
    // at equal rows too (a chain of 2 nodes and 2 sibling nodes are different passes to it).
    std::int32_t n_seqs = 0;
    std::int32_t n_past = 0;      // mean committed tokens
    double       t_pass_us = 0;   // everything but drafting: the forward pass, the walk (sampling) and the commit
    double       t_draft_us = 0;  // drafting, over all requests
    std::int64_t n_tokens = 0;    // tokens the step emitted, over all requests
    bool         drafted = false; // some request drafted (want_draft() said yes and a request had a drafter)
    std::int32_t n_asked = 0;     // draft nodes asked of the drafters, over all requests
    bool         predicted = false;  // some request of the pass has a predicted output
    std::int32_t n_threads = 0;   // threads the pass ran on (0: not reported)
    std::int32_t n_threads_context = 0;  // the context's threads, which plain passes run on (0: not reported)
};

// What a policy has learned, to persist between processes (warm start). Plain data; the front end stores it as
// versioned JSON next to the cost table (apps/cost-cache.h).
struct budget_state {
    struct bin {
        double n = 0;         // verified draft nodes whose parent was accepted
        double accepted = 0;  // of which accepted
    };
    std::vector<bin> acceptance;  // [source mask (0..15) * bins_per_source + score bin]
    // Measured / start-up-table time of one request's pass of `rows` rows, for the row counts observed.
    std::vector<std::pair<std::int32_t, double>> cost_ratio;
    double cost_ratio_all = 1.0;  // the same over every shape
    double cold_us = 0;           // a shape's first pass in a process over its second (0: not measured)
    double t_draft_us = 0;        // drafting time per step
    double t_draft_node_us = 0;   // ... per node asked for
    // Per batch-size class (1, 2, 3-4, 5-8, 9-16, 17+ requests; then the same for passes with a prediction), of
    // drafting steps: the realised gain's two sides
    // (EMAs per step of what plain decoding would have taken for the tokens emitted, and of the time taken, a
    // steady plain step's as plain's estimate plus its drafting time; 0:
    // never measured), the back-off level of the probes, and the plain steps left before the next probe.
    std::vector<double>       plain_us;
    std::vector<double>       spent_us;
    std::vector<std::int32_t> n_off;
    std::vector<std::int32_t> off_left;  // plain steps left before the next probe (0: drafting)
    // One request's learned value of being at each pass shape, by rows (index 0 unused; in tokens).
    std::vector<double>       shape_values;
};

class budget_policy {
  public:
    virtual ~budget_policy() = default;
    // Whether to draft this step, for a pass over n_requests requests, some with a predicted output or not (a
    // policy switches drafting off where it does not pay, and probes again at a bounded rate).
    virtual bool want_draft(std::size_t n_requests, bool predicted) {
        (void) n_requests;
        (void) predicted;
        return true;
    }
    // Most nodes the policy is likely to verify per request this step, so that drafting can size its work to it
    // (a chain's best path from a 32-node tree costs 2-3x drafting an 8-node one; on a tiny model that is several
    // percent of a step). Any value >= 1; a policy may still choose more nodes than it said.
    virtual std::int32_t draft_nodes_hint() const { return 64; }
    // Nodes to draft for a tree layout, where the drafted nodes are all the policy can choose from: the hint, or
    // more for a policy that needs room to grow (a chain gets its room from draft_chain()'s larger tree).
    virtual std::int32_t tree_draft_nodes() const { return draft_nodes_hint(); }
    // The lowest drafter score (estimated path probability) a chain node may have for this policy to verify it: a
    // chain grown token by token (draft_provider::draft_chain) stops before it, its first draft_nodes_hint() nodes
    // apart (whether to verify those is choose()'s call). 0: grow to the length asked.
    virtual float chain_score_min() const { return 0.0f; }
    // For each query, n_out[i] in [0, n_max]: verify the first n_out[i] nodes of the tree (0: plain decoding), the
    // ones past its size being padding.
    virtual void choose(std::span<const budget_query> queries, std::span<std::int32_t> n_out) = 0;
    // The same choice when every request must verify the same number k of nodes: chains of several requests in
    // separate sequences, which llama.cpp splits into one forward pass per distinct per-sequence token count (its
    // split_equal), so the decoder pads shorter chains up to k. Returns k. The default: the largest of choose()'s.
    virtual std::int32_t choose_equal(std::span<const budget_query> queries);
    // A forward pass the policy did not choose (prompt processing): the next step's shape counts as a change.
    virtual void observe_other_pass() {}
    // A forward pass of max_rows rows (one request) ran before any request (warm_up() in rest/cost-model.h), so no
    // size up to it is a process's cold first pass.
    virtual void observe_warm_up(std::int32_t max_rows) { (void) max_rows; }
    // A request starts; predicted: it has a predicted output. Each prediction is a workload of its own (an exact one
    // pays at any length, an unrelated one never), so what an earlier one showed must not switch the next one off.
    virtual void observe_request(bool predicted) { (void) predicted; }
    // CPU threads for a forward pass of n_rows rows over n_requests requests (0: the context's own).
    virtual std::int32_t threads_for(std::int32_t n_rows, std::size_t n_requests) const {
        (void) n_rows;
        (void) n_requests;
        return 0;
    }
    // Feedback per request, during the walk: the first n_verified nodes of tree were verified and `path` (root's
    // child first) was accepted. Comes before the step's observe_step().
    virtual void observe_acceptance(const draft_tree & tree, std::int32_t n_verified, std::span<const std::int32_t> path) {
        (void) tree; (void) n_verified; (void) path;
    }
    // Feedback once per step, after the walk.
    virtual void observe_step(const step_report & report) { (void) report; }
    // What the policy has learned (empty for policies that learn nothing).
    virtual budget_state export_state() const { return {}; }
};

// What a front end asks for; every front end (generate, bench, serve, bench --streams) builds its policy here.
struct budget_spec {
    bool         speculate = true;  // false: plain decoding (a fixed budget of 0)
    std::int32_t n_fixed = -1;      // >= 0: verify exactly this many nodes per step (REST's and the peers' way)
    std::int32_t n_max = 64;        // the automatic policy's cap on nodes per request and step
    cost_table   costs;             // measured at start-up: the prior for the automatic policy's costs
    // Learned state of an earlier run with the same model, datastore, layout and threads; nullptr: a cold start.
    const budget_state * warm = nullptr;
};

std::unique_ptr<budget_policy> make_budget_policy(const budget_spec & spec);
// Most draft nodes the decoder may offer per request under spec (a request's n_draft_max).
std::int32_t budget_cap(const budget_spec & spec);

}  // namespace rest
