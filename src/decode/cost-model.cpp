#include "rest/cost-model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

namespace rest {

namespace {

double now_us() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::micro>(clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// The fastest of several timings: on a shared machine, preemption only ever adds time, so the minimum is the best
// estimate of what a forward pass costs; the policy corrects for steady extra load online.
double fastest(const std::vector<double> & v) {
    return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

// Times one forward pass of a chain of n_rows - 1 draft nodes behind the root, then commits only the root.
double time_rows(target_model & m, std::int32_t slot, std::int32_t n_rows, std::int32_t n_vocab) {
    std::vector<token_id>     tokens(n_rows - 1);
    std::vector<std::int32_t> parents(n_rows - 1), depths(n_rows - 1);
    for (std::int32_t i = 0; i + 1 < n_rows; ++i) {
        tokens[i]  = (token_id) ((i * 7919 + 13) % n_vocab);
        parents[i] = i - 1;
        depths[i]  = i + 1;
    }
    tree_request r;
    r.slot    = slot;
    r.root    = (token_id) (m.n_past(slot) % n_vocab);
    r.tokens  = tokens;
    r.parents = parents;
    r.depths  = depths;
    const double t0 = now_us();
    if (m.decode({&r, 1}) != decode_status::ok) {
        return -1;
    }
    const double dt = now_us() - t0;
    m.commit(0, {});
    return dt;
}

void fill_context(target_model & m, std::int32_t slot, std::int32_t n, std::int32_t n_vocab) {
    m.clear(slot);
    std::vector<token_id> toks(n);
    for (std::int32_t i = 0; i < n; ++i) {
        toks[i] = (token_id) ((i * 31 + 7) % n_vocab);
    }
    m.prefill(slot, toks);
}

}  // namespace

double cost_table::predict_us(std::int32_t n_rows, std::int32_t n_past) const {
    if (!valid()) {
        return (double) n_rows;  // uninformed: linear cost
    }
    n_rows = std::max(n_rows, 1);
    double base;
    const auto it = std::lower_bound(rows.begin(), rows.end(), n_rows);
    if (it == rows.end()) {
        // Past the last measured size: extend linearly with the slope of the last segment.
        const size_t k = rows.size() - 1;
        const double slope = k > 0 ? (t_us[k] - t_us[k - 1]) / std::max(1, rows[k] - rows[k - 1]) : t_us[k];
        base = t_us[k] + std::max(slope, 0.0) * (n_rows - rows[k]);
    } else if (*it == n_rows || it == rows.begin()) {
        base = t_us[it - rows.begin()];
    } else {
        const size_t k  = it - rows.begin();
        const double f  = double(n_rows - rows[k - 1]) / double(rows[k] - rows[k - 1]);
        base = t_us[k - 1] + f * (t_us[k] - t_us[k - 1]);
    }
    return base + attn_us * (double) n_rows * (double) std::max(n_past, 0);
}

std::size_t cost_table::nearest(std::int32_t n_rows) const {
    if (rows.empty()) return 0;
    const auto it = std::lower_bound(rows.begin(), rows.end(), n_rows);
    if (it == rows.end()) return rows.size() - 1;
    if (it != rows.begin() && (*it - n_rows) > (n_rows - *(it - 1))) return (it - rows.begin()) - 1;
    return it - rows.begin();
}

std::int32_t cost_table::threads_for(std::int32_t n_rows) const {
    return valid() && !threads.empty() ? threads[nearest(n_rows)] : 0;
}

std::string cost_table::serialize() const {
    std::ostringstream out;
    out.precision(9);
    out << "rest-cost 3 " << attn_us << ' ' << rebuild_us << ' ' << rows.size();
    for (auto r : rows) out << ' ' << r;
    for (auto t : t_us) out << ' ' << t;
    for (size_t i = 0; i < rows.size(); ++i) out << ' ' << (threads.empty() ? 0 : threads[i]);
    return out.str();
}

cost_table cost_table::parse(const std::string & text) {
    std::istringstream in(text);
    std::string        magic;
    int                version = 0;
    size_t             n       = 0;
    cost_table         t;
    if (!(in >> magic >> version) || magic != "rest-cost" || version != 3 || !(in >> t.attn_us >> t.rebuild_us >> n) ||
        n == 0 || n > 4096) {
        return {};
    }
    t.rows.resize(n);
    t.t_us.resize(n);
    t.threads.resize(n);
    for (auto & r : t.rows) if (!(in >> r)) return {};
    for (auto & v : t.t_us) if (!(in >> v) || !(v > 0)) return {};
    for (auto & k : t.threads) if (!(in >> k) || k < 0) return {};
    if (!std::is_sorted(t.rows.begin(), t.rows.end()) || t.rows.front() != 1 || t.attn_us < 0 || t.rebuild_us < 0) {
        return {};
    }
    return t;
}

cost_table calibrate_cost(target_model & m, std::int32_t slot, const calibrate_params & p) {
    const double       t_start  = now_us();
    const std::int32_t n_vocab  = m.n_vocab();
    const std::int32_t room     = m.n_ctx_slot();
    const std::int32_t n_short  = std::min<std::int32_t>(8, room / 8);
    cost_table         table;

    // Whatever happens, the context is left on its own thread count.
    struct threads_reset {
        target_model & m;
        ~threads_reset() { m.set_decode_threads(0); }
    } reset_threads{m};
    fill_context(m, slot, n_short, n_vocab);
    time_rows(m, slot, 1, n_vocab);  // warm-up: first passes allocate
    if (room >= 16) {
        time_rows(m, slot, 2, n_vocab);  // so that the first 1-row block follows another size, as every block does
    }
    // Round robin over the sizes, repeated: a slow spell of a shared machine then slows every size a little instead
    // of one size a lot (sizes measured one after another gave t(2) = 1.9 t(1) in one run, 1.45 in the next). Each
    // visit is a block of passes of one size: its first pass follows another size and rebuilds llama.cpp's graph
    // (changed), the others reuse it (steady), which is what a policy that keeps its shape pays. Each size is timed
    // with the context's threads and, for small models, with one thread: on stories260K with two threads a 2-row
    // pass took 0.56 ms and with one 0.17 ms (ggml's sgemm splits tiny matrices into chunks the threads contend for).
    struct timing {
        std::vector<double> steady, changed;
    };
    std::vector<std::int32_t>                  options = {m.n_threads()};  // [0]: the context's own (0: no threads)
    if (p.try_one_thread && m.n_threads() > 1) options.push_back(1);
    std::vector<std::int32_t>                  sizes;
    std::vector<std::vector<timing>>           ts;     // [size][option]
    std::vector<bool>                          alive(options.size(), true);
    std::vector<std::vector<bool>>             tried;  // [size][option]: measured in the first round
    auto measure = [&](std::int32_t rows) {
        if (m.n_past(slot) + rows + 1 > room / 2) {
            fill_context(m, slot, n_short, n_vocab);
        }
        return time_rows(m, slot, rows, n_vocab);
    };
    const std::int32_t n_block = std::max(2, p.n_block);
    auto measure_block = [&](std::size_t i, std::size_t o) {
        m.set_decode_threads(options[o]);
        for (std::int32_t b = 0; b < n_block; ++b) {
            const double t = measure(sizes[i]);
            if (t <= 0) return false;
            (b == 0 ? ts[i][o].changed : ts[i][o].steady).push_back(t);
        }
        return true;
    };
    // The first round also decides which sizes fit the context, the sequence ids and the time budget, and drops
    // the one-thread option for the sizes after one where it was much slower.
    for (std::int32_t rows : p.rows) {
        if (rows > room / 4 || (m.trees() && rows > m.n_leaves_max() + 1) ||
            (rows > 1 && now_us() - t_start > p.max_seconds * 1e6)) {
            break;
        }
        sizes.push_back(rows);
        ts.emplace_back(options.size());
        tried.emplace_back(options.size(), false);
        bool ok = true;
        for (std::size_t o = 0; o < options.size() && ok; ++o) {
            // One row always runs on the context's threads, as plain decoding does: flash attention splits a single
            // row's KV range across threads, so another count would change its rounding.
            if (alive[o] && (o == 0 || rows > 1)) {
                ok           = measure_block(sizes.size() - 1, o);
                tried.back()[o] = ok;
            }
        }
        if (!ok) {
            sizes.pop_back();
            ts.pop_back();
            tried.pop_back();
            break;
        }
        for (std::size_t o = 1; o < options.size(); ++o) {
            alive[o] = alive[o] && fastest(ts.back()[o].steady) <= p.drop_slower * fastest(ts.back()[0].steady);
        }
    }
    for (int k = 1; k < p.n_reps; ++k) {
        for (size_t i = 0; i < sizes.size() && now_us() - t_start <= p.max_seconds * 1e6; ++i) {
            for (std::size_t o = 0; o < options.size(); ++o) {
                if (tried[i][o]) measure_block(i, o);
            }
        }
    }
    std::vector<double> rebuilds;
    for (size_t i = 0; i < sizes.size(); ++i) {
        std::size_t best = 0;
        for (std::size_t o = 1; o < options.size(); ++o) {
            if (tried[i][o] && fastest(ts[i][o].steady) < fastest(ts[i][best].steady)) best = o;
        }
        table.rows.push_back(sizes[i]);
        table.t_us.push_back(fastest(ts[i][best].steady));
        table.threads.push_back(options[best]);
        // Only the context's own blocks follow another size (the one-thread block follows the same size).
        rebuilds.push_back(fastest(ts[i][0].changed) - fastest(ts[i][0].steady));
    }
    // One figure for all sizes: building a graph costs about the same whatever the batch size.
    table.rebuild_us = std::max(0.0, median(rebuilds));
    if (table.rows.empty()) {
        m.clear(slot);
        return table;
    }

    // Attention: the same sizes again at a long context fill.
    const std::int32_t n_long = std::min(p.n_past_long, room / 2);
    if (n_long > 4 * n_short && now_us() - t_start < p.max_seconds * 1e6) {
        fill_context(m, slot, n_long, n_vocab);
        std::vector<double> slopes;
        for (size_t k = 0; k < table.rows.size(); k += std::max<size_t>(1, table.rows.size() / 3)) {
            const std::int32_t rows = table.rows[k];
            if (m.n_past(slot) + rows + 1 > room) break;
            m.set_decode_threads(table.threads[k]);
            std::vector<double> ts;
            for (int r = 0; r < p.n_reps; ++r) {
                const double t = time_rows(m, slot, rows, n_vocab);
                if (t > 0) ts.push_back(t);
            }
            if (ts.empty()) continue;
            slopes.push_back((fastest(ts) - table.t_us[k]) / (double(rows) * double(m.n_past(slot) - n_short)));
        }
        // A slope from differences of noisy timings can come out absurd on a busy machine; attention at the long
        // fill is capped at doubling a single row's cost, which covers every model shape we have measured.
        table.attn_us = std::clamp(median(slopes), 0.0, table.t_us[0] / double(std::max(1, n_long)));
    }
    m.clear(slot);
    return table;
}

}  // namespace rest
