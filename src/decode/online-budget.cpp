#include "online-budget.h"
#include "budget-trace.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace rest {

namespace {

// An EMA that one observation moves by at most a factor of 2 either way (a preempted step cannot swing it).
double clamped_ema(double x, double obs, double a) {
    return (1 - a) * x + a * std::clamp(obs, 0.5 * x, 2.0 * x);
}

// A node's drafter score given that its parent is accepted.
double conditional_score(const draft_tree & t, std::size_t i) {
    const double s = t.scores[i];
    const int    p = t.parents[i];
    if (p < 0) return s;
    return t.scores[p] > 0 ? s / t.scores[p] : 0.0;
}

constexpr std::size_t k_masks = 16;  // source masks: datastore | context | history | prediction

}  // namespace

online_budget::online_budget(cost_table table, online_budget_params params, const budget_state * warm) :
    table_(std::move(table)), params_(params), acceptance_(k_masks * k_bins) {
    explore_us_ = params_.explore_start_steps * std::max(0.0, table_.predict_us(1, 0));
    if (!warm) return;
    // Draft at full size until the choices say otherwise (see draft_nodes_hint).
    std::fill(recent_.begin(), recent_.begin() + k_recent_share, params_.n_max);
    // A warm start takes what an earlier run learned; anything of the wrong shape is ignored (the caller has checked
    // the version; this guards the sizes, so no state can index out of range).
    if (warm->acceptance.size() == acceptance_.size()) acceptance_ = warm->acceptance;
    for (auto & b : acceptance_) {
        if (!(b.n >= 0) || !(b.accepted >= 0) || b.accepted > b.n) b = {};
    }
    // Values are bounded by what the start-up table says a plain step costs, so no file can switch drafting off
    // (or on) for longer than the estimates take to correct themselves.
    auto         sane    = [](double r) { return r > 0.05 && r < 20; };
    const double t_plain = table_.predict_us(1, 0);
    if (sane(warm->cost_ratio_all)) ratio_all_ = warm->cost_ratio_all;
    if (warm->cold_us > 0 && warm->cold_us < 100 * t_plain) cold_.add(warm->cold_us);
    for (const auto & [rows, ratio] : warm->cost_ratio) {
        if (rows >= 1 && rows < k_rows_flat && rows <= params_.n_max + 1 && sane(ratio)) {
            cost_est & e = est_for(rows, 1);
            e.add(ratio);
            e.warm = ratio;
        }
    }
    // Shape values are tokens over the discount's horizon: at most what the largest step emits, every step.
    const double value_max = (params_.n_max + 1.0) / (1.0 - params_.value_discount);
    const auto & sv        = warm->shape_values;
    if (sv.size() <= (std::size_t) params_.n_max + 2 &&
        std::all_of(sv.begin(), sv.end(), [&](double v) { return std::isfinite(v) && std::abs(v) <= value_max; })) {
        values_ = sv;
        find_value_top();
    }
    auto bounded = [&](double v, double hi) { return v > 0 && v <= hi ? v : 0.0; };
    t_draft_us_      = bounded(warm->t_draft_us, 10 * t_plain);
    t_draft_node_us_ = bounded(warm->t_draft_node_us, 10 * t_plain);
    for (std::size_t c = 0; c < k_classes; ++c) {
        const double plain = c < warm->plain_us.size() ? warm->plain_us[c] : 0;
        const double spent = c < warm->spent_us.size() ? warm->spent_us[c] : 0;
        // Both sides are EMAs of a step's time: within a range of plain steps, and a gain within [0.1, 10].
        const double hi = 1e3 * t_plain * (double) (1u << (c % k_sizes));
        if (!(plain > 0) || !(spent > 0) || plain > hi || spent > hi || plain > 10 * spent || spent > 10 * plain) continue;
        mode & m  = mode_[c];
        m.n_off   = c < warm->n_off.size() ? std::clamp(warm->n_off[c], 0, 16) : 0;
        m.t_plain  = plain;
        m.t_spent  = spent;
        m.measured = true;
        m.steps    = params_.probe_steps;  // the gain is known: keep checking it from here
        if (plain < spent) {
            // The schedule goes on where the last run left it, so short runs still probe at the bounded rate; a run
            // that ended drafting (in a probe, or losing within the noise: none left) waits as long as its back-off
            // level says, not one step: otherwise every short run (a one-shot `rest generate`) would start with a
            // probe at a loss.
            const std::int32_t left = c < warm->off_left.size() ? warm->off_left[c] : 0;
            const std::int64_t wait = (std::int64_t) params_.off_min << m.n_off;
            m.off_left = left > 0 ? std::min(left, params_.off_max)
                                  : (std::int32_t) std::min<std::int64_t>(params_.off_max, wait);
        }
    }
}

std::size_t online_budget::bucket(std::size_t n_requests, bool predicted) {
    const auto by_size = std::min<std::size_t>(k_sizes - 1, (std::size_t) std::bit_width(std::max<std::size_t>(n_requests, 1) - 1));
    return by_size + (predicted ? k_sizes : 0);
}

// --- estimates -------------------------------------------------------------------------------------------------

const budget_state::bin & online_budget::bin_of(float conditional, std::uint8_t sources) const {
    const double s = std::clamp((double) conditional, 0.0, 1.0);
    return acceptance_[(sources & (k_masks - 1)) * k_bins + std::min(k_bins - 1, (int) (s * k_bins))];
}

budget_state::bin & online_budget::bin_of(float conditional, std::uint8_t sources) {
    return const_cast<bin &>(std::as_const(*this).bin_of(conditional, sources));
}

double online_budget::calibrated(float score, std::uint8_t sources) const {
    const double s = std::clamp((double) score, 0.0, 1.0);
    const bin &  b = bin_of(score, sources);
    return (b.accepted + params_.prior_weight * s) / (b.n + params_.prior_weight);
}

void online_budget::fill_path_probabilities(const draft_tree & t, std::vector<double> & v) const {
    v.resize(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
        const double c = calibrated((float) conditional_score(t, i), t.sources[i]);
        v[i]           = t.parents[i] < 0 ? c : v[t.parents[i]] * c;
    }
}

std::vector<double> online_budget::path_probabilities(const draft_tree & t) const {
    std::vector<double> v;
    fill_path_probabilities(t, v);
    return v;
}

double online_budget::prior_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal) const {
    return table_.predict_batch_us(std::max<std::size_t>(n_equal, 1), n_rows, n_past);
}

void online_budget::cost_est::add(double v) {
    ratios[n++ % k_window] = v;
    median                 = median_of_window();
}

