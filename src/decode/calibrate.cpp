// Measuring the cost table: t(rows) of one request's chains, and of several requests' equal chains.
#include "rest/cost-model.h"

#include <algorithm>
#include <chrono>
#include <cmath>

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

// Times one forward pass of `requests` requests on slots first.., each a chain of per - 1 draft nodes behind its
// root, then commits only the roots.
double time_batch(target_model & m, std::int32_t first, std::int32_t requests, std::int32_t per, std::int32_t n_vocab) {
    std::vector<token_id>     tokens(per - 1);
    std::vector<std::int32_t> parents(per - 1), depths(per - 1);
    for (std::int32_t i = 0; i + 1 < per; ++i) {
        tokens[i]  = (token_id) ((i * 7919 + 13) % n_vocab);
        parents[i] = i - 1;
        depths[i]  = i + 1;
    }
    std::vector<tree_request> rs(requests);
    for (std::int32_t k = 0; k < requests; ++k) {
        rs[k].slot    = first + k;
        rs[k].root    = (token_id) ((m.n_past(first + k) + k) % n_vocab);
        rs[k].tokens  = tokens;
        rs[k].parents = parents;
        rs[k].depths  = depths;
    }
    const double t0 = now_us();
    if (m.decode(rs) != decode_status::ok) {
        return -1;
    }
    const double dt = now_us() - t0;
    for (std::int32_t k = 0; k < requests; ++k) m.commit(k, {});
    return dt;
}

// One request's chain of n_rows rows.
double time_rows(target_model & m, std::int32_t slot, std::int32_t n_rows, std::int32_t n_vocab) {
    return time_batch(m, slot, 1, n_rows, n_vocab);
}

void fill_context(target_model & m, std::int32_t slot, std::int32_t n, std::int32_t n_vocab) {
    m.clear(slot);
    std::vector<token_id> toks(n);
    for (std::int32_t i = 0; i < n; ++i) {
        toks[i] = (token_id) ((i * 31 + 7) % n_vocab);
    }
    m.prefill(slot, toks);
}

// Whatever happens, calibration leaves the context on its own thread count.
struct own_threads_at_exit {
    target_model & m;
    ~own_threads_at_exit() { m.set_decode_threads(0); }
};

// The thread counts each shape is timed with: [0] the context's own (0: it has none), then one thread for small
// models (see calibrate_cost).
std::vector<std::int32_t> thread_options(const target_model & m, const calibrate_params & p) {
    std::vector<std::int32_t> options = {m.n_threads()};
    if (p.try_one_thread && m.n_threads() > 1) options.push_back(1);
    return options;
}

// Index of the option with the fastest steady timing among those tried ([0] always is).
template <class Timings>
std::size_t fastest_option(const std::vector<bool> & tried, const Timings & steady_of) {
    std::size_t best = 0;
    for (std::size_t o = 1; o < tried.size(); ++o) {
        if (tried[o] && fastest(steady_of(o)) < fastest(steady_of(best))) best = o;
    }
    return best;
}

}  // namespace

cost_table calibrate_cost(target_model & m, std::int32_t slot, const calibrate_params & p) {
    const double       t_start  = now_us();
    const std::int32_t n_vocab  = m.n_vocab();
    const std::int32_t room     = m.n_ctx_slot();
    const std::int32_t n_short  = std::min<std::int32_t>(8, room / 8);
    cost_table         table;

    const own_threads_at_exit reset_threads{m};
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
    const std::vector<std::int32_t>            options = thread_options(m, p);
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
        const std::size_t best = fastest_option(tried[i], [&](std::size_t o) -> const auto & { return ts[i][o].steady; });
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
    calibrate_batches(m, table, p);
    return table;
}

