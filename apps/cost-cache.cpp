#include "cost-cache.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace fs = std::filesystem;

namespace {

fs::path cache_dir() {
    if (const char * d = std::getenv("RESTCPP_CACHE_DIR")) return fs::path(d);
    if (const char * d = std::getenv("XDG_CACHE_HOME")) return fs::path(d) / "rest.cpp";
    if (const char * d = std::getenv("HOME")) return fs::path(d) / ".cache" / "rest.cpp";
    return fs::temp_directory_path() / "rest.cpp-cache";
}

std::string file_name(const std::string & key, const char * ext) {
    char name[32];
    std::snprintf(name, sizeof(name), "%016zx", std::hash<std::string>{}(key));
    return name + std::string(ext);
}

// "path|size|mtime" of a file ("" for none): a rebuilt datastore or model is another one.
std::string file_identity(const std::string & path) {
    if (path.empty()) return "";
    std::error_code ec;
    const auto size  = fs::file_size(path, ec);
    const auto mtime = fs::last_write_time(path, ec).time_since_epoch().count();
    return fs::absolute(path, ec).string() + "|" + std::to_string(size) + "|" + std::to_string(mtime);
}

// Writes text to path through a temporary file renamed over it, so a reader never sees half a file.
bool write_atomically(const fs::path & path, const std::string & text) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
    {
        std::ofstream out(tmp);
        if (!(out << text) || !(out.flush())) return false;
    }
    fs::rename(tmp, path, ec);
    if (!ec) return true;
    fs::remove(tmp, ec);
    return false;
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

// tree_step_ratio() of a tree context, cached beside its cost table under the same key, with the tree it timed:
// a process that finds trees do not pay need not open a tree context to learn it again. 0: it could not be measured
// (which is cached too, so that a context that cannot hold the tree does not retry at every start).
fs::path tree_step_path(const std::string & key) { return cache_dir() / "costs" / file_name(key, ".tree-step.txt"); }

std::string tree_step_text(const std::string & key, double ratio) {
    char line[96];
    std::snprintf(line, sizeof(line), "rest-tree-step 2 %d %d %.4f\n", k_flat_rows + 1, k_tree_leaves, ratio);
    return line + key + "\n";
}

// The cached ratio for key and this tree (>= 0), or -1: none, or a file of another version, key or tree, or any other
// text.
double load_tree_step(const std::string & key) {
    std::ifstream in(tree_step_path(key));
    std::string   first, cached_key, extra;
    if (!std::getline(in, first) || !std::getline(in, cached_key) || cached_key != key || std::getline(in, extra)) {
        return -1;
    }
    std::istringstream line(first);
    std::string        tag;
    int                version = 0, rows = 0, leaves = 0;
    double             ratio   = -1;
    if (!(line >> tag >> version >> rows >> leaves >> ratio) || tag != "rest-tree-step" || version != 2 ||
        rows != k_flat_rows + 1 || leaves != k_tree_leaves || !std::isfinite(ratio) || ratio < 0 || !(line >> std::ws).eof()) {
        return -1;
    }
    return ratio;
}

// Runs f on a thread of its own that ends here, rethrowing what it throws. With OpenMP builds of ggml each thread that
// runs a forward pass keeps its own pool of workers; a server decodes on its engine thread, and the main thread's
// pool left behind by calibrating made libgomp count more threads than CPUs, so it throttled its spin-waits and every
// barrier slept: the first requests of a freshly calibrated 8-slot server ran 5x slower than with a cached table.
template <typename F> void run_on_own_thread(F && f) {
    std::exception_ptr error;
    std::thread([&] {
        try {
            f();
        } catch (...) {
            error = std::current_exception();
        }
    }).join();
    if (error) std::rethrow_exception(error);
}

}  // namespace

rest::cost_table load_or_calibrate_costs(const rest::model & m, rest::target_model & ctx,
                                         const rest::context_params & cp, bool verbose, bool recalibrate) {
    const std::string key = cost_cache_key(m, ctx, cp);
    const fs::path path = cache_dir() / "costs" / file_name(key, ".txt");

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
    rest::cost_table t;
    run_on_own_thread([&] { t = rest::calibrate_cost(ctx, 0); });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (verbose || secs > 2) {
        char how[64];
        std::snprintf(how, sizeof(how), "measured in %.1f s", secs);
        print_table(t, std::string(how) + " (cached in " + path.string() + ")");
    }
    if (t.valid()) write_atomically(path, t.serialize() + "\n" + key + "\n");
    return t;
}

