#include "engine.h"

#include "text-stream.h"

#include "rest/history-store.h"

#include <algorithm>
#include <cstdio>
#include <future>

namespace {

double now_us() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::micro>(clock::now().time_since_epoch()).count();
}

const char * finish_reason(rest::stop_reason r) {
    switch (r) {
        case rest::stop_reason::length:
        case rest::stop_reason::context:   return "length";
        case rest::stop_reason::eog:
        case rest::stop_reason::stop:      return "stop";
        case rest::stop_reason::cancelled:
        case rest::stop_reason::none:      return "cancelled";
    }
    return "cancelled";
}

}  // namespace

// A slot's request and everything the request points to. Lives as long as the engine; reused per job.
struct engine::slot {
    std::int32_t                         index = 0;
    bool                                 busy  = false;  // written under engine::mutex_
    std::shared_ptr<job>                 j;
    rest::request                        req;
    std::unique_ptr<rest::token_sampler> sampler;
    std::shared_ptr<const rest::datastore> ds;  // the request's corpora; declared before the drafter that uses it
    std::unique_ptr<rest::drafter>       drafter;
    text_stream                          text;
    logprob_cursor                       sent;  // log probabilities already published
    double                               t_queue_ms = 0;
    rest::generation_stats               seen;  // req.stats already reported to the metrics
    bool                                 prefill_seen = false;  // its prompt's processing was reported
    double                               t_last_tokens_us = 0;  // when a step last gave it tokens (0: never)
};

engine::engine(const rest::model & model, rest::target_model & ctx, const corpus_set * corpora,
               rest::history_store * history, rest::budget_policy * policy, const engine_params & params,
               server_metrics & metrics) :
    model_(model), ctx_(ctx), corpora_(corpora), history_(history), params_(params), metrics_(metrics) {
    decoder_ = std::make_unique<rest::decoder>(ctx_, policy);
    batch_   = std::make_unique<rest::slot_batch>(*decoder_, ctx_.n_slots(), ctx_.n_rows_max(), params_.pacing);
    for (std::int32_t i = 0; i < ctx_.n_slots(); ++i) {
        slots_.push_back(std::make_unique<slot>());
        slots_.back()->index = i;
    }
}

engine::~engine() {
    stop();
}

void engine::start() {
    // The warm-up runs on the engine thread: with OpenMP builds of ggml each thread that runs a forward pass keeps a
    // pool of workers of its own (see cost-cache.cpp), and the engine thread's is the one requests use.
    std::promise<void> warmed;
    std::future<void>  done = warmed.get_future();
    thread_ = std::thread([this, warmed = std::move(warmed)]() mutable {
        warm_up();
        warmed.set_value();
        loop();
    });
    done.wait();
}

void engine::warm_up() {
    if (!params_.warm_up) return;
    // A failed warm-up costs the first requests their cold passes, nothing more: serve anyway.
    try {
        decoder_->warm_up(params_.costs, params_.n_draft_max);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "rest serve: warning: warm-up skipped: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "rest serve: warning: warm-up skipped\n");
    }
}

engine::submit_result engine::submit(const std::shared_ptr<job> & j) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (draining_ || stop_) {
            return submit_result::draining;
        }
        if ((std::int32_t) queue_.size() >= params_.queue_max) {
            return submit_result::queue_full;
        }
        queue_.push_back(j);
    }
    cv_.notify_one();
    return submit_result::ok;
}

void engine::wake() {
    cv_.notify_one();
}

void engine::drain() {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
}

bool engine::wait_idle(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_idle_.wait_until(lock, deadline, [this] { return queue_.empty() && n_busy_ == 0; });
}

void engine::stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) {
        thread_.join();
    }
    background_.stop();  // every finished output is in the online store before it is saved
}

engine_load engine::load() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {(std::int32_t) slots_.size(), n_busy_, (std::int32_t) queue_.size(), draining_};
}

