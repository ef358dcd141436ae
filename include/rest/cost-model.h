// Verify cost t(rows, n_past) of one forward pass, measured rather than assumed, and the budget policy built on it.
//
// t depends on the batch rows (compute-bound on CPUs: 8 rows cost ~3x one; nearly flat on GPUs up to ~64) and on
// the context fill (attention reads every cached position). The table is measured at start-up (calibrate_cost),
// cached on disk by the front end, and corrected online by the policy from measured step times.
#pragma once

#include "rest/budget.h"
#include "rest/target-model.h"

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rest {

struct cost_table {
    std::vector<std::int32_t> rows;       // increasing batch sizes (>= 1)
    // Forward-pass time at each size with a short context, when the previous pass had the same size (llama.cpp
    // then reuses its compute graph). Not forced to grow with rows: on tiny models a 2-row pass can cost less than
    // a 1-row one (ggml's CPU sgemm needs at least 2 rows; one row goes through per-element dot products).
    std::vector<double>       t_us;
    double                    attn_us = 0;     // extra time per row per cached position (attention), >= 0
    double                    rebuild_us = 0;  // extra time of a pass whose size differs from the previous one's
    // CPU threads that gave t_us at each size (0 or empty: the context's own). Small models can run small batches faster on
    // fewer threads than the context has; the decoder sets this count per pass.
    std::vector<std::int32_t> threads;

    // Interpolated (linearly between measured sizes, extrapolated linearly past the last one); steady shape.
    double predict_us(std::int32_t n_rows, std::int32_t n_past) const;
    // Sizes increasing from 1 with a time each (and a thread count each, if any), and so every row of the batch grid.
    bool   valid() const;
    // Index of the measured size nearest to n_rows (ties: the larger); 0 for an empty table.
    std::size_t  nearest(std::int32_t n_rows) const;
    // The thread count measured fastest at the nearest size (0: the context's own).
    std::int32_t threads_for(std::int32_t n_rows) const;
    // The same for a pass over n_requests requests, each a chain of about n_rows / n_requests rows: the batch grid's
    // count when it was measured, else the context's own (0).
    std::int32_t threads_for(std::int32_t n_rows, std::size_t n_requests) const;

    // Passes over several requests, each verifying a chain of the same number of rows: the chain layout's batched
    // steps, every request's rows in its own sequence. They do not cost t(total rows): llama.cpp computes
    // attention per sequence, which dominates on small models. stories260K, 4 requests, measured: one row each
    // 0.69 ms (2 threads), two rows each 0.57 ms (1 thread), while one request's 8-row chain takes 0.53 ms.
    struct batch_costs {
        std::int32_t              requests = 0;  // >= 2
        std::vector<std::int32_t> per;           // rows per request, increasing from 1
        std::vector<double>       t_us;          // steady shape, short context
        std::vector<std::int32_t> threads;       // fastest count at each (0: the context's own)
    };
    std::vector<batch_costs> batches;  // increasing requests; empty: such passes are priced as t(total rows)

    // A pass of n_rows rows over n_requests equal chains: from the batch grid (linear in rows per request and in
    // requests, one request being the table above; past the largest measured count, proportional to requests),
    // or t(n_rows) without one.
    double predict_batch_us(std::size_t n_requests, std::int32_t n_rows, std::int32_t n_past) const;
    // Index into batches of the measured request count nearest to n_requests (ties: the larger), and within it the
    // nearest rows per request; {batches.size(), 0} without a grid or for one request.
    std::pair<std::size_t, std::size_t> nearest_batch(std::size_t n_requests, std::int32_t n_rows) const;

    // One-line text form for the on-disk cache: "rest-cost 4 <attn_us> <rebuild_us> <n> rows... t_us... threads...
    // <n_batches> then per batch <requests> <m> per... t_us... threads...".
    // parse() returns an invalid table for anything malformed or older (the cache is then simply re-measured).
    std::string        serialize() const;
    static cost_table  parse(const std::string & text);
};

struct calibrate_params {
    std::vector<std::int32_t> rows = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
    std::int32_t              n_reps = 7;         // rounds over the sizes; each times n_block passes of one size
    std::int32_t              n_block = 3;        // the first pass of a block pays the graph rebuild, the rest not
    // Also time every size of 2+ rows on one thread when the context has more; dropped for larger sizes once it is
    // this much slower than the context's own count (so a big model pays one extra block). One row keeps the
    // context's count, as plain decoding (flash attention splits one row's KV range across threads).
    bool                      try_one_thread = true;
    double                    drop_slower = 1.5;
    std::int32_t              n_past_long = 256;  // second context fill, to fit attn_us
    double                    max_seconds = 20;   // stop adding sizes once calibration has taken this long
    // Batched passes (chain layout, several slots): rows per request, and their own time budget. Request counts:
    // 2, 4, 8, ... below the context's slots, and the slots themselves.
    std::vector<std::int32_t> per = {1, 2, 3, 4, 6, 8};
    double                    max_seconds_batches = 20;
    // Once one and two rows per request cost t(total rows) within this fraction at every request count, longer
    // chains are not measured (weight-bound models, where the grid would only repeat the one-request table).
    double                    grid_agree = 0.15;
};

// Always verifies min(n, n_max) nodes, padding short drafts (none without a draft): the fixed budgets REST and most
// peers use. Given a measured cost table, a pass runs on the thread count measured fastest for its size, as the
// adaptive policy's do, so that comparisons between budgets compare the budgets.
class fixed_budget final : public budget_policy {
  public:
    explicit fixed_budget(std::int32_t n, cost_table costs = {}) : n_(n), costs_(std::move(costs)) {}
    void choose(std::span<const budget_query> queries, std::span<std::int32_t> n_out) override;
    std::int32_t threads_for(std::int32_t n_rows, std::size_t n_requests) const override {
        return costs_.threads_for(n_rows, n_requests);
    }

  private:
    std::int32_t n_;
    cost_table   costs_;
};

// Measures t(rows) on `slot` of the model with throwaway chain drafts, then clears the slot. The slot must be idle.
// A context with several slots that verifies chains (target_model::trees() false) also gets the batch grid, measured
// on slots 0.. of each request count, which must then all be idle; they are cleared too.
cost_table calibrate_cost(target_model & model, std::int32_t slot, const calibrate_params & params = {});
// The batch grid alone (part of calibrate_cost), into table.batches; table.rows must hold the one-request sizes.
void calibrate_batches(target_model & model, cost_table & table, const calibrate_params & params = {});

struct adaptive_budget_params {
    std::int32_t n_max = 64;            // hard cap on nodes per request
    double       prior_weight = 4.0;    // pseudo-observations behind the drafter's own score in calibration
    double       time_ema = 0.05;       // weight of a new step in the online cost correction
    // When drafts keep not paying and drafting itself costs more than draft_cost_frac of a plain step, draft only
    // every 2, 4, ... backoff_max steps. (Cheap drafting never backs off: a paying draft can come any step.)
    std::int32_t backoff_max = 16;
    double       draft_cost_frac = 0.02;
    // Exploration: when drafting does not pay but the best node's drafter score is at least explore_min_score,
    // verify the first nodes whose calibration bins have fewer than explore_obs observations (at most
    // explore_nodes), so a pessimistic start can recover. Only on the 1st, 2nd, 4th, 8th, ... consecutive step
    // that does not pay, and at most explore_obs rows per bin, which bounds what exploring can cost.
    float        explore_min_score = 0.25f;
    std::int32_t explore_obs = 16;
    std::int32_t explore_nodes = 2;      // most nodes one exploring step verifies
};

// Chooses, for all requests of a forward pass together, the draft prefixes that maximise expected tokens per
// second: sum_r (1 + E_r[accepted]) / (t(rows) + t_draft), where t(rows) includes the graph rebuild when rows
// differs from the last pass's, against plain decoding's nq / t(nq). Padding rows (filler beyond a tree's nodes, worth nothing) are allowed, so a step
// keeps the last shape when a rebuild would cost more than the rows, or takes a cheaper shape (2 rows < 1 row on
// tiny CPU models). E is the sum of the nodes' path probabilities, each the
// product along its path of calibrated conditional probabilities: a node's drafter score over its parent's (the
// chance it is accepted once its parent is), mapped per source and score bin to the acceptance realised so far by
// nodes whose parent was accepted. Conditional bins learn from the first levels and apply at every depth, so a
// drafter whose deep nodes are underrated (single-occurrence continuations score 1/2 per level) gets long drafts.
// Picks 0 (plain decoding) when no draft pays for its cost, and then backs off, probing again at spaced steps.
class adaptive_budget final : public budget_policy {
  public:
    adaptive_budget(cost_table table, adaptive_budget_params params = {});

    bool want_draft() override;
    // Two more than the most nodes chosen for a request over the last k_recent steps: room to grow step by step.
    std::int32_t draft_nodes_hint() const override;
    void choose(std::span<const budget_query> queries, std::span<std::int32_t> n_out) override;
    std::int32_t choose_equal(std::span<const budget_query> queries) override;
    void observe_step(std::int32_t n_rows, std::size_t n_equal, std::int32_t n_past, double t_us,
                      double t_draft_us) override;
    std::int32_t threads_for(std::int32_t n_rows, std::size_t n_requests) const override {
        return table_.threads_for(n_rows, n_requests);
    }
    void observe_other_pass() override { last_rows_ = 0; }
    void observe_acceptance(const draft_tree & tree, std::int32_t n_verified, std::span<const std::int32_t> path) override;

    // The probability the policy currently assigns to a node being accepted once its parent is, for this
    // conditional drafter score (the node's score over its parent's) and source mask.
    double calibrated(float score, std::uint8_t sources) const;
    // Path probabilities of every node of t: products of calibrated() along each path.
    std::vector<double> path_probabilities(const draft_tree & t) const;
    // Predicted forward-pass time including the online correction, steady shape. n_equal as in observe_step():
    // a pass of several requests' equal chains is priced from the table's batch grid.
    double predict_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal = 1) const;
    // The same plus the graph rebuild if the shape (rows, or requests of equal chains) differs from the last pass.
    double step_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal = 1) const;
    // A whole drafting step of n_rows: step_us times the guard's factor, plus drafting.
    double drafting_step_us(std::int32_t n_rows, std::int32_t n_past, double inflate, std::size_t n_equal = 1) const;
    // The guard's current cost factor for drafting configurations of a batch of nq requests (1: none).
    double draft_cost_factor(std::size_t nq) const { return guard_[std::min<std::size_t>(nq, k_guards - 1)].inflate; }
    const cost_table & table() const { return table_; }

  private:
    static constexpr int k_bins = 10;
    struct bin {
        double n = 0;         // verified nodes
        double accepted = 0;  // of which accepted
    };
    void        settle_last_step();
    // What choose() and choose_equal() read from a batch of queries.
    struct batch {
        std::vector<std::size_t>         lim;      // per query: most drafted nodes it may verify
        std::vector<std::size_t>         pad;      // per query: most nodes, padding included (>= lim; 0: no draft)
        std::vector<std::size_t>         cap;      // per query: what equal rows pad it to at most (drafts or not)
        std::vector<std::vector<double>> prob;     // per query: path probabilities of its nodes (empty if lim 0)
        std::size_t                      lim_max = 0;
        std::size_t                      pad_max = 0;
        std::int32_t                     n_past  = 0;  // mean committed tokens
    };
    batch prepare(std::span<const budget_query> qs) const;
    // Shared by choose() and choose_equal() once the best configuration is known: arms the guard when it pays,
    // else backs off. Returns the request that explores this step and how many of its nodes (nq: none).
    std::pair<std::size_t, std::int32_t> after_choice(std::span<const budget_query> qs, std::span<const std::size_t> lim,
                                                      double t_plain, std::int32_t rows_best);

    // Guard against model error: per number of requests in the batch, the realised rate of drafting steps
    // (tokens per microsecond, drafting included) against the predicted plain rate. While drafting steps realise
    // less than plain would, drafting configurations are costed `inflate` times higher (up to 4x), so the policy
    // keeps only drafts that pay by a margin; the factor relaxes again when they do pay.
    struct guard {
        double ratio = 1.0;    // EMA of realised / predicted-plain rate over drafting steps
        double inflate = 1.0;  // multiplies drafting configurations' predicted time
    };
    static constexpr int k_guards = 17;  // batches of 1..16 requests, and more
    std::array<guard, k_guards> guard_{};
    bool                        pending_ = false;   // the last step drafted; settled at the next choose()
    std::size_t                 pend_nq_ = 0;
    double                      pend_plain_us_ = 0;
    double                      pend_time_us_ = -1;
    double                      pend_tokens_ = 0;

    cost_table                              table_;
    adaptive_budget_params                  params_;
    std::vector<double>                     correction_;  // measured/predicted per table size, EMA (0: unobserved)
    std::vector<std::vector<double>>        correction_batch_;  // the same per point of the batch grid
    double                                  correction_all_ = 1.0;  // the same over all sizes
    std::array<std::array<bin, k_bins>, 8>  calib_{};     // [source mask][score bin]
    double                                  t_draft_us_ = 0;  // EMA of drafting time per step
    std::int32_t                            n_zero_ = 0;      // consecutive steps that chose no draft at all
    std::int32_t                            skip_ = 0;        // steps left before drafting again
    std::int32_t                            last_rows_ = 0;   // rows of the last observed pass (0: none yet)
    std::size_t                             last_equal_ = 1;  // its n_equal
    // The EMA of this shape (a grid point, or a one-request size), for reading or updating.
    template <class Self> static auto & correction_slot(Self & self, std::int32_t n_rows, std::size_t n_equal);
    double correction_of(std::int32_t n_rows, std::size_t n_equal) const;  // ... or the shared one if unobserved
    static constexpr std::size_t            k_recent = 32;
    std::array<std::int32_t, k_recent>      recent_{};        // most nodes chosen for a request, last steps (ring)
    std::size_t                             recent_at_ = 0;
    void                                    note_choice(std::int32_t n_nodes);
};

}  // namespace rest
