#include "cost-cache.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace fs = std::filesystem;

namespace {

fs::path cache_dir() {
    if (const char * d = std::getenv("RESTCPP_CACHE_DIR")) return fs::path(d) / "costs";
    if (const char * d = std::getenv("XDG_CACHE_HOME")) return fs::path(d) / "rest.cpp" / "costs";
    if (const char * d = std::getenv("HOME")) return fs::path(d) / ".cache" / "rest.cpp" / "costs";
    return fs::temp_directory_path() / "rest.cpp-costs";
}

void print_table(const rest::cost_table & t, const std::string & how) {
    std::fprintf(stderr, "rest: verify cost %s:", how.c_str());
    for (size_t i = 0; i < t.rows.size() && i < t.t_us.size(); ++i) {
        std::fprintf(stderr, " t(%d)=%.3fms", t.rows[i], t.t_us[i] / 1000);
        if (i < t.threads.size() && t.threads[i] > 0) std::fprintf(stderr, "/%dt", t.threads[i]);
    }
    std::fprintf(stderr, ", shape change +%.3fms\n", t.rebuild_us / 1000);
    for (const auto & b : t.batches) {
        std::fprintf(stderr, "rest:   %d requests, rows each:", b.requests);
        for (size_t i = 0; i < b.per.size() && i < b.t_us.size(); ++i) {
            std::fprintf(stderr, " t(%d)=%.3fms", b.per[i], b.t_us[i] / 1000);
            if (i < b.threads.size() && b.threads[i] > 0) std::fprintf(stderr, "/%dt", b.threads[i]);
        }
        std::fprintf(stderr, "\n");
    }
}

}  // namespace

rest::cost_table load_or_calibrate_costs(const rest::model & m, rest::target_model & ctx,
                                         const rest::context_params & cp, bool verbose, bool recalibrate) {
    const auto & info = m.info();
    std::error_code ec;
    const auto size  = fs::file_size(info.path, ec);
    const auto mtime = fs::last_write_time(info.path, ec).time_since_epoch().count();
    const int  threads = cp.n_threads > 0 ? cp.n_threads : (int) std::thread::hardware_concurrency();
    const std::string key = fs::absolute(info.path, ec).string() + "|" + std::to_string(size) + "|" +
                            std::to_string(mtime) + "|" + info.backend + "|t" + std::to_string(threads) + "|b" +
                            std::to_string(cp.n_batch) + (cp.trees ? "|trees" : "|chains") + "|fa" +
                            std::to_string(cp.flash_attn) + "|s" + std::to_string(ctx.n_slots());
    char name[32];
    std::snprintf(name, sizeof(name), "%016zx.txt", std::hash<std::string>{}(key));
    const fs::path path = cache_dir() / name;

    if (std::ifstream in(path); in && !recalibrate) {
        std::string line;
        std::getline(in, line);
        rest::cost_table t = rest::cost_table::parse(line);
        if (t.valid()) {
            if (verbose) print_table(t, "cached in " + path.string() + " (--recalibrate measures it again)");
            return t;
        }
    }
    const auto t0 = std::chrono::steady_clock::now();
    // Measured on a thread of its own that ends here. With OpenMP builds of ggml each thread that runs a forward pass
    // keeps its own pool of workers; a server decodes on its engine thread, and the main thread's pool left behind
    // by calibrating made libgomp count more threads than CPUs, so it throttled its spin-waits and every barrier
    // slept: the first requests of a freshly calibrated 8-slot server ran 5x slower than with a cached table.
    rest::cost_table t;
    std::exception_ptr error;
    std::thread([&] {
        try {
            t = rest::calibrate_cost(ctx, 0);
        } catch (...) {
            error = std::current_exception();
        }
    }).join();
    if (error) {
        std::rethrow_exception(error);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (verbose || secs > 2) {
        char how[64];
        std::snprintf(how, sizeof(how), "measured in %.1f s", secs);
        print_table(t, std::string(how) + " (cached in " + path.string() + ")");
    }
    if (t.valid()) {
        fs::create_directories(path.parent_path(), ec);
        const fs::path tmp = path.string() + ".tmp";
        if (std::ofstream out(tmp); out) {
            out << t.serialize() << "\n" << key << "\n";
            out.close();
            fs::rename(tmp, path, ec);
        }
    }
    return t;
}