void engine::begin(slot & s, std::shared_ptr<job> j) {
    const job_input & in = j->input();
    s.j                  = std::move(j);
    s.t_queue_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s.j->t_submit()).count();
    s.text       = text_stream(in.stop);
    s.sent       = {};
    s.sampler    = model_.new_sampler(in.sampling);
    s.drafter.reset();
    s.ds.reset();
    const bool speculate = params_.speculate && params_.n_draft_max > 0 && in.speculate && in.n_draft_max != 0;
    if (speculate) {
        rest::drafter_params dp = params_.draft;
        s.ds                    = corpora_ ? corpora_->select(in.corpora) : nullptr;
        dp.use_datastore        = dp.use_datastore && s.ds != nullptr;
        dp.use_history          = dp.use_history && history_ != nullptr;
        s.drafter = std::make_unique<rest::drafter>(s.ds.get(), dp.use_history ? history_ : nullptr, dp);
    }
    std::int32_t cap = params_.n_draft_max;
    if (in.n_draft_max >= 0) {
        cap = std::min(cap, in.n_draft_max);
    }
    s.req                  = rest::request{};
    s.req.slot             = s.index;
    s.req.params.n_predict = in.n_predict;
    s.req.params.n_draft_max = speculate ? cap : 0;
    s.req.n_logprobs         = in.n_logprobs;
    s.req.prediction         = in.prediction;  // the job (and so its input) lives as long as the slot holds it
    s.req.sampler          = s.sampler.get();
    s.req.draft            = s.drafter.get();
    s.req.is_eog           = [this](rest::token_id t) { return model_.is_eog(t); };
    slot * sp              = &s;
    s.req.on_token         = [this, sp](rest::token_id t) {
        // End-of-generation tokens end the text; they are not part of it.
        return model_.is_eog(t) || sp->text.add(model_.vocab().piece(t));
    };
    batch_->start(s.index, s.req, in.prompt, in.cache_prompt);
    s.seen             = s.req.stats;
    s.prefill_seen     = false;
    s.t_last_tokens_us = 0;
}

engine::slot * engine::pick_slot(const job_input & in) {
    // The free slot whose memory shares the longest prefix with the prompt (llama-server's cache_prompt); without
    // the cache, the free slot whose memory is worth least.
    slot *      best   = nullptr;
    std::size_t best_n = 0;
    for (auto & sp : slots_) {
        if (sp->busy) continue;
        const std::size_t shared = batch_->n_reusable(sp->index, in.prompt);
        const std::size_t n      = in.cache_prompt ? shared : SIZE_MAX - shared;
        if (!best || n > best_n) {
            best   = sp.get();
            best_n = n;
        }
    }
    return best;
}

void engine::report_prefill(slot & s) {
    if (s.prefill_seen || s.req.prefilling()) return;
    s.prefill_seen                = true;
    const rest::generation_stats & st = s.req.stats;
    metrics_.on_prefill(st.n_prompt, st.n_cached, 0, st.t_prefill_us);  // (its passes are counted with the steps)
}

// The recorded log probabilities of the tokens, from the cursor on, whose pieces start before byte text_bytes of
// the text: those that make up text up to there. EOG tokens are not text, and a stop string cuts the text inside
// or before the token that completed it. One rule for the whole text and for a stream's chunks, so the chunks'
// log probabilities add up to the whole response's.
std::vector<position_logprobs> engine::logprobs_of_text(const rest::request & r, std::size_t text_bytes,
                                                        logprob_cursor & from) const {
    std::vector<position_logprobs> out;
    for (; from.next < r.logprobs.size() && from.next < r.output.size() && from.bytes < text_bytes; ++from.next) {
        const rest::token_logprobs & lp = r.logprobs[from.next];
        if (model_.is_eog(lp.token)) break;
        position_logprobs p;
        p.chosen = {model_.vocab().piece(lp.token), lp.logprob};
        for (const auto & [t, v] : lp.top) p.top.push_back({model_.vocab().piece(t), v});
        from.bytes += p.chosen.piece.size();
        out.push_back(std::move(p));
    }
    return out;
}

