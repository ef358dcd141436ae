#include "llama-util.h"

#include "log.h"  // llama.cpp's common/log.h
#include "rest/llama-model.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

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
    });
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
}

}  // namespace rest
