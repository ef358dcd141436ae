// `rest serve`: the OpenAI-compatible HTTP server (apps/server/).
//
// Signals: SIGTERM and SIGINT are blocked in every thread (the mask is set before any thread exists) and taken
// by one watcher thread with sigtimedwait, so shutdown runs as ordinary code, not in a signal handler. The first
// signal drains, a second cancels what is still in flight.
#include "commands.h"
#include "server/server.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <thread>

namespace {

// A file option given a directory: one line naming it (an ifstream reads a directory as a stream error).
CLI::Validator not_a_directory() {
    return CLI::Validator(
        [](const std::string & v) -> std::string {
            std::error_code ec;
            return std::filesystem::is_directory(v, ec) ? "'" + v + "' is a directory, not a file" : "";
        },
        "FILE");
}

void run_serve(const server_params & p) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that vanishes mid-write must not kill the server

    server srv(p);
    std::fprintf(stderr, "rest serve: %s, %d slots, speculation %s%s\n", p.model_path.c_str(), p.n_parallel,
                 p.speculate ? "on" : "off", p.api_key.empty() ? "" : ", API key required");
    // The one line on stdout: scripts and tests read the port from it (useful with --port 0).
    std::printf("rest serve: listening on http://%s:%d\n", srv.host().c_str(), srv.port());
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {  // serving goes on: the line is for scripts only
        std::fprintf(stderr, "rest serve: warning: could not write the listening line to stdout\n");
        std::clearerr(stdout);
    }

    std::atomic<bool> done{false};
    std::thread       watcher([&] {
        const timespec tick = {0, 100 * 1000 * 1000};
        while (!done.load()) {
            const int sig = sigtimedwait(&set, nullptr, &tick);
            if (sig > 0) {
                std::fprintf(stderr, "rest serve: %s received\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
                srv.request_shutdown();
            }
        }
    });
    try {
        srv.run();
    } catch (...) {
        done = true;
        watcher.join();
        throw;
    }
    done = true;
    watcher.join();
    std::fprintf(stderr, "rest serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App & root) {
    auto * cmd = root.add_subcommand("serve", "OpenAI-compatible HTTP server with REST speculation over N slots");
    auto   p   = std::make_shared<server_params>();
    cmd->add_option("-m,--model", p->model_path, "GGUF model")->required();
    add_index_option(cmd, p->index_paths);
    cmd->add_option("--corpus-dir", p->corpus_dir,
                    "Named corpora (POST/GET /v1/corpora, DELETE /v1/corpora/NAME), kept here as NAME.idx and "
                    "reloaded at start; a request's `corpus` field picks which draft for it (default: all, with "
                    "the --index files, named by their file stem)");
    cmd->add_option("--alias", p->alias, "Model id reported by the API (default: the model file's stem)");
    cmd->add_option("--host", p->host, "Address to bind (loopback by default)")->capture_default_str();
    cmd->add_option("--port", p->port, "Port (0: any free port, printed on stdout)")
        ->check(CLI::Range(0, 65535))  // larger ones wrapped around: 73617 bound 8081 and printed 73617
        ->capture_default_str();
    cmd->add_option("--api-key", p->api_key, "Require 'Authorization: Bearer KEY' (except on /health)")
        ->envname("REST_API_KEY");
    cmd->add_option("--np,--parallel", p->n_parallel, "Slots: requests generated concurrently in one batch")
        ->capture_default_str();
    cmd->add_option("-c,--ctx-size", p->n_ctx, "Context positions over all slots (0: the model's, <= 4096, per slot)")
        ->capture_default_str();
    cmd->add_option("-b,--batch-size", p->n_batch, "Most tokens per forward pass")->capture_default_str();
    cmd->add_option("--prefill-gap", p->prefill_gap,
                    "While other requests generate, a prompt arrives in chunks sized so that a step takes about this "
                    "many times a step without one (<= 1: whole batches of -b, the other streams wait)")
        ->check(CLI::Range(0.0, 100.0))
        ->capture_default_str();
    cmd->add_option("-t,--threads", p->n_threads, "CPU threads (0: all)")->capture_default_str();
    add_offload_options(cmd, p->n_gpu_layers, p->rpc_servers);
    cmd->add_option("--draft-max", p->n_draft_max,
                    "Cap on draft nodes per slot and step; the cost model picks each step's budget below it (-1: 64)")
        ->check(draft_nodes_range())
        ->capture_default_str();
    cmd->add_option("--draft-fixed", p->n_draft_fixed,
                    "Verify exactly this many draft nodes per slot and step, each pass on the thread count measured "
                    "fastest for it (for comparisons)")
        ->check(draft_nodes_range());
    cmd->add_flag("--no-spec", [p](std::int64_t) { p->speculate = false; }, "Plain decoding for every request");
    add_warm_up_option(cmd, p->warm_up);
    add_layout_option(cmd, p->layout, p->context_per_slot);
    add_recalibrate_option(cmd, p->recalibrate);
    add_attention_options(cmd, p->flash_attn, p->cache_type_k, p->cache_type_v);
    cmd->add_option("--chat-template", p->chat_template,
                    "Render chats with this llama.cpp built-in template (chatml, llama3, phi3, ...; or Jinja source, "
                    "as llama-server takes) instead of the model's own. Without it, a model that has none uses chatml");
    cmd->add_option("--chat-template-file", p->chat_template_file, "Render chats with the Jinja template in this file")
        ->check(not_a_directory());
    cmd->add_option("-n,--n-predict", p->n_predict,
                    "max_tokens for requests that give none (-1: until end of generation or context)")
        ->capture_default_str();
    cmd->add_option("--history-file", p->history_path,
                    "Online store file: loaded at start when present, saved periodically and at shutdown; one "
                    "server per file (FILE.lock)")
        ->check(not_a_directory());  // read as a file, a directory gave a stream error and left FILE.lock
    cmd->add_option("--history-save-interval", p->history_save_interval_s,
                    "Seconds between saves of a changed online store (0: only at shutdown)")
        ->check([](const std::string & s) {  // CLI::NonNegativeNumber's message prints DBL_MAX in full
            char *       end = nullptr;
            const double v   = std::strtod(s.c_str(), &end);
            return end != s.c_str() && *end == '\0' && v >= 0 ? std::string() : "must be a number of seconds >= 0";
        })
        ->capture_default_str();
    cmd->add_option("--history-max", p->history_tokens_max, "Online store capacity in tokens (0: off)")->capture_default_str();
    cmd->add_option("--queue-max", p->queue_max, "Most requests waiting for a slot (then 503)")->capture_default_str();
    cmd->add_option("--threads-http", p->n_threads_http, "HTTP worker threads (0: max(32, 4 x slots))")
        ->capture_default_str();
    cmd->add_option("--drain-timeout", p->drain_timeout_s, "Seconds SIGTERM waits for in-flight requests")
        ->capture_default_str();
    cmd->add_flag("--verbose", p->verbose, "Log one line per request to stderr");
    cmd->callback([p] { run_serve(*p); });
}