void calibrate_batches(target_model & m, cost_table & table, const calibrate_params & p) {
    table.batches.clear();
    if (m.trees() || m.n_slots() < 2 || p.per.empty() || p.per.front() != 1 || !table.valid()) {
        return;  // trees share one pass however many requests: t(total rows) prices them
    }
    const double       t_start = now_us();
    const std::int32_t n_vocab = m.n_vocab();
    const std::int32_t room    = m.n_ctx_slot();
    const std::int32_t n_short = std::min<std::int32_t>(8, room / 8);
    const std::int32_t n_block = std::max(2, p.n_block);
    const own_threads_at_exit reset_threads{m};
    std::vector<std::int32_t> counts;
    for (std::int32_t s = 2; s < m.n_slots(); s *= 2) counts.push_back(s);
    counts.push_back(m.n_slots());
    const std::vector<std::int32_t> options = thread_options(m, p);
    auto over = [&] { return now_us() - t_start > p.max_seconds_batches * 1e6; };

    struct entry {
        std::size_t                      b   = 0;  // index into counts
        std::int32_t                     per = 1;
        std::vector<std::vector<double>> steady;   // per option
        std::vector<bool>                tried;    // per option
    };
    std::vector<entry> es;
    // A block of passes of one shape; as in calibrate_cost, the first follows another shape and is not kept.
    auto block = [&](entry & e, std::size_t o) {
        const std::int32_t n = counts[e.b];
        m.set_decode_threads(options[o]);
        for (std::int32_t k = 0; k < n_block; ++k) {
            for (std::int32_t s = 0; s < n; ++s) {
                if (m.n_past(s) == 0 || m.n_past(s) + e.per + 1 > room / 2) {
                    for (std::int32_t r = 0; r < n; ++r) fill_context(m, r, n_short, n_vocab);
                    break;
                }
            }
            const double t = time_batch(m, 0, n, e.per, n_vocab);
            if (t <= 0) return false;
            if (k > 0) e.steady[o].push_back(t);
        }
        return true;
    };
    // First round: which shapes fit (rows per pass, context room, time budget) and which thread counts are worth
    // timing, dropped for longer chains once one thread is much slower. Chain lengths go in the outer loop, so a time
    // budget that runs out leaves every request count its short chains. One row per request keeps the context's
    // count, as plain decoding does (see calibrate_cost).
    auto best_option = [&](const entry & e) {
        return fastest_option(e.tried, [&](std::size_t o) -> const auto & { return e.steady[o]; });
    };
    auto best_time = [&](const entry & e) { return fastest(e.steady[best_option(e)]); };
    bool settled = false;  // the grid agrees with the one-request table
    std::vector<std::vector<bool>> alive(counts.size(), std::vector<bool>(options.size(), true));
    std::vector<bool>              full(counts.size(), false);  // no longer chain fits
    for (const std::int32_t per : p.per) {
        for (std::size_t b = 0; b < counts.size(); ++b) {
            if (full[b] || counts[b] * per > m.n_rows_max() || n_short + per + 1 > room / 2 || (per > 1 && over())) {
                full[b] = true;
                continue;
            }
            entry e{b, per, std::vector<std::vector<double>>(options.size()), std::vector<bool>(options.size(), false)};
            for (std::size_t o = 0; o < options.size(); ++o) {
                if (alive[b][o] && (o == 0 || per > 1)) e.tried[o] = block(e, o);
            }
            if (!e.tried[0]) {  // the memory cannot hold it: nor longer chains
                full[b] = true;
                continue;
            }
            for (std::size_t o = 1; o < options.size(); ++o) {
                alive[b][o] = alive[b][o] && (per == 1 || (e.tried[o] && fastest(e.steady[o]) <=
                                                                             p.drop_slower * fastest(e.steady[0])));
            }
            es.push_back(std::move(e));
        }
        // Where llama.cpp's work grows with total rows whatever the sequences (weight-bound models: TinyLlama Q4_0,
        // 4 requests x 2 rows 174 ms, one 8-row chain 178 ms), the one-request table already prices batches: keep
        // the short chains measured, which the prediction extends as that table, and spend no more time.
        if (per >= 2 && std::all_of(es.begin(), es.end(), [&](const entry & e) {
                const double r = best_time(e) / table.predict_us(counts[e.b] * e.per, 0);
                return std::abs(r - 1) <= p.grid_agree;
            })) {
            settled = true;
            break;
        }
    }
    for (std::int32_t k = 1; k < p.n_reps && !over() && !settled; ++k) {
        for (auto & e : es) {
            for (std::size_t o = 0; o < options.size() && !over(); ++o) {
                if (e.tried[o]) block(e, o);
            }
        }
    }
    std::stable_sort(es.begin(), es.end(), [](const entry & a, const entry & b) { return a.b < b.b; });
    for (const entry & e : es) {
        if (e.per == 1) table.batches.push_back({counts[e.b], {}, {}, {}});
        cost_table::batch_costs & bc = table.batches.back();
        bc.per.push_back(e.per);
        bc.t_us.push_back(best_time(e));
        bc.threads.push_back(options[best_option(e)]);
    }
    for (std::int32_t s = 0; s < counts.back(); ++s) m.clear(s);
}

}  // namespace rest