double online_budget::cost_est::median_of_window() const {
    std::array<double, k_window> v = ratios;
    const std::size_t            m = std::min(n, k_window);
    std::sort(v.begin(), v.begin() + m);
    return m == 0 ? 1.0 : m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

std::int32_t online_budget::extra_seqs(std::size_t n_equal, std::int32_t n_seqs) {
    return n_seqs > 0 ? std::max<std::int32_t>(0, n_seqs - (std::int32_t) std::max<std::size_t>(n_equal, 1)) : 0;
}

const online_budget::cost_est * online_budget::find_est(std::int32_t n_rows, std::size_t n_equal) const {
    if (n_equal <= 1 && n_rows < k_rows_flat) {
        return n_rows >= 0 && (std::size_t) n_rows < single_.size() && single_[n_rows].n > 0 ? &single_[n_rows] : nullptr;
    }
    const auto it = costs_.find(shape_key(n_rows, n_equal));
    return it == costs_.end() ? nullptr : &it->second;
}

online_budget::cost_est & online_budget::est_for(std::int32_t n_rows, std::size_t n_equal) {
    if (n_equal <= 1 && n_rows >= 0 && n_rows < k_rows_flat) {
        if ((std::size_t) n_rows >= single_.size()) single_.resize((std::size_t) n_rows + 1);
        return single_[n_rows];
    }
    return costs_[shape_key(n_rows, n_equal)];
}

double online_budget::ratio_of(std::int32_t n_rows, std::size_t n_equal, std::int32_t threads) const {
    const cost_est * e     = find_est(n_rows, n_equal);
    const bool       plain = n_rows <= (std::int32_t) std::max<std::size_t>(n_live_, 1);
    // Where this shape has no fresh figure of its own: its neighbours' (one request's drafting shapes), else the
    // ratio shared by all shapes on its thread count.
    const double     fallback = n_equal == 1 && !plain ? neighbour_ratio(n_rows) : shared_ratio(threads);
    if (!e) return fallback;
    // Plain's own estimate does not fade: the plain checks keep measuring it, and the shared ratio moves with the
    // drafting passes it is compared against.
    if (plain) return e->median;
    return faded(*e, fallback);
}

double online_budget::faded(const cost_est & e, double toward) const {
    return toward + (e.median - toward) * freshness(e.at);
}

double online_budget::freshness(std::int64_t at) const {
    // 1 when measured at this step, down to 0 at twice forget_steps later: a stale reading gives way to the shared
    // one, so one old figure cannot hold a shape (or a thread count's slowdown) for good.
    return std::max(0.0, 1.0 - 0.5 * (double) (n_steps_ - at) / params_.forget_steps);
}

std::int32_t online_budget::threads_of(std::int32_t n_rows, std::size_t n_equal) const {
    // As the decoder picks them: plain passes and passes llama.cpp splits (n_equal 0) on the context's threads,
    // others on the table's choice for the batch being priced.
    const std::size_t  n = std::max<std::size_t>(n_live_, 1);
    const std::int32_t t = n_rows <= (std::int32_t) n || n_equal == 0 ? 0 : table_.threads_for(n_rows, n);
    return t > 0 ? t : context_threads_ > 0 ? context_threads_ : table_.threads_for(1);
}

double online_budget::shared_ratio(std::int32_t threads) const {
    return threads > 0 && (std::size_t) threads < ratio_threads_.size() && ratio_threads_[threads].first > 0
               ? ratio_threads_[threads].first
               : ratio_all_;
}

double online_budget::predict_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs) const {
    return predict_on(n_rows, n_past, n_equal, n_seqs, threads_of(n_rows, n_equal));
}

double online_budget::predict_on(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs,
                                 std::int32_t threads) const {
    return prior_us(n_rows, n_past, n_equal) * ratio_of(n_rows, n_equal, threads) +
           extra_seqs(n_equal, n_seqs) * seq_us();
}

double online_budget::seq_us() const {
    return seq_.n > 0 ? seq_.median : 0.0;
}

double online_budget::step_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs) const {
    const std::int32_t threads = threads_of(n_rows, n_equal);
    const double       typical = predict_on(n_rows, n_past, n_equal, n_seqs, threads) +
                           (same_shape(n_rows, n_equal, n_seqs) ? 0.0 : priced_change_us(n_rows, n_past, n_equal, threads));
    return typical * slowdown(threads);
}

double online_budget::priced_change_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal,
                                       std::int32_t threads) const {
    // A change between the plain regime (one row per request) and the drafting one is followed, sooner or later, by
    // one back. The way back is charged on the way out of the regime that prevails, and the way back into it is
    // free: where drafting does not pay, entering drafting is charged both changes and leaving it nothing; where it
    // pays, the reverse. (The relative value of the two regimes of a two-state Markov chain whose round trip costs
    // both changes, at its two ends.) Charging each change only where it happens made a step that had drafted keep
    // verifying nodes that do not pay in steady state: stories260K at one thread on a Zen 5 CPU verified nodes of
    // p > 0.34 where 0.75 is the break-even (automatic 0.94-0.98x of the best method, plain, against 0.98-0.99x now).
    // (For batches of several requests; one request's shapes carry learned values instead: below.)
    // Drafting prevails where it was measured to pay (drafting_pays()), or, until drafting is measured to lose, where
    // the cheapest drafting pass costs no more than a plain one whatever its nodes are worth (a single row on two
    // threads of that CPU costs 1.5x two rows on one); otherwise the plain regime is taken to prevail. Between two
    // drafting shapes this charges the change itself plus the difference of their ways back (which differ when
    // their thread counts do).
    // One request's steps are charged the change alone (or the shape's cold first pass: single_change_us()): the
    // learned values of its shapes (learn_values()) say what being at a shape is worth over the steps that follow,
    // plain's among them.
    const std::size_t  n_req    = std::max<std::size_t>(n_live_, 1);
    if (n_req == 1) return single_change_us(n_rows, n_equal, threads);
    const bool         drafting = n_rows > (std::int32_t) n_req;
    const bool         was      = last_rows_ > last_requests_;  // the last pass drafted (0 rows: another pass)
    const std::int32_t plain_threads = threads_of((std::int32_t) n_req, 1);
    const bool         pays          = drafting_prevails(n_past, n_equal);
    // Being in the drafting regime (its passes on `t` threads) over being in the plain one, as a cost.
    auto bias = [&](std::int32_t t) { return pays ? -change_us(t, plain_threads) : change_us(plain_threads, t); };
    const std::int32_t from_threads = last_threads_ > 0 ? last_threads_ : threads;
    const double after = drafting ? bias(threads) : 0.0;
    const double now   = was ? bias(from_threads) : 0.0;
    return std::max(0.0, change_us(threads, last_threads_) + after - now);  // the caller has seen the shape change
}

double online_budget::slowdown(std::int32_t threads) const {
    // Throughput is set by the mean time, the estimates are medians (so that one preempted pass moves them little).
    // On a quiet machine the two agree; on a busy one a pass on every core waits for the busy one: on stories260K,
    // -t 2, with a compile running, 2-thread passes averaged 5-10x their median, 1-thread passes 2x.
    if (threads <= 0 || (std::size_t) threads >= slow_threads_.size()) return 1.0;
    // Not measured lately (a thread count only plain checks use), it fades back to 1 as the cost estimates do.
    const auto & [f, at] = slow_threads_[threads];
    return std::max(1.0, 1.0 + (f - 1.0) * freshness(at));
}