measured_context open_measured_context(const rest::model & m, rest::context_params cp, const std::string & layout,
                                       bool verbose, bool recalibrate) {
    measured_context mc;
    // calibrate: measure (or load) the context's table; a reopened chain context takes back the one measured first.
    auto open = [&](bool trees, bool calibrate) {
        mc.ctx.reset();  // one context at a time: the tree context's pool takes the memory
        cp.trees = trees;
        mc.ctx   = m.new_context(cp);
        if (calibrate) mc.costs = load_or_calibrate_costs(m, *mc.ctx, cp, verbose, recalibrate);
        mc.key   = cost_cache_key(m, *mc.ctx, cp);
        mc.trees = trees;
    };
    open(rest::layout_uses_trees(layout), true);
    const double t_flat = mc.costs.valid() ? mc.costs.predict_us(k_flat_rows, 0) / mc.costs.predict_us(1, 0) : 0;
    double       t_tree = -1;
    if (layout == "auto" && !mc.trees && mc.costs.valid() && t_flat <= k_flat_factor) {
        // Flat rows are not yet a flat tree step: the branches' sequences, mask and commit are measured too.
        rest::context_params tcp = cp;
        tcp.trees                = true;
        const std::string tkey   = cost_cache_key(m, *mc.ctx, tcp);  // only n_slots() comes from the context
        t_tree                   = recalibrate ? -1 : load_tree_step(tkey);
        const rest::cost_table chain_costs = mc.costs;
        if (t_tree < 0) {  // not cached: measured in a tree context, which stays open if trees pay
            open(true, true);
            run_on_own_thread([&] {
                t_tree = std::max(0.0, rest::tree_step_ratio(*mc.ctx, 0, k_flat_rows + 1, k_tree_leaves,
                                                             mc.costs.threads_for(k_flat_rows + 1, 1)));
            });
            write_atomically(tree_step_path(tkey), tree_step_text(tkey, t_tree));
        }
        const bool trees = t_tree > 0 && t_tree <= k_flat_factor;
        if (trees && !mc.trees) {
            open(true, true);
        } else if (!trees && mc.trees) {
            open(false, false);  // back to chains, with the table measured first
            mc.costs = chain_costs;
        }
    }
    if (verbose && mc.costs.valid()) {
        std::string tree_note;
        if (t_tree > 0) {
            char buf[96];
            std::snprintf(buf, sizeof(buf), ", a %d-row tree step %.1f x a plain one", k_flat_rows + 1, t_tree);
            tree_note = buf;
        } else if (t_tree == 0) {
            tree_note = ", no tree step fits this context";
        }
        std::fprintf(stderr, "rest: verifying %s (--draft-layout %s; measured t(%d) = %.1f x t(1)%s)\n",
                     mc.trees ? "trees" : "chains", layout.c_str(), k_flat_rows, t_flat, tree_note.c_str());
    }
    return mc;
}

std::string cost_cache_key(const rest::model & m, const rest::target_model & ctx, const rest::context_params & cp) {
    const int threads = cp.n_threads > 0 ? cp.n_threads : (int) std::thread::hardware_concurrency();
    return file_identity(m.info().path) + "|" + m.info().backend + "|t" + std::to_string(threads) + "|b" +
           std::to_string(cp.n_batch) + (cp.trees ? "|trees" : "|chains") + "|fa" + std::to_string(cp.flash_attn) +
           "|s" + std::to_string(ctx.n_slots()) + (cp.per_slot_contexts() ? "|ctx-per-slot" : "") +
           (cp.cache_type_k == "f16" && cp.cache_type_v == "f16" ? "" : "|kv" + cp.cache_type_k + "," + cp.cache_type_v);
}

namespace {

constexpr int k_state_version = 6;  // 4: prediction source and classes; 5: shape values; 6: no warm-up in the ratios

// One datastore keys as it did before several could be given; none as the empty path.
std::string state_key(const std::string & key, const std::vector<std::string> & index_paths) {
    std::string ids = index_paths.empty() ? file_identity("") : "";
    for (size_t i = 0; i < index_paths.size(); ++i) ids += (i ? "+" : "") + file_identity(index_paths[i]);
    return key + "|index " + ids;
}

fs::path state_path(const std::string & full_key) { return cache_dir() / "budget" / file_name(full_key, ".json"); }

}  // namespace

