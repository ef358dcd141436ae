// Settings of `rest serve`. The CLI fills them; everything below the CLI only reads them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct server_params {
    std::string model_path;
    std::vector<std::string> index_paths;  // none: no datastore; several: used as one
    std::string corpus_dir;             // named corpora (POST /v1/corpora), one index file each; "": none
    std::string alias;                  // model id in /v1/models and responses ("": the model file's stem)
    std::string host = "127.0.0.1";     // loopback unless the user asks otherwise
    int         port = 8080;            // 0: any free port (printed on stdout)
    std::string api_key;                // "": no authentication

    std::int32_t n_parallel   = 4;      // slots: concurrent sequences in the one llama.cpp context
    std::int32_t n_ctx        = 0;      // positions over all slots; 0: the model's training context (<= 4096) per slot
    std::int32_t n_batch      = 512;    // most tokens per llama_decode call
    // While other requests generate, a prompt arrives in chunks sized so a step takes about this many times a step
    // without one (rest::prefill_pacer_params::gap_ratio; <= 1: whole batches, the others wait).
    double       prefill_gap  = 2.5;
    std::int32_t n_threads    = 0;      // compute threads (0: all hardware threads)
    std::int32_t n_gpu_layers = 0;
    std::string  rpc_servers;           // llama.cpp's --rpc: "HOST:PORT,..." ("": none)
    std::int32_t flash_attn   = -1;     // -1 auto, 0 off, 1 on (rest::context_params::flash_attn)
    std::string  cache_type_k = "f16";  // KV cache types (llama.cpp's -ctk / -ctv)
    std::string  cache_type_v = "f16";

    // Chat rendering (rest/chat-template.h): both empty renders with the model's own template, or ChatML when it
    // has none (with a warning at start-up).
    std::string chat_template;          // one of llama.cpp's built-in names (chatml, llama3, ...)
    std::string chat_template_file;     // a file of Jinja source

    bool         speculate   = true;    // false: every request decodes plainly
    std::int32_t n_draft_max = -1;      // cap on draft nodes per slot and step; the cost model picks below it (-1: 64)
    std::int32_t n_draft_fixed = -1;    // >= 0: verify exactly this many nodes per slot and step (no budget choice)
    std::string  layout = "auto";       // draft verification layout, as `rest generate --draft-layout`
    bool         context_per_slot = false;  // trees: a llama.cpp context per slot (rest::context_params)
    std::int32_t n_predict   = -1;      // max_tokens when a request gives none (-1: until EOG or the slot's context end)

    std::string   history_path;             // online store: loaded at start when present, saved periodically and at exit
    std::uint64_t history_tokens_max = 1 << 20;  // its capacity in tokens
    double        history_save_interval_s = 60;  // also saved this often when changed (0: at shutdown only)

    std::int32_t n_threads_http = 0;    // HTTP worker threads (0: max(32, 4 * n_parallel))
    std::int32_t queue_max      = 512;  // most requests waiting for a slot; beyond it requests get 503
    std::size_t  body_max_bytes = 8u << 20;  // largest request body accepted (413 beyond)
    double       drain_timeout_s = 60;  // SIGTERM: wait this long for in-flight requests, then cancel them
    bool         verbose = false;       // one stderr line per request
    bool         recalibrate = false;   // measure the cost table even when one is cached
    bool         warm_up     = true;    // forward passes before the first request (rest::warm_up)
};