double online_budget::change_us(std::int32_t threads, std::int32_t from) const {
    // Another thread count wakes or parks workers besides the graph rebuild: on stories260K, -t 2, a 2-row pass on
    // one thread after one on two took 655 us against 275 steady, and a 1-row pass on two after one on one 2,481.
    const bool other = threads > 0 && from > 0 && threads != from;
    const cost_est * s = other && (std::size_t) threads < switch_.size() ? &switch_[threads] : nullptr;
    return s && s->n > 0 ? s->median : rebuild_us();
}

double online_budget::single_change_us(std::int32_t n_rows, std::size_t n_equal, std::int32_t threads) const {
    return std::max(change_us(threads, last_threads_), cold_us(n_rows, n_equal));
}

double online_budget::rebuild_us() const {
    return rebuild_.n > 0 ? rebuild_.median : table_.rebuild_us * ratio_all_;
}

bool online_budget::observe_first_use(const step_report & r, bool same, bool warm_up) {
    // The pass after a shape's first one, if of that shape, says what the first paid for being first.
    if (pending_cold_.first > 0 && same && r.n_rows == pending_cold_.first && r.t_pass_us > 0 && !warm_up) {
        cold_.add(std::max(0.0, pending_cold_.second - r.t_pass_us));
    }
    pending_cold_ = {0, 0.0};
    // One request's first pass of this shape in this process (see cold_us()); a warm-up pass is cold anyway.
    if (r.n_requests != 1 || r.n_equal != 1 || r.n_rows < 1 || r.n_rows >= k_rows_flat) return false;
    const bool first = !seen(r.n_rows);
    mark_seen(r.n_rows);
    return first;
}

void online_budget::mark_seen(std::int32_t n_rows) {
    if (seen_.size() <= (std::size_t) n_rows) seen_.resize((std::size_t) n_rows + 1, 0);
    seen_[(std::size_t) n_rows] = 1;
}

void online_budget::observe_warm_up(std::int32_t max_rows) {
    for (std::int32_t i = 1; i <= std::min(max_rows, k_rows_flat - 1); ++i) mark_seen(i);
}

double online_budget::cold_us(std::int32_t n_rows, std::size_t n_equal) const {
    // Several requests' passes change shape with the batch anyway; their shapes are not tracked.
    if (n_equal != 1 || n_live_ != 1 || seen(n_rows) || cold_.n == 0) return 0.0;
    return cold_.median;
}

double online_budget::drafting_step_us(std::int32_t n_rows, std::int32_t n_past, std::size_t n_equal, std::int32_t n_seqs) const {
    // Drafting is paid once per step whatever the step's size: leaving it out would favour the cheapest passes over
    // longer drafts that amortise it over more tokens.
    return step_us(n_rows, n_past, n_equal, n_seqs) + t_draft_us_;
}

online_budget::single_price online_budget::price_single(std::int32_t n_rows, std::int32_t n_past,
                                                        std::int32_t n_seqs) const {
    single_price p;
    p.threads         = threads_of(n_rows, 1);
    const double slow = slowdown(p.threads);
    p.steady_us       = predict_on(n_rows, n_past, 1, n_seqs, p.threads) * slow;
    p.change_us       = same_shape(n_rows, 1, n_seqs) ? 0.0 : single_change_us(n_rows, 1, p.threads) * slow;
    return p;
}

double online_budget::loss_noise(const mode & m) const {
    // Steps as many as the EMA's memory holds (its equivalent sample size), at most those measured; a gain taken
    // from a warm start or a neighbour has no spread yet, and waits for a probe's length of its own.
    if (m.var_steps < params_.probe_steps) return HUGE_VAL;
    // Only the share of steps whose pass time was measured is noisy: of n_eff steps, noisy_share * n_eff have a
    // variance each, so the mean's variance is noisy_share * variance / n_eff. Of one such step the variance is
    // unknown, and its own loss stands for its spread: one preempted (or lucky) step cannot decide either way.
    const double n_eff = std::min((double) m.var_steps, (2 - params_.gain_ema) / params_.gain_ema);
    const double var   = m.noisy_steps >= 2 ? m.loss_var : m.loss_mean * m.loss_mean;
    return params_.loss_z * std::sqrt(m.noisy_share * var / n_eff);
}

bool online_budget::drafting_prevails(std::int32_t n_past, std::size_t n_equal) const {
    // Asked for every row count choose() prices, and the same for all of them until the next step or batch: kept.
    auto & c = prevails_memo_;
    if (c.step == n_steps_ && c.n_live == n_live_ && c.cls == cur_class_ && c.n_equal == n_equal) return c.value;
    const std::int32_t n = (std::int32_t) std::max<std::size_t>(n_live_, 1);
    const mode &       m = mode_[cur_class_];
    // The cheapest drafting pass: one node for one request (choose()); equal chains pad every request (choose_equal()).
    const std::int32_t least = n_equal > 1 ? 2 * n : n + 1;
    const bool         loses = m.var_steps >= params_.probe_steps && m.t_spent > m.t_plain;
    const bool value = drafting_pays() || (!loses && predict_us(least, n_past, n_equal) <= predict_us(n, n_past, n_equal));
    c = {n_steps_, n_live_, cur_class_, n_equal, value};
    return value;
}

bool online_budget::drafting_pays() const {
    const mode & m = mode_[cur_class_];
    return m.t_plain - m.t_spent > loss_noise(m);
}

double online_budget::gain(std::size_t n_requests, bool predicted) const {
    const mode & m = mode_[bucket(n_requests, predicted)];
    return m.t_spent > 0 ? m.t_plain / m.t_spent : 1.0;
}

// --- the choice --------------------------------------------------------------------------------------------------

void online_budget::seed_from_neighbour(std::size_t c) {
    // A batch-size class with no measurement of its own starts from the nearest class that has one (a server's
    // batch grows and shrinks through the classes; each would otherwise pay for a cold probe of its own).
    // Neighbours are of the same kind (passes with a prediction or without): their gains are different things.
    const std::size_t lo = c < k_sizes ? 0 : k_sizes, hi = lo + k_sizes;
    for (std::size_t d = 1; d < k_sizes; ++d) {
        for (const std::size_t n : {c - d, c + d}) {  // c - d wraps past 0 to a huge value: out of range, skipped
            // Only a finished measurement: a neighbour in the middle of a probe has a mean of a few steps.
            if (n < lo || n >= hi || !mode_[n].measured || (mode_[n].steps < params_.probe_steps && mode_[n].off_left == 0)) {
                continue;
            }
            const mode & from = mode_[n];
            mode &       m    = mode_[c];
            m.t_plain  = from.t_plain;
            m.t_spent  = from.t_spent;
            m.n_off    = from.n_off;
            m.steps    = from.steps;
            m.off_left = from.off_left;
            m.measured = true;
            return;
        }
    }
}

