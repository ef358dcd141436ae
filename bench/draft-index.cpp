// The draft step on a real index, in a fresh process: what a server that has just opened the index pays on its
// first steps (cold) and once it runs (warm). Issue 20's figure: retrieval plus a 16-node tree per step.
//
//   bench-draft-index -m MODEL.gguf --index IDX [--index IDX2 ...] [--budget 16] [--steps 20000] [--cold 10]
//                     [--prompt 64] [--evict] [--all-sources] [--settle-ms MS] [--scan-max N] [--dump FILE] FILE...
//
// FILEs are text files fed token by token as if the model were generating them (held-out code, ideally not in the
// index). Each document starts with reset() on its first --prompt tokens, then every step is accept(one token) +
// draft(budget), timed alone (wall and thread CPU time). The model is used for its tokenizer only, and everything
// is tokenized before the index is opened, so the first steps are the first lookups the process makes.
//
// --scan-max sets how many continuations a match's tree is read from (drafter_params::scan_max, default 64: all of
// a match with at most that many occurrences, else that many evenly spaced): what the work per step buys in hit
// rate.
//
// --dump writes one line per step (wall us, probes, match us, finds, match length, match count), the cold steps
// included. The same steps in two runs of a binary are slow or fast together (log-wall correlation 0.90 on
// /usr/include): the slow ones are slow for their work, and the minimum of two runs per step compares binaries with
// the machine's noise mostly removed (run each pair in both orders: the first of a pair has come out faster).
//
// --evict asks the kernel to drop the index files from the page cache (posix_fadvise DONTNEED: only these files,
// nothing else on the machine) before opening them, and reports how much of each was resident before and after
// (mincore). Without it the first steps are those of a fresh process with the file in the page cache.
//
// Printed: open time; the first --cold steps one by one (wall, CPU, major page faults) and their sum; percentiles of
// the remaining (warm) steps, and the steps over 50 us.
#include "percentile.h"

#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/llama-model.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace rest;
namespace fs = std::filesystem;

namespace {

double thread_cpu_us() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return 1e6 * static_cast<double>(ts.tv_sec) + 1e-3 * static_cast<double>(ts.tv_nsec);
}

long major_faults() {
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_majflt;
}

long minor_faults() {
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_minflt;
}

// The regular files of an index path (a file, or a shard directory).
std::vector<std::string> index_files(const std::string & path) {
    std::vector<std::string> out;
    if (fs::is_directory(path)) {
        for (const auto & e : fs::recursive_directory_iterator(path)) {
            if (e.is_regular_file()) out.push_back(e.path().string());
        }
    } else {
        out.push_back(path);
    }
    return out;
}

// Fraction of a file's pages in the page cache.
double resident(const std::string & path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return -1;
    struct stat st{};
    fstat(fd, &st);
    double frac = -1;
    if (st.st_size > 0) {
        void * p = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            const long        page = sysconf(_SC_PAGESIZE);
            const std::size_t n    = (static_cast<std::size_t>(st.st_size) + page - 1) / page;
            std::vector<unsigned char> v(n);
            if (mincore(p, static_cast<std::size_t>(st.st_size), v.data()) == 0) {
                std::size_t in = 0;
                for (unsigned char c : v) in += c & 1;
                frac = static_cast<double>(in) / static_cast<double>(n);
            }
            munmap(p, static_cast<std::size_t>(st.st_size));
        }
    }
    ::close(fd);
    return frac;
}

void evict(const std::string & path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

double pct(const std::vector<double> & sorted, double q) { return bench::percentile_of_sorted(sorted, q); }

void dump_steps(const std::string & path, const std::vector<std::vector<double>> & columns) {
    std::ofstream out(path);
    for (std::size_t i = 0; i < columns[0].size(); ++i) {
        for (std::size_t c = 0; c < columns.size(); ++c) out << (c ? " " : "") << columns[c][i];
        out << '\n';
    }
    if (!out) {
        throw std::runtime_error("cannot write " + path);
    }
}

}  // namespace

