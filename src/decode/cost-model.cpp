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

std::string cost_table::serialize() const {
    std::ostringstream out;
    out.precision(9);
    out << "rest-cost 2 " << attn_us << ' ' << rebuild_us << ' ' << rows.size();
    for (auto r : rows) out << ' ' << r;
    for (auto t : t_us) out << ' ' << t;
    return out.str();
}

cost_table cost_table::parse(const std::string & text) {
    std::istringstream in(text);
    std::string        magic;
    int                version = 0;
    size_t             n       = 0;
    cost_table         t;
    if (!(in >> magic >> version) || magic != "rest-cost" || version != 2 || !(in >> t.attn_us >> t.rebuild_us >> n) ||
        n == 0 || n > 4096) {
        return {};
    }
    t.rows.resize(n);
    t.t_us.resize(n);
    for (auto & r : t.rows) if (!(in >> r)) return {};
    for (auto & v : t.t_us) if (!(in >> v) || !(v > 0)) return {};
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

    fill_context(m, slot, n_short, n_vocab);
    time_rows(m, slot, 1, n_vocab);  // warm-up: first passes allocate
    // Round robin over the sizes, repeated: a slow spell of a shared machine then slows every size a little instead
    // of one size a lot (sizes measured one after another gave t(2) = 1.9 t(1) in one run, 1.45 in the next). Each
    // visit is a block of passes of one size: its first pass follows another size and rebuilds llama.cpp's graph
    // (ts_changed), the others reuse it (ts), which is what a policy that keeps its shape pays.
    std::vector<std::int32_t>        sizes;
    std::vector<std::vector<double>> ts, ts_changed;
    auto measure = [&](std::int32_t rows) {
        if (m.n_past(slot) + rows + 1 > room / 2) {
            fill_context(m, slot, n_short, n_vocab);
        }
        return time_rows(m, slot, rows, n_vocab);
    };
    const std::int32_t n_block = std::max(2, p.n_block);
    auto measure_block = [&](std::size_t i) {
        for (std::int32_t b = 0; b < n_block; ++b) {
            const double t = measure(sizes[i]);
            if (t <= 0) return false;
            (b == 0 ? ts_changed[i] : ts[i]).push_back(t);
        }
        return true;
    };
    // The first round also decides which sizes fit the context, the sequence ids and the time budget.
    for (std::int32_t rows : p.rows) {
        if (rows > room / 4 || (m.trees() && rows > m.n_leaves_max() + 1) ||
            (rows > 1 && now_us() - t_start > p.max_seconds * 1e6)) {
            break;
        }
        sizes.push_back(rows);
        ts.emplace_back();
        ts_changed.emplace_back();
        if (!measure_block(sizes.size() - 1)) {
            sizes.pop_back();
            ts.pop_back();
            ts_changed.pop_back();
            break;
        }
    }
    for (int k = 1; k < p.n_reps; ++k) {
        for (size_t i = 0; i < sizes.size() && now_us() - t_start <= p.max_seconds * 1e6; ++i) {
            measure_block(i);
        }
    }
    std::vector<double> rebuilds;
    for (size_t i = 0; i < sizes.size(); ++i) {
        table.rows.push_back(sizes[i]);
        table.t_us.push_back(fastest(ts[i]));
        rebuilds.push_back(fastest(ts_changed[i]) - fastest(ts[i]));
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