bool online_budget::want_draft(std::size_t n_requests, bool predicted) {
    const std::size_t c = bucket(n_requests, predicted);
    cur_class_          = c;
    if (!mode_[c].measured) seed_from_neighbour(c);
    mode & m = mode_[c];
    if (m.off_left == 0) {
        if (m.since_plain < plain_interval(m)) return true;
        m.since_plain = 0;  // measure what plain decoding costs now
        return false;
    }
    if (--m.off_left == 0) begin_probe(m);
    return false;
}

void online_budget::begin_probe(mode & m) {
    // The gain is measured afresh. Its first step overwrites the EMAs (weight 1 / steps); until then they keep saying
    // what the last probe found, so a run that ends here still saves that drafting lost.
    m.off_left  = 0;
    m.steps     = 0;
    m.var_steps   = 0;
    m.noisy_steps = 0;
    m.exit_us     = 0;
}

void online_budget::observe_request(bool predicted) {
    if (!predicted) return;
    for (std::size_t c = k_sizes; c < k_classes; ++c) {
        mode & m = mode_[c];
        if (m.off_left > 0) begin_probe(m);  // measure this prediction's gain (the back-off level stays)
    }
}

std::int32_t online_budget::plain_interval(const mode & m) const {
    // A plain step among drafting ones costs about itself plus a change of shape each way (llama.cpp's graph, and on
    // a CPU the thread count): spaced so that this stays near plain_cost_frac / gain of the drafting steps' time.
    if (!(m.t_spent > 0) || !(m.plain_ratio > 0)) return params_.plain_every;
    // Measured, once plain passes were: their mean, the OS's preemptions included, plus the change back to drafting.
    // (Plain passes while drafting is off count too: steady ones, a change short of a check, so checks err frequent.)
    const double check = m.n_plain_seen > 0 ? m.check_us + rebuild_us()
                                        : prior_us((std::int32_t) n_live_, 0, 1) * m.plain_ratio + 2 * rebuild_us();
    // And the more drafting gains, the rarer: a check can only turn drafting off where plain decoding has become
    // cheaper by the whole gain (what acceptance does is measured by the drafting steps themselves). With a busy
    // core at two threads, drafting ran 4-10x plain's speed, and the checks took 16-26% of the passes' time.
    // The price: after a slow plain pass, plain's cost and the gain stay high until later checks bring them down
    // (plain_ratio moves at plain passes only, by plain_ema each), and those may be plain_every_max apart.
    const double steps = check * std::max(1.0, m.t_plain / m.t_spent) / (params_.plain_cost_frac * m.t_spent);
    return (std::int32_t) std::clamp(steps, (double) params_.plain_every, (double) params_.plain_every_max);
}

float online_budget::chain_score_min() const {
    const std::int32_t rows = 1 + draft_nodes_hint();
    const double       t1   = predict_us(1, 0);
    if (!(t1 > 0)) return 0.0f;
    return (float) std::clamp(0.5 * (predict_us(rows + 1, 0) - predict_us(rows, 0)) / t1, 0.0, 1.0);
}

std::int32_t online_budget::recent_choice() const {
    // The most nodes chosen in at least k_recent_share of the recent steps: one long choice (a lucky step) does not
    // make every step draft for it for the next k_recent steps.
    std::array<std::int32_t, k_recent> v = recent_;
    const std::size_t                  k = k_recent - k_recent_share;
    std::nth_element(v.begin(), v.begin() + (std::ptrdiff_t) k, v.end());
    return v[k];
}

std::int32_t online_budget::tree_draft_nodes() const {
    const std::int32_t recent = recent_choice();
    return std::clamp(std::max(draft_nodes_hint(), 2 + 2 * recent), 1, std::max(1, params_.n_max));
}

std::int32_t online_budget::draft_nodes_hint() const {
    const std::int32_t grow = 1 + recent_choice();
    // Where drafting is cheap next to a step (a large model), draft what the cap allows: the policy can only
    // choose among nodes it has seen. Next to a step as decoding runs (pass and drafting), not a plain pass: on
    // stories260K at two threads on a Zen 5 a plain pass (317 us) is 1.5x the 2-row passes the policy runs, and
    // the nodes it paid for were drafted (14 us a step against rest@1's 6) and not verified: 0.93-0.94 of rest@1,
    // 0.97 now.
    const double per_node   = t_draft_node_us_ > 0 ? t_draft_node_us_ : 1.0;
    const mode & m          = mode_[cur_class_];
    const double step       = m.rate_us > 0 ? m.rate_us : predict_us(1, 0);
    const double affordable = params_.draft_cost_frac * step / per_node;
    return std::clamp(std::max<std::int32_t>(grow, (std::int32_t) std::min(affordable, 1e6)), 1, std::max(1, params_.n_max));
}

void online_budget::learn_values(std::span<const double> q_stay, std::span<const std::int32_t> threads) {
    // Expected updates of a discounted value per shape, from the draft this step saw (every shape's, not only the one
    // taken): a shape is worth what its step earns plus the next step's value, from staying or from the best change
    // (priced at the rate decoding runs at, as worth() prices time). What this replaces, a home shape (the most
    // frequent lately) that other shapes paid their way back to, held the demo model at 2 rows where 3 pay more:
    // no one step's gain paid the way out, while these values carry the gain of every step after it.
    const mode & m = mode_[cur_class_];
    if (!(m.rate_us > 0) || q_stay.size() < 2) return;
    const double rate = m.rate_tokens / m.rate_us;
    // The best shape to change to, per thread count (what a change costs depends on the threads at both ends).
    std::array<std::pair<std::int32_t, double>, 4> best{};
    std::size_t                                    n_best = 0;
    for (std::size_t r = 1; r < q_stay.size(); ++r) {
        std::size_t k = 0;
        while (k < n_best && best[k].first != threads[r]) ++k;
        if (k == n_best) {
            if (n_best == best.size()) continue;  // more thread counts than passes use: not a change target
            best[n_best++] = {threads[r], q_stay[r]};
        }
        best[k].second = std::max(best[k].second, q_stay[r]);
    }
    if (values_.size() < q_stay.size()) values_.resize(q_stay.size(), 0.0);
    for (std::size_t r = 1; r < q_stay.size(); ++r) {
        double target = q_stay[r];
        for (std::size_t k = 0; k < n_best; ++k) {
            const double change = change_us(best[k].first, threads[r]) * slowdown(best[k].first);
            target              = std::max(target, best[k].second - rate * change);
        }
        if (std::isfinite(target)) values_[r] += params_.value_ema * (target - values_[r]);  // none sticks
    }
    find_value_top();
}

