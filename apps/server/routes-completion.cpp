// POST /v1/completions and POST /v1/chat/completions.
//
// The handler validates and tokenizes on the HTTP thread (bad input never reaches the engine), submits a job and
// then either waits for the whole result or streams Server-Sent Events as the engine releases text. While it
// waits it polls its socket: a client that disconnects cancels the job, and the engine frees its slot before
// its next step.
#include "conn-probe.h"
#include "http-util.h"
#include "oai-response.h"
#include "routes.h"

#include <chrono>
#include <memory>
#include <utility>

namespace {

constexpr std::chrono::milliseconds k_poll{25};  // how often a waiting handler checks for a vanished client

struct stream_state {
    std::shared_ptr<job> j;
    response_meta        meta;
    bool                 include_usage = false;
    int                  fd = -1;
    bool                 opened = false;  // chat: the first chunk (role) went out
    std::size_t          logprob_bytes = 0;  // pieces of the tokens whose log probabilities went out (text_offset)
    bool                 closed = false;  // [DONE] went out
};

std::shared_ptr<job> submit(server_state & st, const completion_spec & spec) {
    if (st.draining.load()) {
        throw api_error(503, "the server is shutting down", "server_error", "", "shutting_down");
    }
    try {
        st.corpora.check(spec.corpora);
    } catch (const corpus_error & e) {
        throw bad_request(e.what(), "corpus", "unknown_corpus");
    }
    auto j = std::make_shared<job>(prepare_job(spec, st.model.vocab(), st.chat, st.limits));
    switch (st.eng.submit(j)) {
        case engine::submit_result::ok:
            return j;
        case engine::submit_result::queue_full:
            throw api_error(503, "the server is busy: " + std::to_string(st.params.queue_max) +
                                     " requests are waiting already; retry later",
                            "server_error", "", "server_busy");
        case engine::submit_result::draining:
            break;
    }
    throw api_error(503, "the server is shutting down", "server_error", "", "shutting_down");
}

api_error job_error(const job_output & out) {
    return api_error(out.error_status, out.error, out.error_status < 500 ? "invalid_request_error" : "server_error");
}

// One provider call: waits for news (or a disconnect), then writes every event it has.
bool stream_next(server_state & st, stream_state & s, httplib::DataSink & sink) {
    if (s.closed) {
        sink.done();
        return true;
    }
    text_release got;
    bool         finished = false;
    while (true) {
        finished = s.j->wait(k_poll, got);
        if (finished || !got.empty()) {
            break;
        }
        if (peer_closed(s.fd)) {
            s.j->cancel();
            st.eng.wake();
            return false;
        }
    }
    std::string events;
    if (s.meta.kind == api_kind::chat && !s.opened) {
        events += sse_event(chunk_json(s.meta, "", nullptr, true));
        s.opened = true;
    }
    if (!got.empty()) {
        nlohmann::json logprobs = nullptr;
        if (s.meta.logprobs >= 0) {
            logprobs = logprobs_json(s.meta.kind, got.logprobs, s.logprob_bytes);
            for (const auto & p : got.logprobs) s.logprob_bytes += p.chosen.piece.size();
        }
        events += sse_event(chunk_json(s.meta, got.text, nullptr, false, logprobs));
    }
    if (finished) {
        const job_output & out = s.j->output();
        if (out.error_status != 0) {
            events += sse_event(error_json(job_error(out)));
        } else {
            events += sse_event(final_chunk_json(s.meta, out));
            if (s.include_usage) {
                events += sse_event(usage_chunk_json(s.meta, out));
            }
        }
        events += "data: [DONE]\n\n";
        s.closed = true;
    }
    if (!sink.write(events.data(), events.size())) {
        s.j->cancel();
        st.eng.wake();
        return false;
    }
    if (s.closed) {
        sink.done();
    }
    return true;
}

void handle_completion(server_state & st, const httplib::Request & req, httplib::Response & res, api_kind kind) {
    st.metrics.on_request(kind == api_kind::chat ? "chat_completions" : "completions");
    try {
        const completion_spec spec = parse_completion_request(req.body, kind);
        std::shared_ptr<job>  j    = submit(st, spec);

        response_meta meta;
        meta.kind          = kind;
        meta.id            = new_response_id(kind);
        meta.created       = (std::int64_t) std::time(nullptr);
        meta.model         = st.model_id;
        meta.return_tokens = spec.return_tokens;
        meta.logprobs      = spec.logprobs;
        const int fd       = find_request_socket(req.remote_addr, req.remote_port, req.local_port);

        if (!spec.stream) {
            text_release got;  // its log probabilities add up to out.logprobs; the response takes those
            while (!j->wait(k_poll, got)) {
                if (peer_closed(fd)) {
                    j->cancel();
                    st.eng.wake();
                    res.status = 499;  // nginx's "client closed request": nobody reads it, the log does
                    return;
                }
            }
            const job_output & out = j->output();
            if (out.error_status != 0) {
                throw job_error(out);
            }
            reply_json(res, 200, completion_json(meta, got.text, out));
            return;
        }

        auto s           = std::make_shared<stream_state>();
        s->j             = std::move(j);
        s->meta          = meta;
        s->include_usage = spec.include_usage;
        s->fd            = fd;
        res.status       = 200;
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        ++st.n_streams;  // the releaser below runs exactly once (httplib calls it from ~Response at the latest)
        res.set_chunked_content_provider(
            "text/event-stream",
            [&st, s](size_t, httplib::DataSink & sink) { return stream_next(st, *s, sink); },
            [&st, s](bool success) {
                --st.n_streams;
                if (!success || !s->closed) {
                    s->j->cancel();
                    st.eng.wake();
                }
            });
    } catch (const api_error & e) {
        reply_error(res, e);
    }
}

}  // namespace

void add_completion_routes(httplib::Server & svr, server_state & st) {
    // llama-server serves both under a base URL without /v1 too.
    const std::pair<const char *, api_kind> routes[] = {{"/v1/completions", api_kind::completion},
                                                        {"/completions", api_kind::completion},
                                                        {"/v1/chat/completions", api_kind::chat},
                                                        {"/chat/completions", api_kind::chat}};
    for (const auto & [path, kind] : routes) {
        svr.Post(path, [&st, kind](const httplib::Request & req, httplib::Response & res) {
            handle_completion(st, req, res, kind);
        });
        refuse_other_methods(svr, path, "POST");
    }
}
