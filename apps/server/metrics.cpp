#include "metrics.h"

#include <algorithm>
#include <cstdio>
#include <span>

namespace {

// Upper bounds (seconds) of the prefill-time histogram's buckets: vLLM's request_prefill_time_seconds buckets,
// with finer ones below 0.3 s, where small models and cached prompts land.
constexpr double k_prefill_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5,
                                        2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0};
constexpr std::size_t k_n_prefill_buckets = sizeof(k_prefill_buckets) / sizeof(k_prefill_buckets[0]);

// Inter-token latency buckets: 1 ms to about a minute in steps of 20%, fine enough to read a p99 off them (a stall
// is a ratio to the usual gap, on models from 0.1 ms to 1 s per step).
const std::vector<double> & itl_buckets() {
    static const std::vector<double> b = [] {
        std::vector<double> v;
        for (double x = 1e-3; x < 60; x *= 1.2) v.push_back(x);
        return v;
    }();
    return b;
}

void observe(std::vector<std::int64_t> & counts, std::span<const double> bounds, double x) {
    counts.resize(bounds.size() + 1, 0);
    ++counts[(std::size_t) (std::lower_bound(bounds.begin(), bounds.end(), x) - bounds.begin())];
}

void family(std::string & out, const char * name, const char * type, const char * help) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
}

void sample(std::string & out, const std::string & name, const std::string & labels, double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    out += name;
    if (!labels.empty()) {
        out += '{' + labels + '}';
    }
    out += ' ';
    out += buf;
    out += '\n';
}

void metric(std::string & out, const char * name, const char * type, const char * help, double v) {
    family(out, name, type, help);
    sample(out, name, "", v);
}

// A histogram's samples from per-bucket counts (the last entry: above every bound).
void histogram(std::string & out, const std::string & name, std::span<const double> bounds,
               const std::vector<std::int64_t> & counts, double sum) {
    std::int64_t cumulative = 0;
    for (std::size_t b = 0; b < bounds.size(); ++b) {
        cumulative += b < counts.size() ? counts[b] : 0;
        char le[32];
        std::snprintf(le, sizeof(le), "%g", bounds[b]);
        sample(out, name + "_bucket", std::string("le=\"") + le + "\"", (double) cumulative);
    }
    cumulative += counts.size() > bounds.size() ? counts[bounds.size()] : 0;
    sample(out, name + "_bucket", "le=\"+Inf\"", (double) cumulative);
    sample(out, name + "_sum", "", sum);
    sample(out, name + "_count", "", (double) cumulative);
}

}  // namespace

void step_sample::add_draft(std::int64_t drafted, std::int64_t accepted) {
    n_drafted += drafted;
    n_accepted += accepted;
    if (drafted <= 0) {
        return;  // plain decoding this step: not a draft
    }
    ++n_drafts;
    if ((std::int64_t) n_accepted_at.size() < accepted) {
        n_accepted_at.resize((std::size_t) accepted, 0);
    }
    for (std::int64_t i = 0; i < accepted; ++i) {
        ++n_accepted_at[(std::size_t) i];
    }
}

void server_metrics::on_request(const std::string & endpoint) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_[endpoint];
}

void server_metrics::on_status(int status) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++responses_[status];
}

void server_metrics::on_token_gap(double t_s) {
    std::lock_guard<std::mutex> lock(mutex_);
    observe(itl_hist_, itl_buckets(), t_s);
    t_itl_s_ += t_s;
}

void server_metrics::on_prompt_passes(std::int64_t n_forward) {
    std::lock_guard<std::mutex> lock(mutex_);
    n_forward_ += n_forward;
}

void server_metrics::on_prefill(std::int64_t n_tokens, std::int64_t n_cached, std::int64_t n_forward,
                                double t_us) {
    std::lock_guard<std::mutex> lock(mutex_);
    n_prompt_tokens_ += n_tokens;
    n_cached_tokens_ += n_cached;
    const double      t_s    = t_us * 1e-6;
    observe(prefill_hist_, k_prefill_buckets, t_s);
    n_forward_ += n_forward;
    t_prefill_us_ += t_us;
}

void server_metrics::on_step(const step_sample & s) {
    std::lock_guard<std::mutex> lock(mutex_);
    n_forward_ += s.n_forward;
    ++n_steps_;
    n_slot_steps_ += s.n_slots;
    n_step_tokens_ += s.n_tokens;
    n_completion_tokens_ += s.n_tokens;
    n_drafted_ += s.n_drafted;
    n_accepted_ += s.n_accepted;
    n_drafts_ += s.n_drafts;
    if (n_accepted_at_.size() < s.n_accepted_at.size()) {
        n_accepted_at_.resize(s.n_accepted_at.size(), 0);
    }
    for (std::size_t i = 0; i < s.n_accepted_at.size(); ++i) {
        n_accepted_at_[i] += s.n_accepted_at[i];
    }
    t_draft_us_ += s.t_draft_us;
    t_verify_us_ += s.t_verify_us;
    t_step_us_ += s.t_step_us;
}

void server_metrics::on_finish(const std::string & reason, std::int64_t, std::int64_t, double t_queue_ms) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++finished_[reason];
    t_queue_ms_ += t_queue_ms;
}

void server_metrics::on_corpus_add(std::int64_t n_tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    n_corpus_tokens_ += n_tokens;
}