void online_budget::find_value_top() {
    double top = -HUGE_VAL;
    value_top_ = 0;
    for (std::size_t r = 2; r < values_.size(); ++r) {
        if (values_[r] > top) {
            top        = values_[r];
            value_top_ = (std::int32_t) r;
        }
    }
}

void online_budget::note_choice(std::int32_t n_nodes) {
    recent_[recent_at_] = n_nodes;
    recent_at_          = (recent_at_ + 1) % k_recent;
}

const online_budget::batch & online_budget::prepare(std::span<const budget_query> qs) {
    batch & b = scratch_;  // reused: the hot path allocates nothing once its vectors have grown
    double  n_past_sum = 0;
    b.lim.assign(qs.size(), 0);
    b.pad.assign(qs.size(), 0);
    b.cap.assign(qs.size(), 0);
    b.prob.resize(qs.size());
    b.lim_max = b.pad_max = 0;
    for (size_t i = 0; i < qs.size(); ++i) {
        // A request without draft nodes is not padded: its step stays a plain 1-row pass, which computes exactly
        // what plain decoding does (a padded pass takes other kernels, e.g. flash attention's split-KV path is for
        // single rows only), so outputs can differ from plain only where drafts were verified.
        const size_t n_tree = qs[i].tree ? qs[i].tree->size() : 0;
        b.cap[i] = std::min<size_t>((size_t) std::max(0, qs[i].n_max), (size_t) params_.n_max);
        b.pad[i] = n_tree == 0 ? 0 : b.cap[i];
        b.lim[i] = std::min(n_tree, b.pad[i]);
        b.prob[i].clear();
        if (b.lim[i] > 0) fill_path_probabilities(*qs[i].tree, b.prob[i]);
        b.prob[i].resize(b.pad[i], 0.0);  // padding is worth nothing
        b.lim_max = std::max(b.lim_max, b.lim[i]);
        b.pad_max = std::max(b.pad_max, b.pad[i]);
        n_past_sum += qs[i].n_past;
    }
    b.n_past = (std::int32_t) (n_past_sum / (double) std::max<size_t>(1, qs.size()));
    n_live_  = std::max<std::size_t>(1, qs.size());  // what is plain (one row each) and the threads depend on it
    return b;
}

std::pair<std::size_t, std::int32_t> online_budget::exploration(std::span<const budget_query> qs, const batch & b,
                                                                double extra_us) {
    // One request explores per step (the one with the most promising first node), one node, while its bin is thin
    // and the budget covers it (what it takes from the budget).
    const size_t nq = qs.size();
    extra_us        = std::max(0.0, extra_us);
    if (!(explore_us_ >= extra_us)) return {nq, 0};
    size_t       ex = nq;
    for (size_t i = 0; i < nq; ++i) {
        if (b.lim[i] > 0 && qs[i].tree->scores[0] >= params_.explore_min_score &&
            (ex == nq || qs[i].tree->scores[0] > qs[ex].tree->scores[0])) {
            ex = i;
        }
    }
    if (ex == nq) return {nq, 0};
    const draft_tree & t = *qs[ex].tree;
    if (bin_of((float) conditional_score(t, 0), t.sources[0]).n >= params_.explore_obs) return {nq, 0};
    explore_us_ -= extra_us;
    return {ex, 1};
}

double online_budget::worth(double expected, double us) const {
    // Tokens less what the time would have earned at the rate decoding runs at: maximising it every step maximises
    // the rate over all steps. A step's own tokens per microsecond would not: it sets a higher bar for another node
    // on a step whose first nodes are sure than on one whose are doubtful, and verifies more on the doubtful ones.
    // Until a rate is measured, the step's own.
    const mode & m = mode_[cur_class_];  // the rate of batches like this one (of its size, with a prediction or not)
    return m.rate_us > 0 ? expected - m.rate_tokens / m.rate_us * us : expected / us;
}

void online_budget::choose(std::span<const budget_query> qs, std::span<std::int32_t> n_out) {
    const size_t nq = qs.size();
    exploring_      = false;
    std::fill(n_out.begin(), n_out.end(), 0);
    const batch & b = prepare(qs);
    if (b.lim_max == 0) return;
    std::vector<size_t> & next = next_;
    next.assign(nq, 0);
    // Greedy over the whole batch: add the next node (in each tree's best-first order, padding last) with the
    // highest calibrated probability, and remember the configuration worth() most.
    // The pass's sequences are counted along (a node adds one unless its parent was a leaf; padding continues the
    // last node, a leaf), so that a change of tree shape is priced like a change of rows.
    const std::int32_t rows_plain = (std::int32_t) nq, seqs_plain = (std::int32_t) nq;
    const single_price plain      = nq == 1 ? price_single(1, b.n_past, 1) : single_price{};
    const double       plain_us   = nq == 1 ? plain.steady_us + plain.change_us
                                            : step_us(rows_plain, b.n_past, 1, seqs_plain);
    std::int32_t rows      = rows_plain;
    std::int32_t seqs      = seqs_plain;
    double       expected  = (double) nq;
    // One request's shapes carry their learned values (learn_values(); once a rate is measured, as worth() needs).
    const bool   single    = nq == 1 && mode_[cur_class_].rate_us > 0;
    const double discount  = params_.value_discount;
    double       best_rate = worth(expected, plain_us) + (single ? discount * value_of(1) : 0.0);
    bool         pays      = false;
    std::vector<double> &       q_stay    = scratch_.q_stay;
    std::vector<std::int32_t> & q_threads = scratch_.q_threads;
    if (single) {
        q_stay.assign(2, worth(expected, plain.steady_us) + discount * value_of(1));  // [1]: plain ([0] unused)
        q_threads.assign(2, plain.threads);
    }
    scratch_.has_child.resize(nq);
    for (size_t i = 0; i < nq; ++i) scratch_.has_child[i].assign(b.lim[i] + 1, 0);
    while (true) {
        size_t pick = nq;
        double pv   = -1;
        for (size_t i = 0; i < nq; ++i) {
            if (next[i] < b.pad[i] && b.prob[i][next[i]] > pv) {
                pv   = b.prob[i][next[i]];
                pick = i;
            }
        }
        if (pick == nq) break;
        // One request's padding rows pay only at a shape without a change's charge (the last pass's) or of a high
        // value (value_top_): past both, the loop would price dozens of rows that cannot win (4.3 us a step on the
        // demo model).
        if (nq == 1 && next[0] >= b.lim[0] && rows >= std::max(last_rows_, value_top_)) break;
        if (const size_t j = next[pick]; j < b.lim[pick]) {
            char & parent_has_child = scratch_.has_child[pick][(size_t) (qs[pick].tree->parents[j] + 1)];
            seqs += parent_has_child ? 1 : 0;
            parent_has_child = 1;
        }
        ++next[pick];
        ++rows;
        expected += pv;
        double rate;
        if (single) {
            const single_price p      = price_single(rows, b.n_past, seqs);
            const double       steady = p.steady_us + t_draft_us_;  // drafting_step_us() in parts
            q_stay.push_back(worth(expected, steady) + discount * value_of(rows));
            q_threads.push_back(p.threads);
            rate = worth(expected, steady + p.change_us) + discount * value_of(rows);
        } else {
            rate = worth(expected, drafting_step_us(rows, b.n_past, 1, seqs));
        }
        if (rate > best_rate) {
            best_rate = rate;
            pays      = true;
            std::copy(next.begin(), next.end(), n_out.begin());
        }
    }
    if (single) learn_values(q_stay, q_threads);
    if (!pays) {
        const double explore_us = drafting_step_us(rows_plain + 1, b.n_past, 1, seqs_plain);
        const auto [ex, k]      = exploration(qs, b, explore_us - plain_us);
        if (ex < nq) n_out[ex] = k;
        exploring_ = ex < nq && k > 0;
    }
    note_choice(*std::max_element(n_out.begin(), n_out.end()));
}