// The text the slot's stream lets go now (all of it when final), with the log probabilities it covers.
text_release engine::release(slot & s, bool final) {
    text_release out;
    out.text = final ? s.text.finish() : s.text.take();
    if (s.req.n_logprobs >= 0) {
        out.logprobs = logprobs_of_text(s.req, s.text.released(), s.sent);
    }
    return out;
}

void engine::end(slot & s, end_kind kind) {
    rest::request & r = s.req;
    if (kind == end_kind::finished) {
        // The finished output joins the online store (the drafter hands it over itself), off this thread.
        if (s.drafter) {
            background_.push([d = std::shared_ptr<rest::drafter>(std::move(s.drafter))] { d->finish(); });
        } else if (history_ && !r.output.empty()) {
            background_.push([h = history_, doc = r.output] { h->add(doc); });
        }
    }
    batch_->release(s.index);  // the slot's memory stays, for a request that starts alike (prompt cache)
    job_output out;
    out.finish_reason = kind == end_kind::finished ? finish_reason(r.stopped) : "cancelled";
    if (kind == end_kind::shutdown) {
        out.error_status = 503;
        out.error        = "the server shut down before this generation finished";
    }
    text_release   tail = release(s, true);  // before the output moves out: it reads the tokens
    logprob_cursor whole;
    out.n_prompt      = r.stats.n_prompt;
    out.n_completion  = (std::int64_t) r.output.size();
    out.logprobs      = logprobs_of_text(r, s.text.text().size(), whole);
    out.tokens        = std::move(r.output);
    out.stats         = r.stats;
    out.slot          = s.index;
    out.t_queue_ms    = s.t_queue_ms;
    metrics_.on_finish(out.finish_reason, out.n_prompt, out.n_completion, out.t_queue_ms);
    // Free the slot before the client hears the result, so a /health right after a reply never counts it busy.
    std::shared_ptr<job> j    = std::move(s.j);
    s.drafter.reset();
    s.sampler.reset();
    s.req = rest::request{};
    {
        std::lock_guard<std::mutex> lock(mutex_);
        s.busy = false;
        --n_busy_;
        if (queue_.empty() && n_busy_ == 0) {
            cv_idle_.notify_all();
        }
    }
    j->publish(std::move(tail));
    j->finish(std::move(out));
}

void engine::fail_active(const std::string & message) {
    std::fprintf(stderr, "rest serve: %s\n", message.c_str());
    for (auto & sp : slots_) {
        slot & s = *sp;
        if (!s.busy || !s.j) {
            continue;
        }
        job_output out;
        out.error_status  = 500;
        out.error         = message;
        out.finish_reason = "error";
        metrics_.on_finish("error", s.req.stats.n_prompt, (std::int64_t) s.req.output.size(), s.t_queue_ms);
        s.j->finish(std::move(out));
        s.j.reset();
        batch_->release(s.index, false);  // what failed may have left the memory half-written
        s.drafter.reset();
        s.sampler.reset();
        s.req = rest::request{};
        std::lock_guard<std::mutex> lock(mutex_);
        s.busy = false;
        --n_busy_;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty() && n_busy_ == 0) {
        cv_idle_.notify_all();
    }
}

