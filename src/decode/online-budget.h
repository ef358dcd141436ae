// The automatic draft budget: a small estimator of tokens per second at each draft length, learned while it runs,
// and a decision. Built only by make_budget_policy() (rest/budget.h); tests include this header to look inside.
// Defined in three files: online-budget.cpp (acceptance, the choice, feedback), online-budget-costs.cpp (the cost
// estimates) and online-budget-gain.cpp (the realised gain, plain checks and probes).
//
// Three estimates, each measured online and corrected every step:
//  - acceptance: the chance a node is accepted once its parent is, per source and drafter-score bin (the drafter's
//    own score is the prior, prior_weight pseudo-observations strong), times a correction of at most 1: what the
//    verified nodes realised over what was predicted for them (optimism(); the choice verifies the nodes whose
//    estimates run high, so its estimates of them run high: 5% on stories260K);
//  - cost: the time of a whole step (forward pass, walk and commit; drafting apart) per shape, as a ratio to the
//    start-up table, which is only the prior; one request's drafting shape never measured takes its measured
//    neighbours' figures (interpolated in rows, on its thread count; where it has none, and for other shapes, the
//    ratio shared by all shapes on that thread count), and an estimate not re-measured fades to the same, so one
//    stale reading cannot keep a length switched off; what a change of shape adds (llama.cpp rebuilds its graph;
//    apart, a change of thread count too), learned from the passes that changed;
//    and what a shape's first pass in the process costs over its second (cold_us()), which those passes do not set;
//  - gain: per batch-size class (and apart for passes with a predicted output), the time plain decoding would have taken for the tokens drafting steps emitted,
//    over the time they took (drafting included, and the graph rebuild of the plain pass that ends a drafting run;
//    a process's first pass, cold, is not measured), both means of measured steps (each step's pass and drafting
//    counted at most preempt_cap times their typical time: a preempted pass cannot hide a loss), except that a steady plain step
//    of the drafting regime is charged plain's estimate plus its drafting time. This is the check the others answer
//    to: the per-step choice maximises the first two's expected tokens net of their time at the rate decoding runs
//    at (see worth()), and where drafting loses by more than the
//    steps' spread explains, it is switched off and probed again after 8, 16, ... off_max plain steps.
// What a change of shape costs is paid once, but earns (or loses) over the steps after it. For one request each
// pass shape (its rows; plain is 1) has a learned value, what being there is worth over the next ~20 steps, which
// the choice adds to a step's worth (learn_values()); batches of several requests are charged a change of regime
// (plain or drafting) on leaving the one that prevails instead (priced_change_us()).
#pragma once

#include "rest/budget.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rest {

// The entry of a per-thread-count vector, grown with `init` to hold it.
template <class T> T & per_threads(std::vector<T> & v, std::int32_t threads, const T & init) {
    if ((std::size_t) threads >= v.size()) v.resize((std::size_t) threads + 1, init);
    return v[(std::size_t) threads];
}