std::int32_t online_budget::choose_equal(std::span<const budget_query> qs) {
    const size_t nq = qs.size();
    exploring_      = false;
    const batch & b  = prepare(qs);
    if (b.lim_max == 0) return 0;
    // Every chain length k costs 1 + min(k, cap) rows per request, whichever requests have drafts that long: the
    // decoder pads all of them, those without a draft too, since llama.cpp would otherwise split the batch into one
    // pass per distinct row count.
    double       expected  = (double) nq;
    const double plain_us  = step_us((std::int32_t) nq, b.n_past, nq, (std::int32_t) nq);
    double       best_rate = worth(expected, plain_us);
    std::int32_t k_best    = 0;
    for (size_t k = 1; k <= b.pad_max; ++k) {
        std::int32_t rows = 0;
        for (size_t i = 0; i < nq; ++i) {
            if (k <= b.lim[i]) expected += b.prob[i][k - 1];
            rows += 1 + (std::int32_t) std::min(k, b.cap[i]);
        }
        const double rate = worth(expected, drafting_step_us(rows, b.n_past, nq, (std::int32_t) nq));  // chains: one each
        if (rate > best_rate) {
            best_rate = rate;
            k_best    = (std::int32_t) k;
        }
    }
    if (k_best == 0) {
        const double explore_us = drafting_step_us(2 * (std::int32_t) nq, b.n_past, nq, (std::int32_t) nq);
        k_best                  = exploration(qs, b, explore_us - plain_us).second;
        exploring_              = k_best > 0;
    }
    note_choice(k_best);
    return k_best;
}

// --- feedback ----------------------------------------------------------------------------------------------------

void online_budget::observe_acceptance(const draft_tree & tree, std::int32_t n_verified,
                                       std::span<const std::int32_t> path) {
    // A node tells about its conditional probability only if its parent was accepted (or is the root).
    const std::int32_t n = std::min(n_verified, (std::int32_t) tree.size());
    std::vector<char> & accepted = accepted_;
    accepted.assign((std::size_t) std::max(n, 0), 0);
    for (std::int32_t v : path) {
        if (v >= 0 && v < n) accepted[v] = 1;
    }
    for (std::int32_t i = 0; i < n; ++i) {
        const std::int32_t par = tree.parents[i];
        if (par >= 0 && !accepted[par]) continue;
        bin & b = bin_of((float) conditional_score(tree, (size_t) i), tree.sources[i]);
        if (b.n >= params_.bin_cap) {  // older evidence fades, so the bin follows a new workload
            b.accepted *= params_.bin_cap / (b.n + 1);
            b.n *= params_.bin_cap / (b.n + 1);
        }
        b.n += 1;
        b.accepted += accepted[i];
    }
}

void online_budget::update_gain(const step_report & r, bool same, bool explored) {
    mode & m = mode_[bucket(r.n_requests, r.predicted)];
    // Plain decoding's time for the same tokens: a plain pass over these requests (one row each) emits one token
    // per request. Like with like, both sides are means of measured steps (but see steady_plain below; plain steps
    // are measured every plain_interval()): a shape's median, which the per-step choice prices, leaves out the steps
    // the OS preempted, and on a busy machine a pass on more threads is preempted more often (the mean of a 2-thread
    // plain pass was 4x its median there, a 1-thread drafting pass's 2x).
    const std::size_t plain_equal = r.n_equal == 1 ? 1 : r.n_requests;
    // Until a plain step is measured, the estimate of the first drafting step, frozen: the shared ratio that
    // unmeasured shapes fade to moves with the drafting passes, and plain's side must not move with what it is
    // compared against.
    const double prior = prior_us((std::int32_t) r.n_requests, r.n_past, plain_equal);
    if (!(m.plain_ratio > 0)) m.plain_ratio = ratio_of((std::int32_t) r.n_requests, plain_equal);
    const double per_token = prior * m.plain_ratio / (double) r.n_requests;
    ++m.steps;
    ++m.var_steps;
    m.measured     = true;
    const double w = std::max(params_.gain_ema, 1.0 / m.steps);  // a plain mean over a probe's first steps
    const double plain = per_token * (double) r.n_tokens;
    // A step whose choice verified nothing, after a pass of its shape, ran a steady plain pass: what it cost beyond
    // plain decoding is exactly its drafting time (and the exit charge), not its pass's noise (a one-row stories260K
    // pass varies by tens of microseconds while 12-18 us of drafting, repeated every step, stayed under the noise
    // bound: 0.88x of plain in one-shot runs). After another shape it paid a rebuild too, which the pass's own time
    // measures (a learned estimate of it, charged instead, switched a TinyLlama-shaped model's paying trees off).
    // (The choice's own time is on neither side: it runs before the pass's clock starts.)
    // An exploring step is charged the same way: what its rows cost beyond plain's came out of the exploration
    // budget, not from drafting as chosen (counted as a step whose loss is its own spread, one explored node among
    // steps that verified nothing held drafting on, and unwound its back-off, for a hundred steps at a time).
    const bool   steady_plain = (r.n_rows == (std::int32_t) r.n_requests && same) || explored;
    const double spent        = (steady_plain ? plain : r.t_pass_us) + r.t_draft_us + m.exit_us;
    m.exit_us          = 0;
    // The spread of the loss (spent - plain), from the steps whose pass time it holds. A steady plain step's loss
    // is its drafting time (and the exit charge), exactly: counted in the spread, a stretch of them (a probe where
    // the choice verifies nothing, as on stories260K at one thread) stayed "within the noise" of one step that
    // entered drafting (a rebuild and a cold draft, 200 us) for 60 steps, paying 3-6 us of drafting each, and
    // unwound the back-off: 4% of plain's time in a run.
    const double loss = spent - plain;
    const double ws   = std::max(params_.gain_ema, 1.0 / m.var_steps);  // this probe's steps (steps may be seeded)
    m.noisy_share     = (1 - ws) * m.noisy_share + ws * (steady_plain ? 0.0 : 1.0);
    if (!steady_plain) {
        const double wn    = std::max(params_.gain_ema, 1.0 / ++m.noisy_steps);
        const double delta = loss - m.loss_mean;
        m.loss_var         = m.noisy_steps == 1 ? 0.0 : (1 - wn) * (m.loss_var + wn * delta * delta);
        m.loss_mean += wn * delta;
    }
    m.t_plain      = (1 - w) * m.t_plain + w * plain;
    m.t_spent      = (1 - w) * m.t_spent + w * spent;
    if (m.steps < params_.probe_steps || m.var_steps < params_.probe_steps) return;
    if (m.t_spent - m.t_plain > loss_noise(m)) {
        // Drafting, as chosen, is slower than plain decoding was, by more than the steps' spread explains (on a busy
        // machine a step the OS preempted costs 10-100x its median, on either side): plain steps only, then
        // probe again.
        m.off_left = std::min(params_.off_max, params_.off_min << std::min(m.n_off, 16));
        m.n_off    = std::min(m.n_off + 1, 16);
    } else if (m.steps % params_.probe_steps == 0 && m.t_spent <= m.t_plain) {
        // Paying: the back-off unwinds one level per probe's length of paying steps, so that one lucky probe
        // where drafting is about even does not reset it (a flapping policy pays for every probe). Losing within
        // the noise is no evidence that drafting pays: one verified node among drafted steps that verified
        // nothing (its loss its own spread) held drafting on, and unwound, for a hundred steps at a time.
        m.n_off = std::max(0, m.n_off - 1);
    }
}

