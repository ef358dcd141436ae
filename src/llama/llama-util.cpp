#include "llama-util.h"

#include "log.h"  // llama.cpp's common/log.h
#include "rest/llama-model.h"

#include <gguf.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_set>

namespace rest {

namespace {

std::mutex  g_log_mutex;
std::string g_last_error;
bool        g_verbose = false;

void log_callback(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        g_last_error = text ? text : "";
        while (!g_last_error.empty() && (g_last_error.back() == '\n' || g_last_error.back() == ' ')) {
            g_last_error.pop_back();
        }
    }
    if (g_verbose) {
        std::fputs(text, stderr);
    }
}

// Metadata that llama.cpp asserts on (an abort, exit 134) where it should refuse the file, checked before it loads
// the model: a token string given twice (one flipped byte in the vocabulary does it) and a layer count outside
// [1, 512]. gguf_init_from_file itself returns null on a malformed header or metadata.
void check_gguf_metadata(const std::string & path) {
    gguf_init_params gp{};
    gp.no_alloc = true;
    gp.ctx      = nullptr;
    std::unique_ptr<gguf_context, void (*)(gguf_context *)> g(gguf_init_from_file(path.c_str(), gp), gguf_free);
    if (!g) {
        throw user_error("'" + path + "' is not a valid GGUF model: its header or metadata is corrupt");
    }
    const std::int64_t tokens = gguf_find_key(g.get(), "tokenizer.ggml.tokens");
    if (tokens >= 0 && gguf_get_kv_type(g.get(), tokens) == GGUF_TYPE_ARRAY &&
        gguf_get_arr_type(g.get(), tokens) == GGUF_TYPE_STRING) {
        const std::size_t                    n = gguf_get_arr_n(g.get(), tokens);
        std::unordered_set<std::string_view> seen;
        seen.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            const std::string_view t = gguf_get_arr_str(g.get(), tokens, i);
            if (!t.empty() && !seen.insert(t).second) {  // llama.cpp renames empty ones
                throw user_error("'" + path + "' has a corrupt vocabulary: token " + std::to_string(i) +
                                 " repeats an earlier token's text");
            }
        }
    }
    const std::int64_t arch = gguf_find_key(g.get(), "general.architecture");
    if (arch >= 0 && gguf_get_kv_type(g.get(), arch) == GGUF_TYPE_STRING) {
        const std::string  key    = std::string(gguf_get_val_str(g.get(), arch)) + ".block_count";
        const std::int64_t blocks = gguf_find_key(g.get(), key.c_str());
        if (blocks >= 0 && gguf_get_kv_type(g.get(), blocks) == GGUF_TYPE_UINT32) {
            const std::uint32_t n = gguf_get_val_u32(g.get(), blocks);
            if (n < 1 || n > 512) {
                throw user_error("'" + path + "' is corrupt: " + key + " is " + std::to_string(n) +
                                 " (llama.cpp loads 1 to 512 layers)");
            }
        }
    }
}

std::atomic<void (*)()> g_stop_cleanup{nullptr};

// ggml_abort's callback (see set_llama_stop_cleanup()): one line, then exit 1. ggml calls abort() if this returns.
void on_llama_stop(const char * message) {
    // Two threads may both fail (ggml's workers, RPC dispatchers): the second waits for the first to say why and exit
    // (exiting at once, it ended the process before the first had printed).
    static std::atomic<bool> said{false};
    if (said.exchange(true)) {
        for (;;) ::pause();
    }
    if (void (*cleanup)() = g_stop_cleanup.load()) cleanup();
    std::string m = message ? message : "";
    // "/long/path/to/llama.cpp/src/file.cpp:12: ..." -> "file.cpp:12: ..."
    if (const auto colon = m.find(':'); colon != std::string::npos) {
        if (const auto slash = m.rfind('/', colon); slash != std::string::npos) m.erase(0, slash + 1);
    }
    for (char & c : m) c = c == '\n' ? ' ' : c;
    while (!m.empty() && m.back() == ' ') m.pop_back();
    const bool rpc = m.find("ggml-rpc") != std::string::npos || m.find("RPC") != std::string::npos;
    std::fprintf(stderr, "rest: error: llama.cpp stopped on an internal check: %s (%s)\n", m.c_str(),
                 rpc ? "an RPC server went away?" : "a corrupt or unsupported model file, or a bug");
    std::fflush(stderr);
    _exit(1);
}

}  // namespace

void llama_log_quiet() {
    const char * env = std::getenv("REST_LLAMA_LOG");
    g_verbose = env && std::strcmp(env, "0") != 0;
    llama_log_set(log_callback, nullptr);
    if (!g_verbose) {
        // llama.cpp's common (the chat templates) logs its errors and warnings itself before it throws; the
        // exception carries them to our one-line error, so only common's plain output stays.
        common_log_set_verbosity_thold(LOG_LEVEL_OUTPUT);
    }
}

void llama_ensure_backend() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_quiet();
        llama_backend_init();
        if (!g_verbose) ggml_set_abort_callback(on_llama_stop);  // set from REST_LLAMA_LOG by llama_log_quiet()
    });
}

void set_llama_stop_cleanup(void (*cleanup)()) {
    g_stop_cleanup.store(cleanup);
}

std::string llama_last_error() {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    return g_last_error;
}

void llama_check_gguf_file(const std::string & path) {
    std::FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) {
        throw user_error("cannot open model '" + path + "': " + std::strerror(errno));
    }
    char magic[4] = {};
    const size_t n = std::fread(magic, 1, 4, f);
    std::fseek(f, 0, SEEK_END);
    const long size = std::ftell(f);
    std::fclose(f);
    if (n != 4 || std::memcmp(magic, "GGUF", 4) != 0) {
        throw user_error("'" + path + "' is not a GGUF model file (bad magic)");
    }
    if (size < 64) {
        throw user_error("'" + path + "' is truncated (" + std::to_string(size) + " bytes)");
    }
    check_gguf_metadata(path);
}

}  // namespace rest