// The names dashboards built for vLLM look for (its `vllm:` prefix as `rest:`): speculative decoding as vLLM
// counts it (a draft is one request's verification of at least one draft token; position i is draft depth i, and
// a tree's accepted path is a chain), and prompt-cache and prefill figures. Caller holds mutex_.
void server_metrics::standard_families(std::string & out) const {
    metric(out, "rest:spec_decode_num_drafts_total", "counter",
           "Drafts verified: requests' decoding steps that verified at least one draft token.", (double) n_drafts_);
    metric(out, "rest:spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.", (double) n_drafted_);
    metric(out, "rest:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
           (double) n_accepted_);
    family(out, "rest:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Draft tokens accepted at each draft position (0: the first token after the last emitted one).");
    for (std::size_t i = 0; i < std::max<std::size_t>(n_accepted_at_.size(), 1); ++i) {
        sample(out, "rest:spec_decode_num_accepted_tokens_per_pos_total", "position=\"" + std::to_string(i) + "\"",
               i < n_accepted_at_.size() ? (double) n_accepted_at_[i] : 0.0);
    }
    metric(out, "rest:prompt_tokens_total", "counter", "Prompt tokens of admitted requests, cached or not.",
           (double) n_prompt_tokens_);
    metric(out, "rest:prompt_tokens_cached_total", "counter",
           "Prompt tokens reused from the prompt cache (not processed again).", (double) n_cached_tokens_);
    family(out, "rest:request_prefill_time_seconds", "histogram", "Time to process a request's prompt.");
    histogram(out, "rest:request_prefill_time_seconds", k_prefill_buckets, prefill_hist_, t_prefill_us_ * 1e-6);
    family(out, "rest:inter_token_latency_seconds", "histogram",
           "Per request, the time between two steps that gave it tokens (a step may give several).");
    histogram(out, "rest:inter_token_latency_seconds", itl_buckets(), itl_hist_, t_itl_s_);
}

std::string server_metrics::prometheus(const metrics_gauges & g) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string                 out;
    family(out, "rest_requests_total", "counter", "HTTP requests received, by endpoint.");
    for (const auto & [ep, n] : requests_) {
        sample(out, "rest_requests_total", "endpoint=\"" + ep + "\"", (double) n);
    }
    family(out, "rest_responses_total", "counter", "HTTP responses sent, by status code.");
    for (const auto & [st, n] : responses_) {
        sample(out, "rest_responses_total", "code=\"" + std::to_string(st) + "\"", (double) n);
    }
    family(out, "rest_generations_total", "counter", "Generations ended, by reason (stop, length, cancelled, error).");
    for (const auto & [r, n] : finished_) {
        sample(out, "rest_generations_total", "reason=\"" + r + "\"", (double) n);
    }
    metric(out, "rest_prompt_tokens_total", "counter", "Prompt tokens of admitted requests (cached ones included).",
           (double) n_prompt_tokens_);
    metric(out, "rest_generated_tokens_total", "counter", "Tokens generated.", (double) n_completion_tokens_);
    metric(out, "rest_target_forwards_total", "counter", "Target model forward passes (llama_decode calls: prompt "
           "chunks and decoding steps).", (double) n_forward_);
    metric(out, "rest_decode_steps_total", "counter", "Decoding steps (one forward pass for every active slot).",
           (double) n_steps_);
    metric(out, "rest_slot_steps_total", "counter", "Per-request forward passes: the sum over steps of the slots "
           "each verified.", (double) n_slot_steps_);
    metric(out, "rest_draft_tokens_total", "counter", "Draft tokens verified.", (double) n_drafted_);
    metric(out, "rest_accepted_tokens_total", "counter", "Draft tokens accepted.", (double) n_accepted_);
    metric(out, "rest_tokens_per_forward", "gauge", "Tokens each request gains per forward pass it takes part in "
           "(1 without speculation), since start.",
           n_slot_steps_ ? (double) n_step_tokens_ / (double) n_slot_steps_ : 0.0);
    metric(out, "rest_tokens_per_decode", "gauge", "Tokens generated per decoding step over all slots (batching "
           "and speculation), since start.", n_steps_ ? (double) n_step_tokens_ / (double) n_steps_ : 0.0);
    metric(out, "rest_prefill_seconds_total", "counter", "Time spent processing prompts.", t_prefill_us_ * 1e-6);
    metric(out, "rest_draft_seconds_total", "counter", "Time spent drafting.", t_draft_us_ * 1e-6);
    metric(out, "rest_verify_seconds_total", "counter", "Time spent in verification forward passes.",
           t_verify_us_ * 1e-6);
    metric(out, "rest_step_seconds_total", "counter", "Time spent in decoding steps (draft, verify, sample).",
           t_step_us_ * 1e-6);
    metric(out, "rest_queue_seconds_total", "counter", "Time requests waited for a slot.", t_queue_ms_ * 1e-3);
    metric(out, "rest_corpus_added_tokens_total", "counter", "Tokens added through POST /v1/corpus.",
           (double) n_corpus_tokens_);
    standard_families(out);
    metric(out, "rest_slots", "gauge", "Slots (concurrent sequences).", g.n_slots);
    metric(out, "rest_slots_busy", "gauge", "Slots generating now.", g.n_slots_busy);
    metric(out, "rest_queue_depth", "gauge", "Requests waiting for a slot.", g.n_queued);
    metric(out, "rest_history_tokens", "gauge", "Tokens in the online (past output) store.", (double) g.history_tokens);
    metric(out, "rest_history_documents", "gauge", "Documents in the online store.", (double) g.history_documents);
    metric(out, "rest_draining", "gauge", "1 while the server drains for shutdown.", g.draining ? 1 : 0);
    return out;
}