void online_budget::observe_step(const step_report & r) {
    ++n_steps_;
    interp_step_ = -1;  // (the context's threads may change below)
    const bool explored = exploring_;  // the choice of this step explored (choose() sets it)
    exploring_          = false;
    n_live_ = r.n_requests;
    if (r.n_threads_context > 0) context_threads_ = r.n_threads_context;
    const bool   same = same_shape(r.n_rows, r.n_equal, r.n_seqs);
    const bool   other_threads = r.n_threads > 0 && last_threads_ > 0 && r.n_threads != last_threads_;
    const double change = same ? 0.0 : change_us(r.n_threads, last_threads_);  // before last_threads_ moves on
    // The last pass drafted, over the same requests (a batch that shrank changes shape whether drafting or not).
    const bool   left_drafting = !same && last_rows_ > last_requests_ && last_requests_ == (std::int32_t) r.n_requests;
    // A process's first pass pays for cold caches and llama.cpp's first graph of its shape (453 us where stories260K's
    // steady 1-row pass takes 120 on one thread): it says nothing about the machine's load or plain's cost from then
    // on, and as the first plain figure it would set what drafting is compared against for dozens of steps.
    const bool cold = n_steps_ == 1;
    // A fresh process's passes warm up over several steps (the demo model's 3-row pass: 297, 254, 229, 184, 173, 164,
    // then ~158 us): they say what the process paid, not what a pass of that shape costs. Taken as estimates, and
    // persisted, they priced plain and 2-row passes dear for every later one-shot process, which verified 7-row
    // passes where 3 rows run twice as fast per token.
    const bool warm_up = cold || n_steps_ <= params_.warm_up_steps;
    const bool first_use = observe_first_use(r, same, warm_up);
    if (!warm_up && !first_use && r.n_equal > 0 && r.t_pass_us > 0 && r.n_threads > 0 && r.n_threads < k_threads_max) {
        // (A first pass of its shape is slower for being first: cold_us(), not the machine's load.)
        // How much slower than its typical time (the estimates are medians) a pass on these threads runs now, on
        // average: preempted passes included, before this pass moves the estimates.
        const double typical = predict_us(r.n_rows, r.n_past, r.n_equal, r.n_seqs) + change;
        if (typical > 0) {
            auto & [f, at] = per_threads(slow_threads_, r.n_threads, {1.0, 0});
            f  = (1 - params_.slow_ema) * f + params_.slow_ema * std::clamp(r.t_pass_us / typical, 0.2, 20.0);
            at = n_steps_;
        }
    }
    last_threads_     = r.n_threads;
    last_rows_        = r.n_rows;
    last_requests_    = (std::int32_t) r.n_requests;
    last_equal_       = r.n_equal;
    last_seqs_        = r.n_seqs;
    if (cold) {
        drafted_before_ = drafted_before_ || r.t_draft_us > 0;  // a first draft with it counts as the cold one too
        return;
    }
    explore_us_ += params_.explore_cost_frac * (r.t_pass_us + r.t_draft_us);
    const double base = prior_us(r.n_rows, r.n_past, r.n_equal);
    const double t    = r.t_pass_us;
    const std::int32_t extra = extra_seqs(r.n_equal, r.n_seqs);
    const cost_est * known = find_est(r.n_rows, r.n_equal);
    const bool       fresh = known && n_steps_ - known->at <= (std::int64_t) params_.forget_steps;
    if (warm_up) {
        // No estimate from a warm-up pass (see `warm_up` above).
    } else if (first_use) {
        // Cold: what it took beyond the next pass of its shape (when one follows) is cold_us(); it sets neither a
        // steady estimate (it priced the shape dear for forget_steps) nor the change's (every change). A first pass
        // that also changed the thread count paid that switch too (switch_, up to 2.5 ms on stories260K): no sample.
        if (t > 0 && !other_threads) pending_cold_ = {r.n_rows, t};
    } else if (r.n_equal > 0 && base > 0 && t > 0 && extra > 0) {
        // A branchy tree: what it took beyond a chain of its rows (and a change of shape), per extra sequence.
        const double chain = predict_us(r.n_rows, r.n_past, r.n_equal) + change;
        seq_.add(std::max(0.0, t - chain) / extra);
    } else if (r.n_equal > 0 && base > 0 && t > 0 && !same && fresh) {
        // A pass of another shape than the last pays llama.cpp's graph rebuild: what it took beyond its shape's
        // steady estimate (the start-up table's figure underprices it by about 2x on the demo model here).
        const double extra_us = std::max(0.0, t - predict_us(r.n_rows, r.n_past, r.n_equal));
        if (other_threads && r.n_threads < k_threads_max) {
            per_threads(switch_, r.n_threads, cost_est{}).add(extra_us);
        } else {
            rebuild_.add(extra_us);
        }
    } else if (r.n_equal > 0 && base > 0 && t > 0) {
        // A steady pass, or one of a shape without a fresh estimate (a forced plain step after drafting ones is
        // always a change): its time less the learned change cost.
        const double steady = same ? t : std::max(0.05 * t, t - change);
        cost_est &   e      = est_for(r.n_rows, r.n_equal);
        if (n_steps_ - e.at > (std::int64_t) params_.forget_steps) e.n = e.n_measured = 0;  // long unmeasured: afresh
        e.add(steady / base);
        ++e.n_measured;
        e.at = n_steps_;
        // The shared ratios are what drafting shapes not measured lately fade to: learned from drafting passes only
        // (plain's estimate never fades; while drafting is off, plain passes alone would pull them to plain's ratio,
        // and the next probe would hop through shapes that look cheap). Single observations are clamped, so one
        // preempted step cannot swing them.
        const bool drafting_pass = r.n_rows > (std::int32_t) r.n_requests;
        if (drafting_pass) ratio_all_ = clamped_ema(ratio_all_, steady / base, params_.time_ema);
        // And per thread count, which a busy machine slows unequally (a pass on every core waits for the busy one).
        if (drafting_pass && r.n_threads > 0 && r.n_threads < k_threads_max) {
            // The mean of its passes with ratio_all_ as two of them, then an EMA: one pass (a process's first
            // ones, slow while the model's pages come in: 104 ms where a 2-row pass of a 1.1B Q8_0 model takes 62)
            // cannot set what every unmeasured shape on these threads costs; set from it, the tree layout priced
            // every longer tree 1.8x dear and never verified one in 1 of 3 runs.
            auto & [rt, n] = per_threads(ratio_threads_, r.n_threads, {0.0, 0});
            if (!(rt > 0)) rt = ratio_all_;
            const double w = std::max(params_.time_ema, 1.0 / (double) (++n + 2));
            rt             = (1 - w) * rt + w * std::clamp(steady / base, 0.5 * rt, 2.0 * rt);
        }
        interp_step_ = -1;  // the neighbours' ratios read these estimates
    }
    mode & m = mode_[bucket(r.n_requests, r.predicted)];
    if (r.n_rows == (std::int32_t) r.n_requests) {
        if (!r.drafted && left_drafting) m.exit_us = change;  // see mode::exit_us
        m.since_plain = 0;  // a plain pass: the plain estimate is fresh
        // As a ratio to the start-up time at this context length, so that it holds at another (attention grows).
        const double ratio = std::max(0.05 * r.t_pass_us, r.t_pass_us - change) / std::max(1e-9, base);
        if (!warm_up) {
            m.plain_ratio = m.plain_ratio > 0 ? (1 - params_.plain_ema) * m.plain_ratio + params_.plain_ema * ratio : ratio;
            m.n_plain_seen = std::min(m.n_plain_seen + 1, 1 << 20);  // past 1 / check_ema only the EMA's weight counts
            const double w = std::max(params_.check_ema, 1.0 / (double) m.n_plain_seen);
            m.check_us     = (1 - w) * m.check_us + w * r.t_pass_us;
        }
    } else {
        ++m.since_plain;
    }
    if (r.t_draft_us > 0 && !drafted_before_) {
        // A process's first draft pays for cold caches (the datastore's pages, lazily built tables): several plain
        // steps' worth once, which says nothing about what drafting costs from then on.
        drafted_before_ = true;
        return;
    }
    if (r.n_tokens > 0 && r.t_pass_us > 0) {
        ++m.n_rated;
        const double w = std::max(params_.rate_ema, 1.0 / (double) m.n_rated);
        m.rate_tokens  = (1 - w) * m.rate_tokens + w * (double) r.n_tokens;
        m.rate_us      = (1 - w) * m.rate_us + w * (r.t_pass_us + r.t_draft_us);
    }
    if (r.t_draft_us > 0) {
        t_draft_us_ = t_draft_us_ == 0 ? r.t_draft_us : 0.9 * t_draft_us_ + 0.1 * r.t_draft_us;
        // Per node asked of the drafters, for sizing the next drafts.
        const double per = r.t_draft_us / (double) std::max(1, r.n_asked);
        t_draft_node_us_ = t_draft_node_us_ == 0 ? per : 0.9 * t_draft_node_us_ + 0.1 * per;
    }
    // Not in the warm-up either: plain's side of the gain leaves those passes out, so drafting's must too.
    if (r.drafted && r.n_requests > 0 && !warm_up) update_gain(r, same, explored);
}

