#include "server.h"

#include "engine.h"
#include "history-persist.h"
#include "http-util.h"
#include "metrics.h"
#include "routes.h"
#include "server-budget.h"

#include "../cost-cache.h"
#include "server-state.h"

#include "rest/datastore.h"
#include "rest/history-store.h"
#include "rest/llama-model.h"

#include <httplib.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

namespace {

constexpr std::size_t k_trim_body_bytes = 1u << 20;  // bodies after which memory is handed back (see setup_http())

// Bodies refused before cpp-httplib reads them (the pre-routing handler runs first); true when `res` is the reply.
// - A compressed one: cpp-httplib inflates a gzip, deflate or brotli body before any handler sees it, and the body
//   limit holds only for the bytes received (a 1 MB gzip of 1 GB took 1.1 GB of memory before its JSON was refused).
//   llama-server's build has no decompression and refuses them the same way.
// - A POST without Content-Length or chunked encoding has no body (RFC 9112), but cpp-httplib read until the
//   connection closed: 30 s, then "malformed HTTP request", and 32 such requests held every HTTP thread.
bool refuse_unreadable_body(const httplib::Request & req, httplib::Response & res) {
    std::string enc = req.get_header_value("Content-Encoding");
    std::transform(enc.begin(), enc.end(), enc.begin(), [](unsigned char c) { return (char) std::tolower(c); });
    if (!enc.empty() && enc != "identity") {
        reply_error(res, api_error(415, "Content-Encoding '" + enc + "' is not accepted: send it uncompressed",
                                   "invalid_request_error", "", "unsupported_media_type"));
        return true;
    }
    if (req.method == "POST" && !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
        reply_error(res, api_error(411, "a POST needs a Content-Length (or chunked Transfer-Encoding)",
                                   "invalid_request_error", "", "length_required"));
        return true;
    }
    return false;
}

const char * status_code_name(int status) {
    switch (status) {
        case 400: return "bad_request";
        case 401: return "invalid_api_key";
        case 403: return "forbidden";
        case 404: return "not_found";
        case 405: return "method_not_allowed";
        case 413: return "payload_too_large";
        case 414: return "uri_too_long";
        case 503: return "unavailable";
        default:  return status < 500 ? "bad_request" : "internal_error";
    }
}

// The template chat requests render with (server-params.h). A model without one falls back to ChatML, as
// llama-server does, with a warning: its chats may not be what it was trained on.
std::unique_ptr<rest::chat_template> open_chat_template(const server_params & p, const rest::model & m) {
    if (!p.chat_template.empty() && !p.chat_template_file.empty()) {
        throw rest::user_error("give --chat-template or --chat-template-file, not both");
    }
    rest::chat_template_params cp;
    // llama-server's --chat-template takes a built-in name or Jinja source; template source has a tag.
    const bool jinja = p.chat_template.find("{{") != std::string::npos || p.chat_template.find("{%") != std::string::npos;
    (jinja ? cp.source : cp.name) = p.chat_template;
    if (!p.chat_template_file.empty()) {
        std::ifstream in(p.chat_template_file, std::ios::binary);
        if (!in) {
            throw rest::user_error("cannot read --chat-template-file '" + p.chat_template_file + "'");
        }
        cp.source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (cp.source.empty()) {
            throw rest::user_error("--chat-template-file '" + p.chat_template_file + "' is empty");
        }
    }
    auto chat = m.new_chat_template(cp);
    if (chat->is_fallback()) {
        std::fprintf(stderr, "rest serve: warning: the model has no chat template; chat requests are rendered as "
                             "ChatML (--chat-template NAME or --chat-template-file FILE to choose)\n");
    } else if (p.verbose) {
        std::fprintf(stderr, "rest serve: chat template: %s\n", chat->description().c_str());
    }
    return chat;
}

}  // namespace

struct server::impl {
    server_params                        params;
    std::unique_ptr<rest::model>         model;
    std::unique_ptr<rest::chat_template> chat;
    std::unique_ptr<corpus_set>          corpora;
    std::unique_ptr<rest::history_store> history;
    std::unique_ptr<history_persist>     persist;  // null without --history-file; declared after history, which it saves
    std::unique_ptr<rest::target_model>  ctx;
    std::unique_ptr<rest::budget_policy> policy;
    std::string                          budget_key;  // "": the policy learns nothing worth keeping
    server_metrics                       metrics;
    std::unique_ptr<engine>              eng;
    std::unique_ptr<server_state>        state;
    httplib::Server                      http;
    int                                  listen_fd = -1;  // http's listening socket, for its backlog
    int                                  port = 0;

    std::mutex              mutex;
    std::condition_variable cv;
    int                     n_shutdown_requests = 0;
    bool                    http_ended = false;

    explicit impl(const server_params & p);
    void setup_http();
};