void engine::loop() {
    std::vector<slot *>          active;
    std::vector<std::pair<slot *, std::shared_ptr<job>>> admitted;
    std::vector<std::shared_ptr<job>> dropped;
    while (true) {
        admitted.clear();
        dropped.clear();
        bool stopping = false;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [this] { return stop_ || n_busy_ > 0 || !queue_.empty(); });
            stopping = stop_;
            for (auto it = queue_.begin(); it != queue_.end();) {
                if (stopping || (*it)->cancelled()) {
                    dropped.push_back(std::move(*it));
                    it = queue_.erase(it);
                } else {
                    ++it;
                }
            }
            while (!queue_.empty()) {
                slot * s = pick_slot(queue_.front()->input());
                if (!s) break;
                s->busy = true;
                ++n_busy_;
                admitted.emplace_back(s, std::move(queue_.front()));
                queue_.pop_front();
            }
            if (queue_.empty() && n_busy_ == 0) {
                cv_idle_.notify_all();
            }
        }
        for (auto & j : dropped) {
            job_output out;
            out.finish_reason = "cancelled";
            if (stopping) {
                out.error_status = 503;
                out.error        = "the server is shutting down";
            }
            metrics_.on_finish("cancelled", 0, 0, 0);
            j->finish(std::move(out));
        }
        for (auto & [s, j] : admitted) {
            std::shared_ptr<job> keep = j;
            try {
                begin(*s, std::move(j));
            } catch (const std::exception & e) {
                // The HTTP layer checked the prompt against the context; this is a last line of defence.
                job_output out;
                out.error_status  = dynamic_cast<const rest::user_error *>(&e) ? 400 : 500;
                out.error         = e.what();
                out.finish_reason = "error";
                metrics_.on_finish("error", 0, 0, 0);
                keep->finish(std::move(out));
                s->j.reset();
                batch_->release(s->index, false);  // (clears the slot's memory: begin() may have changed it)
                s->drafter.reset();
                s->sampler.reset();
                s->req = rest::request{};
                std::lock_guard<std::mutex> lock(mutex_);
                s->busy = false;
                --n_busy_;
            }
        }

        active.clear();
        for (auto & sp : slots_) {
            slot & s = *sp;
            if (!s.busy || !s.j) {
                continue;
            }
            if (stopping || s.j->cancelled()) {
                end(s, s.j->cancelled() ? end_kind::cancelled : end_kind::shutdown);
                continue;
            }
            if (s.req.done()) {  // n_predict == 0, or finished during prompt processing
                end(s, end_kind::finished);
                continue;
            }
            active.push_back(&s);
        }
        if (stopping) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (queue_.empty() && n_busy_ == 0) {
                break;
            }
            continue;
        }
        if (active.empty()) {
            continue;
        }

        const std::int64_t f0 = ctx_.n_forward();
        const double       t0 = now_us();
        try {
            batch_->step();  // every active slot's request (the others have just been ended)
        } catch (const std::exception & e) {
            fail_active(std::string("decoding failed: ") + e.what());
            continue;
        }
        step_sample st;
        st.n_forward = ctx_.n_forward() - f0;
        for (slot * s : active) {
            const rest::generation_stats & now = s->req.stats;
            st.n_tokens += now.n_tokens - s->seen.n_tokens;
            st.add_draft(now.n_drafted - s->seen.n_drafted, now.n_accepted - s->seen.n_accepted);
            st.t_draft_us += now.t_draft_us - s->seen.t_draft_us;
            // Every request of a step is charged the step's whole verify time: count it once.
            st.t_verify_us = std::max(st.t_verify_us, now.t_verify_us - s->seen.t_verify_us);
            st.n_slots += now.n_steps > s->seen.n_steps ? 1 : 0;
            if (now.n_tokens > s->seen.n_tokens) {
                const double t = now_us();
                if (s->t_last_tokens_us > 0) metrics_.on_token_gap((t - s->t_last_tokens_us) * 1e-6);
                s->t_last_tokens_us = t;
            }
            s->seen = now;
        }
        for (slot * s : active) {
            report_prefill(*s);
            s->j->publish(release(*s, false));
            if (s->req.done()) {
                end(*s, end_kind::finished);
            }
        }
        st.t_step_us = now_us() - t0;
        if (st.n_slots == 0) {
            metrics_.on_prompt_passes(st.n_forward);  // passes of prompt rows alone
        } else if (st.n_forward > 0) {
            metrics_.on_step(st);
        }
    }
}