struct online_budget_params {
    std::int32_t n_max = 64;            // hard cap on nodes per request
    double       prior_weight = 4.0;    // pseudo-observations behind the drafter's own score
    double       optimism_memory = 0.998;  // what optimism()'s sums keep of the past each step (~500 steps)
    double       bin_cap = 2000;        // evidence per acceptance bin is capped, so a new workload moves it
    double       time_ema = 0.05;       // weight of a new step in the cost ratio shared by all shapes
    double       forget_steps = 500;    // a cost estimate not re-measured fades linearly to the shared ratio: half-way
                                        // after this many steps, all the way after twice as many
    double       gain_ema = 0.05;       // weight of a new drafting step in the realised gain (after the first ones)
    double       loss_z = 2.0;          // drafting is switched off when its loss exceeds this many standard errors
    // In the realised gain, on both sides, a pass (or a step's drafting) counts at most this multiple of its typical
    // time (see gain_caps_of()).
    double       preempt_cap = 4.0;
    double       plain_ema = 0.1;       // weight of a new plain step in what plain decoding costs per token
    double       rate_ema = 0.02;       // weight of a step in the rate decoding runs at (see worth())
    double       slow_ema = 0.02;       // weight of a pass in its thread count's slowdown (see slowdown())
    std::int32_t probe_steps = 16;      // drafting steps measured before the gain decides
    std::int32_t warm_up_steps = 6;     // a process's first passes, which set no cost estimate (observe_step())
    // While drafting, a check (plain steps, below) every plain_every to plain_every_max steps, so that the gain
    // compares with what plain decoding costs now (steps without a draft count too): as often as keeps these checks
    // near plain_cost_frac of the time, over the gain drafting measured (plain_interval()).
    std::int32_t plain_every = 64;
    std::int32_t plain_every_max = 4096;
    // At most how many plain passes a check runs to see a steady one. Plain's cost is learned from steady plain
    // passes only (the shape of the pass before): the first pass after drafting pays a change of shape (llama.cpp's
    // graph, on a CPU the thread count), which a Zen 4 CPU at two threads put at 0.2-0.35 ms against a 0.13 ms plain
    // pass; less a learned change that was not yet right, such passes priced plain 2-3x dear and kept a losing draft
    // on for 800 steps. So a check is two plain passes as a rule, and ends at its first steady one; a pass that is
    // not (a tree's rows decoded again, a prompt chunk sharing the pass) makes it go on.
    std::int32_t check_passes_max = 4;
    double       check_ema = 0.02;    // weight of a plain pass in the mean a check costs, after the first 1 / check_ema
    double       plain_cost_frac = 0.01;
    // One request's shapes (rows of its pass): the value of being at each, learned from every step's draft (see
    // learn_values()), so that a change of shape is paid once for what it earns over the steps after it.
    double       value_ema = 0.1;       // weight of a step in a shape's value
    double       value_discount = 0.95; // weight of the next step's value in this one's (a horizon of ~20 steps)
    double       draft_cost_frac = 0.02;  // drafting worth this fraction of a step (as decoding runs) is always affordable
    std::int32_t off_min = 8;           // plain steps after the first probe that did not pay; doubling ...
    std::int32_t off_max = 1024;        // ... up to this many (probes then cost < 1% where drafts never pay)
    // Exploration: a first node whose bin has fewer than explore_obs observations is verified even when the
    // estimate says it does not pay, if its drafter score is at least explore_min_score, so a pessimistic prior
    // can recover. Bounded: at most explore_obs such rows per bin, ever, and what they cost beyond a plain step at
    // most explore_cost_frac of the time decoding took plus explore_start_steps plain steps' worth (on a CPU a 1.1B
    // Q4_0 model's second row costs 0.9 of a plain step: 37 such rows took 6% of an 8 x 64-token bench).
    float        explore_min_score = 0.25f;
    std::int32_t explore_obs = 16;
    double       explore_cost_frac = 0.01;
    double       explore_start_steps = 4;
};

class online_budget final : public budget_policy {
  public:
    online_budget(cost_table table, online_budget_params params = {}, const budget_state * warm = nullptr);

    bool want_draft(std::size_t n_requests, bool predicted) override;
    // One more than recent_choice() (chains get their room to grow from drafter::draft_chain()'s twice it: a policy that keeps
    // choosing every node drafted doubles its chains every k_recent_share steps; trees ask tree_draft_nodes()), and
    // at least as many nodes as drafting for draft_cost_frac of a step buys (all of them on a large model).
    // Every node drafted and not verified costs drafting time: on stories260K each costs ~1.7 us, ~0.7% of a step.
    std::int32_t draft_nodes_hint() const override;
    // What one more row costs next to a plain step, at the rows of the hint's chain: a node whose acceptance is
    // below it cannot raise the expected rate (which drafting keeps at or above plain decoding's), halved because
    // drafter scores are not yet calibrated (calibrated() may raise them).
    float chain_score_min() const override;
    std::int32_t tree_draft_nodes() const override;  // the hint with room to double: 2 + twice the recent choice
    void choose(std::span<const budget_query> queries, std::span<std::int32_t> n_out) override;
    std::int32_t choose_equal(std::span<const budget_query> queries) override;
    void observe_warm_up(std::int32_t max_rows) override;
    // A pass with another request's prompt rows ran on the context's threads, in a shape of its own.
    // (observe_step() takes no cost sample from the pass after it: see after_other there.)
    void observe_other_pass() override { last_rows_ = 0; last_requests_ = 0; last_seqs_ = 0; last_threads_ = context_threads_; }
    void observe_request(bool predicted) override;  // a prediction: its classes probe afresh if switched off
    std::int32_t threads_for(std::int32_t n_rows, std::size_t n_requests) const override {
        return table_.threads_for(n_rows, n_requests);
    }
    void observe_acceptance(const draft_tree & tree, std::int32_t n_verified, std::span<const std::int32_t> path) override;
    void observe_step(const step_report & r) override;
    budget_state export_state() const override;