server::impl::impl(const server_params & p) : params(p) {
    if (p.n_parallel < 1) {
        throw rest::user_error("--parallel must be at least 1, got " + std::to_string(p.n_parallel));
    }
    if (!p.history_path.empty()) {
        persist = std::make_unique<history_persist>(p.history_path, p.history_save_interval_s);  // before the slow part
    }
    rest::llama_log_quiet();
    model            = rest::model::load(p.model_path, p.n_gpu_layers, p.rpc_servers);
    const auto & tok = model->vocab();
    chat             = open_chat_template(p, *model);
    corpora = std::make_unique<corpus_set>(p.index_paths, p.corpus_dir, tok);
    rest::history_store_params hp;
    hp.n_tokens_max = p.history_tokens_max;
    hp.fingerprint  = tok.fingerprint();
    history         = std::make_unique<rest::history_store>(hp);
    if (persist) {
        persist->load(*history);
    }

    rest::context_params cp;
    cp.n_ctx     = p.n_ctx;
    cp.n_slots   = p.n_parallel;
    cp.n_batch   = p.n_batch;
    cp.n_threads = p.n_threads;
    cp.flash_attn   = p.flash_attn;
    cp.cache_type_k = p.cache_type_k;
    cp.cache_type_v = p.cache_type_v;
    cp.context_per_slot = p.context_per_slot;
    engine_params ep;
    server_budget budget = make_server_budget(p, *model, cp, ep.draft.n_budget_max);
    ctx                  = std::move(budget.ctx);
    policy               = std::move(budget.policy);
    budget_key           = std::move(budget.key);
    ep.speculate         = p.speculate;
    ep.n_draft_max       = budget.n_cap;
    ep.queue_max         = p.queue_max;
    ep.pacing.gap_ratio  = p.prefill_gap;
    ep.warm_up           = p.warm_up;
    ep.costs             = std::move(budget.costs);
    eng = std::make_unique<engine>(*model, *ctx, corpora.get(), history.get(), policy.get(), ep, metrics);

    std::string id = p.alias.empty() ? std::filesystem::path(p.model_path).stem().string() : p.alias;
    state = std::unique_ptr<server_state>(new server_state{p, *model, *chat, corpora->indexes(), *corpora, *history, *eng, metrics, id,
                                                           (std::int64_t) std::time(nullptr), {}});
    state->limits.n_ctx_slot        = ctx->n_ctx_slot();
    state->limits.n_predict_default = p.n_predict;
    setup_http();
}

void server::impl::setup_http() {
    const std::size_t n_threads = params.n_threads_http > 0 ? (std::size_t) params.n_threads_http
                                                            : (std::size_t) std::max(32, 4 * params.n_parallel);
    http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
    http.set_payload_max_length(params.body_max_bytes);
    http.set_read_timeout(30);
    http.set_write_timeout(30);
    // Without TCP_NODELAY a reply written in pieces (headers, then body; SSE events) waits for the client's delayed
    // ACK (40 ms on Linux) on a kept-alive connection: measured 48 ms for a 4-token completion that takes 3 ms.
    // Set on the listening socket, accepted sockets inherit it.
    http.set_tcp_nodelay(true);
    // cpp-httplib listens with a backlog of 5: a burst of connections overflows it, and each dropped SYN costs its
    // client a 1 s retransmit. Keep the listening socket to raise the backlog once it is bound (listen() again).
    // Not httplib's default options: with its SO_REUSEPORT a second server on a port in use started and the two
    // split the requests (and, with one corpus directory, each other's corpora). SO_REUSEADDR only rebinds a port
    // whose old connections linger.
    http.set_socket_options([this](socket_t sock) {
        int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        listen_fd = sock;
    });

    using handler_response = httplib::Server::HandlerResponse;
    http.set_pre_routing_handler([this](const httplib::Request & req, httplib::Response & res) -> handler_response {
        if (answer_cors(req, res)) {
            return handler_response::Handled;  // a browser's preflight carries no API key
        }
        if (refuse_unreadable_body(req, res)) {
            return handler_response::Handled;
        }
        if (req.path == "/health" || req.path == "/v1/health" || authorized(req, params.api_key)) {
            return handler_response::Unhandled;
        }
        res.set_header("WWW-Authenticate", "Bearer");
        reply_error(res, api_error(401,
                                   "Incorrect or missing API key: send 'Authorization: Bearer <key>' or "
                                   "'X-Api-Key: <key>'",
                                   "invalid_request_error", "", "invalid_api_key"));
        return handler_response::Handled;
    });
    // A large body's memory (its text, its parsed JSON: 300 MB for an 8 MB array nested 4M deep) is freed into the
    // pool of the HTTP thread that read it, where glibc keeps it: one such request after another grew a server to
    // 830 MB-1.7 GB, towards threads x the largest request. Handing it back costs ~1 ms, only after large bodies.
    // A fixed mmap threshold first: glibc's default raises it to the largest block freed (8 MB bodies then come from
    // the thread pools), and with it the trim threshold, so the pools' free tops were never given back.
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    http.set_post_routing_handler([](const httplib::Request & req, httplib::Response &) {
        if (req.body.size() >= k_trim_body_bytes) malloc_trim(0);
    });
#endif
    // cpp-httplib calls this for every status >= 400; fill in only what it produced itself (404, 413, 400 on a
    // malformed request line), so every error a client sees is an OpenAI-style JSON object.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request & req,
                                                                       httplib::Response & res) -> handler_response {
        if (!res.body.empty()) {
            return handler_response::Unhandled;
        }
        std::string msg = "HTTP " + std::to_string(res.status);
        if (res.status == 404) {
            msg = "Not found: " + req.method + " " + req.path;
        } else if (res.status == 413 && req.get_header_value("Content-Type").starts_with(
                                                "application/x-www-form-urlencoded")) {
            // `curl -d` sends this type; cpp-httplib caps such bodies at 8 KiB, whatever the server's limit.
            msg = "a form-urlencoded body is limited to 8192 bytes: send the JSON with Content-Type: application/json";
        } else if (res.status == 413) {
            msg = "the request body is larger than " + std::to_string(params.body_max_bytes) + " bytes";
        } else if (res.status == 400) {
            msg = "malformed HTTP request";
        }
        reply_error(res, api_error(res.status, msg, "invalid_request_error", "", status_code_name(res.status)));
        return handler_response::Handled;
    }));
    http.set_exception_handler([](const httplib::Request &, httplib::Response & res, std::exception_ptr ep) {
        std::string msg = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception & e) {
            msg = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        reply_error(res, api_error(500, msg, "server_error", "", "internal_error"));
    });
    http.set_logger([this](const httplib::Request & req, const httplib::Response & res) {
        metrics.on_status(res.status);
        if (params.verbose) {
            std::fprintf(stderr, "rest serve: %s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
        }
    });

    add_completion_routes(http, *state);
    add_info_routes(http, *state);
    add_token_routes(http, *state);
    add_corpora_routes(http, *state);

    if (params.port == 0) {
        port = http.bind_to_any_port(params.host);
    } else {
        port = http.bind_to_port(params.host, params.port) ? params.port : -1;
    }
    if (port <= 0) {
        throw rest::user_error("cannot listen on " + params.host + ":" + std::to_string(params.port) +
                               " (address in use, not local, or not permitted)");
    }
    if (listen_fd >= 0) {
        ::listen(listen_fd, SOMAXCONN);  // failure keeps httplib's backlog: slower under bursts, still correct
    }
}

