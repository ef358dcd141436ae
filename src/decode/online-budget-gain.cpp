// online_budget's realised gain: whether drafting, as chosen, beats plain decoding by more than the steps' spread
// explains, per batch-size class; the plain checks, switching drafting off and probing it again (see online-budget.h).
#include "online-budget.h"

#include <algorithm>
#include <cmath>

namespace rest {

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
        if (m.check_left > 0) {
            --m.check_left;
            return false;
        }
        if (m.since_plain < plain_interval(m)) return true;
        m.since_plain = 0;  // measure what plain decoding costs now, up to the check's first steady plain pass
        m.check_left  = params_.check_passes_max - 1;
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
    // A check among drafting steps costs its plain passes plus a change of shape each way (llama.cpp's graph, and on
    // a CPU the thread count): spaced so that this stays near plain_cost_frac / gain of the drafting steps' time.
    if (!(m.t_spent > 0) || !(m.plain_ratio > 0)) return params_.plain_every;
    // Measured, once plain passes were: their mean, the OS's preemptions included, plus the change back to drafting.
    // (Plain passes while drafting is off count too: steady ones, a change short of a check, so checks err frequent.)
    // (Two passes: the one that pays the change into plain, and the steady one.)
    const double check = m.n_plain_seen > 0 ? 2 * m.check_us + rebuild_us()
                                        : 2 * prior_us((std::int32_t) n_live_, 0, 1) * m.plain_ratio + 2 * rebuild_us();
    // And the more drafting gains, the rarer: a check can only turn drafting off where plain decoding has become
    // cheaper by the whole gain (what acceptance does is measured by the drafting steps themselves). With a busy
    // core at two threads, drafting ran 4-10x plain's speed, and the checks took 16-26% of the passes' time.
    // The price: after a slow plain pass, plain's cost and the gain stay high until later checks bring them down
    // (plain_ratio moves at steady plain passes only, by plain_ema each once a few were seen), and those may be
    // plain_every_max apart.
    const double steps = check * std::max(1.0, m.t_plain / m.t_spent) / (params_.plain_cost_frac * m.t_spent);
    return (std::int32_t) std::clamp(steps, (double) params_.plain_every, (double) params_.plain_every_max);
}

online_budget::gain_caps online_budget::gain_caps_of(double typical, double change) const {
    // A preempted pass counts as at most preempt_cap typical passes of its shape. With a busy core at two threads
    // on a Zen 4 CPU, 3-12% of passes waited 4-5 ms for it (20x a 1-row pass) and a few 30-140 ms: drafting that lost
    // 25% by the mean stayed on for a thousand steps at a time, its loss within a spread those few passes made. Capped,
    // a preempted pass still counts against the shape it hit (on more threads a pass is preempted more often: see
    // slowdown()), with a spread the test can see past. Typical is what the estimates said before this pass (its own
    // time in a median of few would lift its own cap), plus the change of shape it paid, which only its time measures.
    gain_caps c;
    if (typical > 0) c.pass_us = params_.preempt_cap * typical + change;
    if (t_draft_us_ > 0) c.draft_us = params_.preempt_cap * t_draft_us_;
    return c;
}

void online_budget::update_gain(const step_report & r, bool same, bool explored, const gain_caps & caps) {
    mode & m = mode_[bucket(r.n_requests, r.predicted)];
    // Plain decoding's time for the same tokens: a plain pass over these requests (one row each) emits one token
    // per request. Like with like, both sides are means of measured steps, each pass capped (gain_caps_of(); but
    // see steady_plain below; plain steps are measured every plain_interval()): a shape's median, which the per-step
    // choice prices, leaves out the steps the OS preempted, and on a busy machine a pass on more threads is preempted
    // more often (the mean of a 2-thread plain pass was 4x its median there, a 1-thread drafting pass's 2x).
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
    const double spent        = (steady_plain ? plain : std::min(r.t_pass_us, caps.pass_us)) +
                                std::min(r.t_draft_us, caps.draft_us) + m.exit_us;
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
        // machine a step the OS preempted costs 10-100x its median, on either side, and counts up to preempt_cap
        // times it here): plain steps only, then probe again.
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

}  // namespace rest