    // The probability currently assigned to a node being accepted once its parent is, for this conditional
    // drafter score (the node's score over its parent's) and source mask.
    double calibrated(float score, std::uint8_t sources) const;
    // Path probabilities of every node of t: products of calibrated() along each path.
    std::vector<double> path_probabilities(const draft_tree & t) const;
    // What the choice multiplies path probabilities by: accepted drafted nodes over predicted, over the drafts
    // verified lately (4 pseudo-nodes at 1), within [0.5, 1]. Above 1 it would say the estimates run low, which the
    // bins themselves correct; the choice's own selection only makes them run high. Drafts whose verified nodes hold
    // a predicted output neither feed it nor take it.
    double optimism() const;
    // Predicted time of a step's pass (all but drafting), steady shape; n_equal as in step_report.
    // n_seqs as in step_report: in the tree layout each leaf beyond one per request costs seq_us() more (llama.cpp's
    // unified KV pool pays per sequence: a 13-row tree of 5 leaves took 4.9 ms on stories260K where a 13-row chain
    // takes 1.0), learned from the branchy passes themselves (0 until one is seen).
    double predict_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal = 1, std::int32_t n_seqs = 0) const;
    // The same plus what a change of shape is priced at (priced_change_us(): for one request, a shape's cold first
    // pass where that is more than the change) if the shape (rows, n_equal and, when known, n_seqs as in step_report) differs from the
    // last pass's, times the slowdown of its thread count: what a step is priced at.
    double step_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal = 1, std::int32_t n_seqs = 0) const;
    // What one request's first pass of n_rows rows in this process costs beyond the next one (0 once the process has
    // run that shape), which a change to it is priced at when that is more than a change: llama.cpp's first graph of
    // a shape, and the pass's memory, run cold. On the demo model a process's first 9-row pass took 626 us, its
    // second 458; a one-shot `rest generate` that tried five shapes paid that five times in a 10 ms generation.
    // Learned from such pairs of passes (observe_step()) and persisted, so that a short process keeps to the shapes
    // it has run unless another earns its first pass.
    double cold_us(std::int32_t n_rows, std::size_t n_equal) const;
    bool   seen(std::int32_t n_rows) const {
        return n_rows >= 0 && (std::size_t) n_rows < seen_.size() && seen_[(std::size_t) n_rows];
    }
    // Realised gain of drafting for batches of n_requests (1: drafting pays as much as plain decoding).
    double gain(std::size_t n_requests, bool predicted = false) const;
    // Whether drafting, as chosen, beats plain decoding for the current class by more than the steps' spread explains.
    bool   drafting_pays() const;
    // The regime priced as prevailing for batches of several requests (see priced_change_us()): drafting pays, or,
    // not measured to lose, its cheapest pass (n_equal as in step_report) costs no more than a plain one at n_past.
    bool   drafting_prevails(std::int32_t n_past, std::size_t n_equal = 1) const;
    // Whether drafting is switched off for batches of n_requests now.
    bool   drafting_off(std::size_t n_requests, bool predicted = false) const {
        return mode_[bucket(n_requests, predicted)].off_left > 0;
    }
    const cost_table & table() const { return table_; }

    static constexpr int k_bins = 10;  // score bins per source mask

  private:
    using bin = budget_state::bin;
    // Per batch-size class: the realised gain and the off/probe schedule.
    struct mode {
        double       t_plain = 0;   // EMA: what plain decoding would have taken for the tokens emitted
        double       t_spent = 0;   // EMA: what the drafting steps took (see update_gain())
        std::int32_t steps = 0;     // drafting steps since drafting was (re)switched on
        std::int32_t off_left = 0;  // plain steps left before the next probe
        std::int32_t n_off = 0;     // probes in a row that did not pay
        std::int32_t since_plain = 0;  // drafting steps since this class last ran a steady plain pass
        std::int32_t check_left = 0;   // plain passes left in the check under way
        std::int32_t n_steady = 0;     // steady plain passes in plain_ratio (the first ones replace the prior)
        double       plain_ratio = 0;  // EMA of a steady plain pass's measured / start-up time (capped: gain_caps_of())
        // The mean time of a plain pass (its change of shape included): what a check costs (plain_interval()). A
        // long memory: with a busy core at two threads, plain passes took 0.4-0.7 ms and now and then 4-168 ms, and
        // plain_ratio's EMA forgot each slow one within a few checks, which then took 16-26% of the passes' time.
        // Neither is saved with the warm state (nor is plain_ratio): a run measures its own.
        double       check_us = 0;
        std::int32_t n_plain_seen = 0;  // plain passes in check_us (every plain pass, not only checks)
        // The spread of the loss (t_spent - t_plain per step) comes from the steps whose pass time was measured: a
        // step that verified nothing after a pass of its shape lost exactly its drafting time and exit charge
        // (update_gain()).
        double       loss_var = 0;  // EMA variance of a measured step's loss, around loss_mean
        double       loss_mean = 0; // EMA of a measured step's loss
        double       noisy_share = 1;  // EMA of the share of this probe's drafting steps that were measured
        std::int32_t noisy_steps = 0;  // measured steps in loss_var since the probe began (begin_probe())
        std::int32_t var_steps = 0; // drafting steps measured since the probe began (a warm or seeded gain has none)
        double       rate_tokens = 0, rate_us = 0;  // EMAs of a step's tokens and time, every step (see worth())
        std::int64_t n_rated = 0;   // steps in them
        bool         measured = false; // a gain was measured (or warm-started, or seeded from a neighbour)
        // What the plain pass that ended the last drafting run paid for its change of shape: drafting caused it, so
        // the next drafting step's side of the gain carries it (plain's side learns from steady passes only).
        double       exit_us = 0;
    };
    void seed_from_neighbour(std::size_t c);
    static void begin_probe(mode & m);  // drafting on again, its gain to be measured afresh
    double loss_noise(const mode & m) const;  // a drafting step's loss beyond which it is not noise (HUGE_VAL: too few)
    // By batch size (1, 2, 3-4, 5-8, 9-16, 17+ requests), and whether a request of the pass has a prediction (its
    // drafts pay where the others may not: a class switched off for ordinary requests must not block them).
    static constexpr std::size_t k_sizes   = 6;
    static constexpr std::size_t k_classes = 2 * k_sizes;
    static std::size_t bucket(std::size_t n_requests, bool predicted);
    // A cost estimate: the median of the last k_window measured / prior times (robust to a preempted step, and
    // caught up with a change of machine load within k_window / 2 + 1 passes), and the step it was measured at.
    static constexpr std::size_t k_window = 5;
    static constexpr std::size_t k_persist_min = 3;  // passes of a shape before its estimate is persisted
    struct cost_est {
        std::array<double, k_window> ratios{};
        std::size_t                  n = 0;  // ratios recorded (the ring holds the last k_window)
        std::size_t                  n_measured = 0;  // of them measured by this process (not a warm start's)
        double                       warm = 0;  // the warm start's ratio (0: none), persisted again until measured
        std::int64_t                 at = 0;
        double                       median = 1.0;  // of the window, kept current by observe_step()
        void   add(double v);  // records a measurement and updates the median
        double median_of_window() const;
    };
    // Sequences beyond one per request (0 for chains and plain passes; the key of branchy trees' estimates).
    static std::int32_t  extra_seqs(std::size_t n_equal, std::int32_t n_seqs);
    static std::uint64_t shape_key(std::int32_t n_rows, std::size_t n_equal) {
        return ((std::uint64_t) n_equal << 32) | (std::uint32_t) n_rows;
    }
    double seq_us() const;  // what a sequence beyond one per request adds to a pass (learned; 0 until measured)
    double prior_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal) const;
    double ratio_of(std::int32_t n_rows, std::size_t n_equal, std::int32_t threads) const;  // threads: threads_of()'s
    double ratio_of(std::int32_t n_rows, std::size_t n_equal) const {
        return ratio_of(n_rows, n_equal, threads_of(n_rows, n_equal));
    }
    double faded(const cost_est & e, double toward) const;  // e's median, faded toward `toward` by its freshness
    double freshness(std::int64_t at) const;  // weight of a figure last measured at step `at` (1 now, 0 when stale)
    // predict_us() for a pass on `threads` (threads_of() of the shape, which a caller that needs it too passes in).
    double predict_on(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs,
                      std::int32_t threads) const;
    // The estimate of a shape: one request's in a flat vector (the hot path prices every row count each step),
    // several requests' in a map. find_est() returns nullptr for a shape never measured.
    const cost_est * find_est(std::int32_t n_rows, std::size_t n_equal) const;
    cost_est &       est_for(std::int32_t n_rows, std::size_t n_equal);
    static constexpr std::int32_t k_rows_flat = 4096;
    double drafting_step_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs) const;
    // step_us() of one request's pass in parts: its steady time and the change charged if its shape is not the last
    // pass's (single_change_us()), both times its threads' slowdown.
    struct single_price {
        double       steady_us = 0, change_us = 0;
        std::int32_t threads   = 0;
    };
    single_price price_single(std::int32_t n_rows, std::int32_t n_past, std::int32_t n_seqs) const;
    // Whether a pass of this shape follows the last one without a graph rebuild; n_seqs 0 (or none reported) is
    // not compared.
    bool   same_shape(std::int32_t n_rows, std::size_t n_equal, std::int32_t n_seqs) const {
        return n_rows == last_rows_ && n_equal == last_equal_ && (n_seqs == 0 || last_seqs_ == 0 || n_seqs == last_seqs_);
    }
    double rebuild_us() const;  // what a change of shape costs now (learned; the table's figure until measured)
    // Whether this pass is one request's first of its shape in the process (marking it seen), after taking the
    // pending first pass's cold cost from it where it is that shape's second (see cold_us()).
    bool   observe_first_use(const step_report & r, bool same, bool warm_up);
    void   mark_seen(std::int32_t n_rows);  // one request's pass of n_rows rows ran in this process
    // One request's change to a pass of n_rows rows on `threads`: the change itself (change_us()), or the shape's
    // cold first pass (cold_us()) where that is more.
    double single_change_us(std::int32_t n_rows, std::size_t n_equal, std::int32_t threads) const;
    // What a change to a pass on `threads` costs after a pass on `from` (last_threads_: the last pass): rebuild_us(),
    // or when the thread count changes too, what such changes were measured to cost (learned apart).
    double change_us(std::int32_t threads, std::int32_t from) const;
    // What step_us() charges a pass of n_rows on `threads` for not having the last pass's shape (see the definition).
    double priced_change_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t threads) const;
    // Threads a pass of n_rows (n_equal as in step_report) over the batch being priced (n_live_ requests) runs on.
    std::int32_t threads_of(std::int32_t n_rows, std::size_t n_equal) const;
    // What one request's drafting shape of n_rows without a fresh figure of its own is priced at: its measured
    // neighbours' ratios on its thread count (`threads`: threads_of(n_rows, 1), which the caller has), interpolated
    // (the shared ratio where it has none).
    double neighbour_ratio(std::int32_t n_rows, std::int32_t threads) const;
    void   fill_neighbour_ratios() const;  // into interp_, when the estimates or the step changed
    double shared_ratio(std::int32_t threads) const;  // what shapes on `threads` without measured neighbours fade to
    double slowdown(std::int32_t threads) const;      // mean over typical time of passes on `threads` now (>= 1)
    static constexpr std::int32_t k_threads_max = 1024;
    bin &  bin_of(float conditional_score, std::uint8_t sources);
    const bin & bin_of(float conditional_score, std::uint8_t sources) const;
    // What choose() and choose_equal() read from a batch of queries.
    struct batch {
        std::vector<std::size_t>         lim;   // per query: most drafted nodes it may verify
        std::vector<std::size_t>         pad;   // per query: most nodes, padding included (>= lim; 0: no draft)
        std::vector<std::size_t>         cap;   // per query: what equal rows pad it to at most (drafts or not)
        std::vector<std::vector<double>> prob;  // per query: path probabilities of its nodes (empty if lim 0)
        std::vector<std::vector<char>>   has_child;  // per query, choose()'s scratch: [node + 1] has a chosen child
        std::vector<double>              q_stay;     // choose()'s scratch for one request (see learn_values())
        std::vector<std::int32_t>        q_threads;
        std::size_t                      lim_max = 0;
        std::size_t                      pad_max = 0;
        std::int32_t                     n_past  = 0;  // mean committed tokens
    };
    const batch & prepare(std::span<const budget_query> qs);  // into scratch_
    // Of t's first n nodes (all by default).
    void fill_path_probabilities(const draft_tree & t, std::vector<double> & out, std::size_t n = SIZE_MAX) const;
    // The request to explore when the best choice is plain, and how many of its first nodes (nq: none).
    // extra_us: what the exploring pass costs beyond the plain one (the exploration budget must cover it).
    std::pair<std::size_t, std::int32_t> exploration(std::span<const budget_query> qs, const batch & b,
                                                     double extra_us);
    void  note_choice(std::int32_t n_nodes);
    // From one request's step: q_stay[r] is what a step of r rows (r >= 1, 0 unused) was worth with this draft,
    // without a change of shape, plus the discounted value of being at r; threads[r] the pass's thread count. Each
    // shape's value moves towards the best it could have done from there: staying, or changing to the best shape
    // (the change priced). Shapes past q_stay's end are not updated. Values are by rows only: in the tree layout
    // the same rows with other leaves are another graph, so staying is valued a little above what it earns there.
    // One table serves a request with and without a prediction, whose rates differ (worth() prices each at its own).
    void  learn_values(std::span<const double> q_stay, std::span<const std::int32_t> threads);
    void  find_value_top();  // value_top_ from values_
    double value_of(std::int32_t rows) const {
        return rows >= 0 && (std::size_t) rows < values_.size() ? values_[(std::size_t) rows] : 0.0;
    }
    double worth(double expected, double us) const;  // what choose() maximises: a step's tokens net of its time
    std::int32_t recent_choice() const;
    std::int32_t plain_interval(const mode & m) const;  // drafting steps between plain ones
    // same: the pass had the last pass's shape; explored: its choice explored (exploration(), charged to its budget).
    // The most the realised gain counts a step's pass and drafting at: preempt_cap times what the estimates said
    // before the step (typical: its shape's pass, then plus the change of shape it paid; the drafting EMA).
    struct gain_caps {
        double pass_us  = HUGE_VAL;
        double draft_us = HUGE_VAL;
    };
    gain_caps gain_caps_of(double typical, double change) const;
    void      update_gain(const step_report & r, bool same, bool explored, const gain_caps & caps);

    cost_table                                  table_;
    online_budget_params                        params_;
    std::vector<bin>                            acceptance_;  // [sources * k_bins + bin]
    std::vector<cost_est>                       single_;      // by rows, one request
    batch                                       scratch_;     // per-step scratch of choose() and choose_equal()
    std::vector<std::size_t>                    next_;
    std::vector<char>                           accepted_;
    std::vector<double>                         verified_probs_;  // observe_acceptance()'s scratch
    double                                      predicted_ = 0;   // fading sums over verified drafts: accepted
    double                                      realised_  = 0;   // nodes predicted, and accepted (optimism())
    std::unordered_map<std::uint64_t, cost_est> costs_;       // by shape_key, several requests
    double                                      ratio_all_ = 1.0;  // EMA over every shape
    // neighbour_ratio()'s figures for every row count, filled once per step, and fill_neighbour_ratios()' scratch.
    struct neighbours {
        struct seen {
            std::int32_t rows  = 0;  // 0: none
            double       ratio = 0;
        };
        std::vector<double>       ratio;    // [rows]: the neighbours' ratio (0: none, the shared one)
        std::vector<std::int32_t> threads;  // [rows]: threads_of() the shape
        std::vector<double>       own;      // [rows]: the shape's own estimate, faded (< 0: none)
        std::vector<seen>         below;    // [rows]: the nearest measured shape below on its thread count
        std::vector<seen>         last;     // [threads]: a sweep's nearest measured shape on them
        std::vector<seen>         top;      // [threads]: the largest measured shape on them (for rows past ratio's end)
    };
    mutable neighbours                          interp_;
    mutable std::int64_t                        interp_step_ = -1; // the step (-1: stale) and batch size it was filled for
    mutable std::size_t                         interp_live_ = 0;
    cost_est                                    rebuild_;          // microseconds a change of shape added
    cost_est                                    cold_;             // a shape's first pass over its second
    std::vector<char>                           seen_;             // [rows]: one request's shapes this process ran
    std::pair<std::int32_t, double>             pending_cold_{0, 0.0};  // a first pass's rows and time
    std::vector<cost_est>                       switch_;           // [to threads]: ... and of thread count
    // [threads]: EMA over its shapes (0: none yet), and the drafting passes in it (see observe_step()).
    std::vector<std::pair<double, std::int64_t>> ratio_threads_;
    std::vector<std::pair<double, std::int64_t>> slow_threads_;    // [threads]: EMA of time over typical time, step
    std::int32_t                                last_threads_ = 0; // threads of the last observed pass (0: unknown)
    std::int32_t                                context_threads_ = 0; // the context's threads (plain passes')
    std::size_t                                 n_live_ = 1;       // requests of the batch being priced
    cost_est                                    seq_;              // microseconds an extra sequence added
    double                                      t_draft_us_ = 0;  // EMA of drafting time per step
    std::size_t                                 cur_class_ = 0;   // the class want_draft() was last asked about
    double                                      t_draft_node_us_ = 0;  // ... per node asked for (0: unmeasured)
    std::array<mode, k_classes>                 mode_{};
    std::int64_t                                n_steps_ = 0;
    bool                                        drafted_before_ = false;  // the first draft has been seen
    std::int32_t                                last_rows_ = 0;   // rows of the last observed pass (0: none yet)
    std::int32_t                                last_requests_ = 0;  // its requests
    struct prevails_memo {  // drafting_prevails() as of a step, batch size, class and n_equal
        std::int64_t step = -1;
        std::size_t  n_live = 0, cls = 0, n_equal = 1;
        bool         value = false;
    };
    mutable prevails_memo                       prevails_memo_;
    std::size_t                                 last_equal_ = 1;  // its n_equal
    std::int32_t                                last_seqs_ = 0;   // its n_seqs (0: not reported)
    static constexpr std::size_t                k_recent = 32;
    static constexpr std::size_t                k_recent_share = 4;  // of k_recent (see recent_choice())
    std::array<std::int32_t, k_recent>          recent_{};        // most nodes chosen for a request, last steps
    std::size_t                                 recent_at_ = 0;
    std::vector<double>                         values_;          // [rows]: a shape's learned value (tokens)
    std::int32_t                                value_top_ = 0;   // the shape of the highest value (0: none)
    double                                      explore_us_ = 0;  // exploration budget left (see explore_cost_frac)
    bool                                        exploring_ = false;  // the last choice explored (see update_gain())
};

// Always verifies min(n, n_max) nodes, padding short drafts (none without a draft): the fixed budgets REST and most
// peers use. Given a measured cost table, a pass runs on the thread count measured fastest for its size, as the
// automatic policy's do, so that comparisons between budgets compare the budgets.
class fixed_budget final : public budget_policy {
  public:
    explicit fixed_budget(std::int32_t n, cost_table costs = {}) : n_(n), costs_(std::move(costs)) {}
    void choose(std::span<const budget_query> queries, std::span<std::int32_t> n_out) override;
    std::int32_t draft_nodes_hint() const override { return std::max(1, n_); }
    std::int32_t threads_for(std::int32_t n_rows, std::size_t n_requests) const override {
        return costs_.threads_for(n_rows, n_requests);
    }

  private:
    std::int32_t n_;
    cost_table   costs_;
};

}  // namespace rest