budget_state online_budget::export_state() const {
    budget_state s;
    s.acceptance     = acceptance_;
    s.cost_ratio_all = ratio_all_;
    s.cold_us        = cold_.n > 0 ? cold_.median : 0.0;
    s.t_draft_us     = t_draft_us_;
    for (std::size_t rows = 1; rows < single_.size(); ++rows) {
        // Only a median of several passes this process measured: a shape tried once or twice (and then avoided) is
        // never measured again. A shape the process measured less keeps what the warm start said (a short run does
        // not erase what longer ones learned).
        const cost_est & e = single_[rows];
        if (e.n_measured >= k_persist_min) {
            s.cost_ratio.emplace_back((std::int32_t) rows, ratio_of((std::int32_t) rows, 1));
        } else if (e.warm > 0) {
            s.cost_ratio.emplace_back((std::int32_t) rows, e.warm);
        }
    }
    s.t_draft_node_us = t_draft_node_us_;
    s.shape_values    = values_;
    for (std::size_t c = 0; c < k_classes; ++c) {
        const mode & m = mode_[c];
        s.plain_us.push_back(m.t_plain);
        s.spent_us.push_back(m.t_spent);
        s.n_off.push_back(m.n_off);
        s.off_left.push_back(m.off_left);
    }
    return s;
}

// --- the simple policies and the factory --------------------------------------------------------------------------

std::int32_t budget_policy::choose_equal(std::span<const budget_query> qs) {
    std::vector<std::int32_t> n(qs.size(), 0);
    choose(qs, n);
    return n.empty() ? 0 : *std::max_element(n.begin(), n.end());
}

void fixed_budget::choose(std::span<const budget_query> qs, std::span<std::int32_t> n_out) {
    for (size_t i = 0; i < qs.size(); ++i) {
        n_out[i] = qs[i].tree && !qs[i].tree->empty() ? std::min(n_, qs[i].n_max) : 0;  // no draft: a plain step
    }
}

std::int32_t budget_cap(const budget_spec & spec) {
    return !spec.speculate ? 0 : spec.n_fixed >= 0 ? spec.n_fixed : std::max(0, spec.n_max);
}

std::unique_ptr<budget_policy> make_budget_policy(const budget_spec & spec) {
    if (!spec.speculate || spec.n_fixed >= 0) {
        return traced_if_asked(std::make_unique<fixed_budget>(budget_cap(spec), spec.costs),
                               "fixed " + std::to_string(budget_cap(spec)));
    }
    online_budget_params p;
    p.n_max = budget_cap(spec);
    return traced_if_asked(std::make_unique<online_budget>(spec.costs, p, spec.warm), "auto");
}

}  // namespace rest