std::string budget_state_to_json(const rest::budget_state & s, const std::string & key) {
    nlohmann::json acc = nlohmann::json::array(), costs = nlohmann::json::array();
    for (const auto & b : s.acceptance) acc.push_back({b.n, b.accepted});
    for (const auto & [rows, ratio] : s.cost_ratio) costs.push_back({rows, ratio});
    return nlohmann::json{{"format", "rest-budget-state"}, {"version", k_state_version}, {"key", key},
                          {"acceptance", acc}, {"cost_ratio", costs}, {"cost_ratio_all", s.cost_ratio_all},
                          {"cold_us", s.cold_us}, {"t_draft_us", s.t_draft_us}, {"t_draft_node_us", s.t_draft_node_us}, {"plain_us", s.plain_us}, {"spent_us", s.spent_us}, {"n_off", s.n_off}, {"off_left", s.off_left}, {"shape_values", s.shape_values}}.dump(1) + "\n";
}

std::optional<rest::budget_state> budget_state_from_json(const std::string & text, const std::string & key,
                                                         std::string & why) {
    try {
        const auto j = nlohmann::json::parse(text);
        if (!j.is_object() || j.value("format", "") != "rest-budget-state") {
            why = "not a budget state";
            return std::nullopt;
        }
        if (j.value("version", 0) != k_state_version) {
            why = "version " + j.value("version", nlohmann::json()).dump() + ", expected " + std::to_string(k_state_version);
            return std::nullopt;
        }
        if (j.value("key", "") != key) {
            why = "made for another model, datastore or setting";
            return std::nullopt;
        }
        rest::budget_state s;
        for (const auto & b : j.at("acceptance")) s.acceptance.push_back({b.at(0).get<double>(), b.at(1).get<double>()});
        // Integers are read only as integers in range (a float or a huge value is a malformed file, not a cast).
        auto int32 = [](const nlohmann::json & v) {
            if (!v.is_number_integer() || v.get<std::int64_t>() < INT32_MIN || v.get<std::int64_t>() > INT32_MAX) {
                throw std::runtime_error("an integer field holds " + v.dump());
            }
            return (std::int32_t) v.get<std::int64_t>();
        };
        auto int32s = [&](const nlohmann::json & v) {
            std::vector<std::int32_t> out;
            for (const auto & x : v) out.push_back(int32(x));
            return out;
        };
        for (const auto & c : j.at("cost_ratio")) s.cost_ratio.emplace_back(int32(c.at(0)), c.at(1).get<double>());
        s.cost_ratio_all  = j.at("cost_ratio_all").get<double>();
        s.cold_us         = j.value("cold_us", 0.0);  // absent from files written before it was learned
        s.t_draft_us      = j.at("t_draft_us").get<double>();
        s.t_draft_node_us = j.at("t_draft_node_us").get<double>();
        s.plain_us        = j.at("plain_us").get<std::vector<double>>();
        s.spent_us        = j.at("spent_us").get<std::vector<double>>();
        s.n_off           = int32s(j.at("n_off"));
        s.off_left        = int32s(j.at("off_left"));
        s.shape_values    = j.at("shape_values").get<std::vector<double>>();
        return s;
    } catch (const std::exception & e) {
        why = e.what();
        return std::nullopt;
    }
}

std::optional<rest::budget_state> load_budget_state(const std::string & key, const std::vector<std::string> & index_paths) {
    const std::string full = state_key(key, index_paths);
    const fs::path    path = state_path(full);
    std::ifstream     in(path);
    if (!in) return std::nullopt;
    std::stringstream text;
    text << in.rdbuf();
    std::string why;
    auto        s = budget_state_from_json(text.str(), full, why);
    if (!s) std::fprintf(stderr, "rest: warning: ignoring the budget cache %s (%s)\n", path.string().c_str(), why.c_str());
    return s;
}

void save_budget_state(const std::string & key, const std::vector<std::string> & index_paths,
                       const rest::budget_state & state) {
    const std::string full = state_key(key, index_paths);
    const fs::path    path = state_path(full);
    if (!write_atomically(path, budget_state_to_json(state, full))) {
        std::fprintf(stderr, "rest: warning: cannot write the budget cache %s\n", path.string().c_str());
    }
}
