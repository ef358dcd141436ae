#include "metrics.h"

#include <cstdio>

namespace {

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

void sample(std::string & out, const char * name, const std::string & labels, double v) {
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

}  // namespace

void server_metrics::on_request(const std::string & endpoint) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_[endpoint];
}

void server_metrics::on_status(int status) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++responses_[status];
}

void server_metrics::on_prefill(std::int64_t n_tokens, std::int64_t n_forward, double t_us) {
    std::lock_guard<std::mutex> lock(mutex_);
    n_prompt_tokens_ += n_tokens;
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
    metric(out, "rest_prompt_tokens_total", "counter", "Prompt tokens processed.", (double) n_prompt_tokens_);
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
    metric(out, "rest_slots", "gauge", "Slots (concurrent sequences).", g.n_slots);
    metric(out, "rest_slots_busy", "gauge", "Slots generating now.", g.n_slots_busy);
    metric(out, "rest_queue_depth", "gauge", "Requests waiting for a slot.", g.n_queued);
    metric(out, "rest_history_tokens", "gauge", "Tokens in the online (past output) store.", (double) g.history_tokens);
    metric(out, "rest_history_documents", "gauge", "Documents in the online store.", (double) g.history_documents);
    metric(out, "rest_draining", "gauge", "1 while the server drains for shutdown.", g.draining ? 1 : 0);
    return out;
}