server::server(const server_params & params) : impl_(std::make_unique<impl>(params)) {}

server::~server() {
    impl_->eng->stop();
}

int server::port() const {
    return impl_->port;
}

const std::string & server::host() const {
    return impl_->params.host;
}

void server::request_shutdown() {
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        ++impl_->n_shutdown_requests;
    }
    impl_->cv.notify_all();
}

void server::run() {
    impl & d = *impl_;
    d.eng->start();
    if (d.persist) {
        d.persist->start();
    }
    std::thread listener([&d] {
        d.http.listen_after_bind();
        std::lock_guard<std::mutex> lock(d.mutex);
        d.http_ended = true;
        d.cv.notify_all();
    });
    {
        std::unique_lock<std::mutex> lock(d.mutex);
        d.cv.wait(lock, [&d] { return d.n_shutdown_requests > 0 || d.http_ended; });
    }

    // Drain: refuse new work, let queued and in-flight generations finish.
    d.state->draining = true;
    d.eng->drain();
    const engine_load l = d.eng->load();
    std::fprintf(stderr, "rest serve: shutting down: %d in flight, %d queued\n", l.n_busy, l.n_queued);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds((long long) (d.params.drain_timeout_s * 1000));
    while (true) {
        const auto next = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
        if (d.eng->wait_idle(next)) {
            break;
        }
        std::lock_guard<std::mutex> lock(d.mutex);
        if (std::chrono::steady_clock::now() >= deadline || d.n_shutdown_requests > 1 || d.http_ended) {
            std::fprintf(stderr, "rest serve: cancelling the requests still in flight\n");
            break;
        }
    }
    // The engine first: it finishes every job it still holds, so no HTTP handler waits forever. Then let the
    // streams write their last events: httplib's stop() would abort chunked writes still in progress.
    d.eng->stop();
    while (d.state->n_streams.load() > 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    d.http.stop();
    listener.join();

    if (!d.budget_key.empty()) {
        save_budget_state(d.budget_key, d.params.index_paths, d.policy->export_state());  // the next start is warm
    }
    if (d.persist && d.persist->stop_and_save()) {
        std::fprintf(stderr, "rest serve: saved the online store (%llu documents, %llu tokens) to %s\n",
                     (unsigned long long) d.history->n_documents(), (unsigned long long) d.history->n_tokens(),
                     d.params.history_path.c_str());
    }
}