int main(int argc, char ** argv) {
    std::string              model;
    std::vector<std::string> indexes, files;
    int                      budget = 16, n_cold = 10;
    std::size_t              n_steps = 20000, n_prompt = 64;
    bool                     do_evict = false, all_sources = false;
    int                      settle_ms = 0;
    long long                scan_max = -1;  // drafter_params::scan_max (-1: the default)
    std::string              dump_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto              v = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
        if (a == "-m") model = v();
        else if (a == "--index") indexes.push_back(v());
        else if (a == "--budget") budget = std::stoi(v());
        else if (a == "--steps") n_steps = std::stoull(v());
        else if (a == "--cold") n_cold = std::stoi(v());
        else if (a == "--prompt") n_prompt = std::stoull(v());
        else if (a == "--evict") do_evict = true;
        else if (a == "--all-sources") all_sources = true;
        else if (a == "--settle-ms") settle_ms = std::stoi(v());
        else if (a == "--scan-max") scan_max = std::stoll(v());
        else if (a == "--dump") dump_path = v();
        else files.push_back(a);
    }
    if (model.empty() || indexes.empty() || files.empty()) {
        std::fprintf(stderr, "usage: %s -m MODEL.gguf --index IDX [--index IDX2 ...] [--budget 16] [--steps 20000] "
                             "[--cold 10] [--prompt 64] [--evict] [--all-sources] FILE...\n", argv[0]);
        return 1;
    }
    try {
        llama_log_quiet();
        std::vector<std::vector<token_id>> docs;
        {
            const auto tok = load_tokenizer(model);
            for (const std::string & f : files) {
                std::ifstream     in(f, std::ios::binary);
                const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
                auto              d = tok->tokenize(text, false, false);
                if (d.size() > n_prompt + 1) docs.push_back(std::move(d));
            }
        }
        std::size_t n_avail = 0;
        for (const auto & d : docs) n_avail += d.size() - n_prompt;
        std::printf("queries: %zu files, %zu tokens to step through (steps: %zu)\n", docs.size(), n_avail,
                    std::min(n_avail, n_steps));
        if (docs.empty()) throw std::runtime_error("no file longer than the prompt");

        std::vector<std::string> all_files;
        for (const auto & p : indexes) {
            for (const auto & f : index_files(p)) all_files.push_back(f);
        }
        for (const auto & f : all_files) {
            const double before = resident(f);
            if (do_evict) evict(f);
            std::printf("page cache: %s %.1f%% resident%s", f.c_str(), 100 * before, do_evict ? "" : "\n");
            if (do_evict) std::printf(", %.1f%% after eviction\n", 100 * resident(f));
        }

        const auto t_open = std::chrono::steady_clock::now();
        const auto ds     = datastore::open(indexes);
        const double open_us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t_open).count();
        std::printf("open: %.3f ms; %llu tokens in %zu shard(s)\n", open_us / 1e3,
                    (unsigned long long) ds->info().n_tokens, ds->info().n_shards);

        if (settle_ms > 0) {  // a server that opened the index a while ago (its pages mapped in meanwhile)
            std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
            std::printf("settled: %d ms after open before the first step\n", settle_ms);
        }
        drafter_params p;
        p.use_context = all_sources;
        p.use_history = false;
        if (scan_max >= 0) p.scan_max = static_cast<std::uint64_t>(scan_max);
        drafter dr(ds.get(), nullptr, p);

        std::vector<double> wall, cpu;
        std::vector<long>   faults, minflt;
        std::vector<double> nodes, probes, match_us, finds, match_len, match_count;
        std::size_t         n_hit = 0, di = 0, pos = 0;
        double              reset_us = 0, reset_cpu_us = 0;
        long                reset_faults = 0;
        while (wall.size() < n_steps) {
            if (pos == 0 || pos + 1 >= docs[di].size()) {
                if (pos != 0) {
                    if (++di == docs.size()) break;
                }
                dr.finish();
                const double c0 = thread_cpu_us();
                const long   f0 = major_faults();
                const auto   t0 = std::chrono::steady_clock::now();
                dr.reset({docs[di].data(), n_prompt});
                const auto t1 = std::chrono::steady_clock::now();
                if (di == 0) {
                    reset_us     = std::chrono::duration<double, std::micro>(t1 - t0).count();
                    reset_cpu_us = thread_cpu_us() - c0;
                    reset_faults = major_faults() - f0;
                }
                pos = n_prompt;
            }
            const long       f0   = major_faults();
            const long       m0   = minor_faults();
            const double     c0   = thread_cpu_us();
            const auto       t0   = std::chrono::steady_clock::now();
            dr.accept({&docs[di][pos++], 1});
            draft_stats      st;
            const draft_tree tree = dr.draft(budget, &st);
            const auto       t1   = std::chrono::steady_clock::now();
            const double     c1   = thread_cpu_us();
            minflt.push_back(minor_faults() - m0);
            probes.push_back(static_cast<double>(st.n_probes));
            match_us.push_back(st.t_match_us);
            finds.push_back(static_cast<double>(st.n_find));
            match_len.push_back(st.match_len_datastore);
            match_count.push_back(static_cast<double>(st.match_count_datastore));
            wall.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            cpu.push_back(c1 - c0);
            faults.push_back(major_faults() - f0);
            nodes.push_back(static_cast<double>(tree.size()));
            const token_id truth = docs[di][pos];
            for (std::size_t i = 0; i < tree.size(); ++i) {
                n_hit += tree.parents[i] < 0 && tree.tokens[i] == truth;
            }
        }

        if (!dump_path.empty()) {
            dump_steps(dump_path, {wall, probes, match_us, finds, match_len, match_count});
        }
        std::printf("first reset (prompt of %zu tokens): %.1f us wall, %.1f us CPU, %ld major faults\n", n_prompt,
                    reset_us, reset_cpu_us, reset_faults);
        const std::size_t n_c = std::min<std::size_t>(static_cast<std::size_t>(n_cold), wall.size());
        double            cold_wall = 0, cold_cpu = 0;
        long              cold_faults = 0;
        std::printf("cold steps (accept + draft(%d)), us:\n  step      wall       cpu  majflt  minflt  probes  match_us  nodes\n",
                    budget);
        for (std::size_t i = 0; i < n_c; ++i) {
            std::printf("  %4zu %9.1f %9.1f %7ld %7ld %7.0f %9.1f %6.0f\n", i + 1, wall[i], cpu[i], faults[i], minflt[i],
                        probes[i], match_us[i], nodes[i]);
            cold_wall += wall[i];
            cold_cpu += cpu[i];
            cold_faults += faults[i];
        }
        std::printf("cold total (first %zu steps): %.1f us wall, %.1f us CPU, %ld major faults; max step %.1f us\n", n_c,
                    cold_wall, cold_cpu, cold_faults, n_c ? *std::max_element(wall.begin(), wall.begin() + n_c) : 0.0);

        std::vector<double> w(wall.begin() + n_c, wall.end()), c(cpu.begin() + n_c, cpu.end());
        long                warm_faults = 0;
        for (std::size_t i = n_c; i < faults.size(); ++i) warm_faults += faults[i];
        std::size_t over50 = 0;
        for (double x : w) over50 += x > 50;
        std::sort(w.begin(), w.end());
        std::sort(c.begin(), c.end());
        double mean = 0, mean_nodes = 0;
        for (double x : w) mean += x;
        for (double x : nodes) mean_nodes += x;
        mean /= std::max<std::size_t>(1, w.size());
        mean_nodes /= std::max<std::size_t>(1, nodes.size());
        std::printf("warm steps (after the first %zu): %zu steps, %ld major faults, %zu over 50 us\n", n_c, w.size(),
                    warm_faults, over50);
        std::printf("  wall us: mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n", mean, pct(w, 0.5),
                    pct(w, 0.9), pct(w, 0.99), pct(w, 0.999), w.empty() ? 0.0 : w.back());
        std::printf("  cpu us:  p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n", pct(c, 0.5), pct(c, 0.9),
                    pct(c, 0.99), pct(c, 0.999), c.empty() ? 0.0 : c.back());
        // What the slow warm steps have in common: probes of the tree's discovery, page faults, time in matching.
        for (const double lim : {0.0, 50.0}) {
            std::size_t n = 0;
            double      pr = 0, mf = 0, mu = 0, fi = 0, wt = 0;
            for (std::size_t i = n_c; i < wall.size(); ++i) {
                if (wall[i] > lim) {
                    ++n;
                    pr += probes[i];
                    mf += static_cast<double>(minflt[i]);
                    mu += match_us[i];
                    fi += finds[i];
                    wt += wall[i];
                }
            }
            const double k = static_cast<double>(std::max<std::size_t>(1, n));
            std::printf("  steps over %.0f us: %zu, mean wall %.1f us, probes %.0f, minor faults %.2f, match %.1f us, "
                        "finds %.2f\n", lim, n, wt / k, pr / k, mf / k, mu / k, fi / k);
        }
        std::printf("  nodes per tree %.1f, first-token hit rate %.3f\n", mean_nodes,
                    static_cast<double>(n_hit) / static_cast<double>(std::max<std::size_t>(1, wall.size())));
    } catch (const std::exception & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
