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
    // A model that knows what its pass took (a simulated one in tests, a device timer) says so (target_model).
    const double dt = m.last_pass_us() >= 0 ? m.last_pass_us() : now_us() - t0;
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

// One shape of forward pass, timed per thread option: `requests` requests on slots first.., each a chain of `rows`
// rows.
struct shape {
    std::int32_t                     first = 0, requests = 1, rows = 1;
    std::vector<std::vector<double>> steady, changed;  // per option: passes that reused the graph / rebuilt it
    std::vector<bool>                tried;            // per option: timed in the first round

    // The fastest option among those tried ([0], the context's own, always is), and its time.
    std::size_t best() const {
        std::size_t b = 0;
        for (std::size_t o = 1; o < tried.size(); ++o) {
            if (tried[o] && fastest(steady[o]) < fastest(steady[b])) b = o;
        }
        return b;
    }
    double t() const { return fastest(steady[best()]); }
};

// What both calibrations share: the thread options, and blocks of passes of one shape.
class timer {
    target_model &     m_;
    const std::int32_t n_vocab_, room_, n_block_;

  public:
    const std::int32_t        n_short;  // the short context fill timings are taken at
    std::vector<std::int32_t> options;

    timer(target_model & m, const calibrate_params & p) :
        m_(m), n_vocab_(m.n_vocab()), room_(m.n_ctx_slot()), n_block_(std::max(2, p.n_block)),
        n_short(std::min<std::int32_t>(8, room_ / 8)) {
        // [0] the context's own count (0: it has none); then one thread, for small models (see calibrate_cost).
        options.push_back(m.n_threads());
        if (p.try_one_thread && m.n_threads() > 1) options.push_back(1);
    }
    ~timer() { m_.set_decode_threads(0); }  // whatever happens, the context is left on its own thread count
    timer(const timer &) = delete;
    timer & operator=(const timer &) = delete;

    shape make(std::int32_t first, std::int32_t requests, std::int32_t rows) const {
        shape s;
        s.first    = first;
        s.requests = requests;
        s.rows     = rows;
        s.steady.resize(options.size());
        s.changed.resize(options.size());
        s.tried.assign(options.size(), false);
        return s;
    }
    // A block of passes of s on option o's threads: the first follows another shape and rebuilds llama.cpp's graph
    // (changed), the others reuse it (steady), which is what a policy that keeps its shape pays. The slots are
    // refilled to a short context whenever one is empty or would run out of room. false: the memory cannot hold it.
    bool block(shape & s, std::size_t o) {
        m_.set_decode_threads(options[o]);
        for (std::int32_t b = 0; b < n_block_; ++b) {
            for (std::int32_t k = 0; k < s.requests; ++k) {
                const std::int32_t n_past = m_.n_past(s.first + k);
                if (n_past == 0 || n_past + s.rows + 1 > room_ / 2) {
                    for (std::int32_t j = 0; j < s.requests; ++j) fill_context(m_, s.first + j, n_short, n_vocab_);
                    break;
                }
            }
            const double t = time_batch(m_, s.first, s.requests, s.rows, n_vocab_);
            if (t <= 0) return false;
            (b == 0 ? s.changed[o] : s.steady[o]).push_back(t);
        }
        return true;
    }
    // After option o was timed on s in the first round: o is no longer timed on larger shapes of the same kind once
    // it was much slower than the context's own count.
    void drop_slow(const shape & s, std::vector<bool> & alive, double drop_slower) const {
        for (std::size_t o = 1; o < options.size(); ++o) {
            alive[o] = alive[o] && (!s.tried[o] || fastest(s.steady[o]) <= drop_slower * fastest(s.steady[0]));
        }
    }
    // Rounds after the first, over all shapes and the options tried on each, while time is left: a slow spell of a
    // shared machine then slows every shape a little instead of one shape a lot.
    void rounds(std::vector<shape> & shapes, std::int32_t n_reps, double deadline_us) {
        for (std::int32_t r = 1; r < n_reps; ++r) {
            for (shape & s : shapes) {
                if (now_us() > deadline_us) return;
                for (std::size_t o = 0; o < options.size(); ++o) {
                    if (s.tried[o]) block(s, o);
                }
            }
        }
    }
};

// Leaves the slot empty and the context on its own thread count, also when a pass throws.
struct warm_up_guard {
    target_model & m;
    std::int32_t   slot;
    ~warm_up_guard() {
        m.set_decode_threads(0);
        m.clear(slot);
    }
};

// One-row passes until one is not 10% faster than the fastest before it (at most 4): a process's first passes page
// in the weights and start the thread pool (the demo model's first took 0.7-1.2 ms, the next 0.2-0.3, then 0.16).
// Returns the fastest (<= 0: none ran).
double settle_one_row(target_model & m, std::int32_t slot) {
    double fastest = 0;
    for (std::int32_t i = 0; i < 4; ++i) {
        const double t = time_rows(m, slot, 1, m.n_vocab());
        if (t <= 0) break;
        const bool settled = fastest > 0 && t >= 0.9 * fastest;
        fastest            = fastest > 0 ? std::min(fastest, t) : t;
        if (settled) break;
    }
    return fastest;
}

// A size's first pass is cold by the compute-buffer memory it touches beyond every earlier pass's (demo model,
// sizes in increasing order: 2 rows +64 us over the second pass, 9 rows +300, 16 rows +705; after one 16-row pass
// each smaller size's first pass cost only a change of shape). So one pass of the largest size the policy is likely
// to choose warms them all: the largest the table has up to max_rows that costs at most 4 one-row passes (the demo
// model at one thread: 16 rows; it chose more in 0.5% of its steps, and a first 24-row pass cost 2.2 ms over a
// steady one, 8 of its steps). Where a 2-row pass's first run is within 10% of a steady one (scaled by how the
// fastest one-row pass here compares with the table's), fixed costs do not matter (a 1B model: 0.5 ms of pages
// against a 60 ms pass) and the larger pass is not worth its time. Returns the largest size that ran (0: none).
std::int32_t warm_largest(target_model & m, std::int32_t slot, const cost_table & costs, std::int32_t max_rows,
                          double t1) {
    const std::int32_t room = m.n_ctx_slot();
    const auto fits = [&](std::size_t k) { return costs.rows[k] <= max_rows && costs.rows[k] + 1 <= room / 2; };
    if (!costs.valid() || costs.rows.size() < 2 || !fits(1)) return 0;
    std::size_t top = 1;
    while (top + 1 < costs.rows.size() && fits(top + 1) && costs.t_us[top + 1] <= 4 * costs.t_us[0]) ++top;
    std::int32_t warmed = 0;
    // One pass of size costs.rows[k] on its threads; its time (<= 0: it could not run).
    const auto pass = [&](std::size_t k) {
        if (m.n_past(slot) + costs.rows[k] + 1 > room / 2) fill_context(m, slot, 1, m.n_vocab());
        m.set_decode_threads(k < costs.threads.size() ? costs.threads[k] : 0);
        const double t = time_rows(m, slot, costs.rows[k], m.n_vocab());
        if (t > 0) warmed = costs.rows[k];
        return t;
    };
    const double scale = costs.t_us[0] > 0 ? std::max(1.0, t1 / costs.t_us[0]) : 1.0;
    const double t2    = pass(1);
    if (t2 > 1.1 * scale * costs.t_us[1] && top > 1) pass(top);
    return warmed;
}

}  // namespace

warm_up_result warm_up(target_model & m, std::int32_t slot, const cost_table & costs, std::int32_t max_rows) {
    warm_up_result out;
    const double   t0 = now_us();
    if (m.n_ctx_slot() < 8) return out;
    {
        warm_up_guard guard{m, slot};
        fill_context(m, slot, 1, m.n_vocab());  // a context to decode on
        const double t1 = settle_one_row(m, slot);
        if (t1 > 0) out.rows = std::max(1, warm_largest(m, slot, costs, max_rows, t1));
    }
    out.t_us = now_us() - t0;
    return out;
}

cost_table calibrate_cost(target_model & m, std::int32_t slot, const calibrate_params & p) {
    const double       t_start = now_us();
    const double       deadline = t_start + p.max_seconds * 1e6;
    const std::int32_t room    = m.n_ctx_slot();
    cost_table         table;
    {
        timer c(m, p);
        fill_context(m, slot, c.n_short, m.n_vocab());
        time_rows(m, slot, 1, m.n_vocab());  // warm-up: first passes allocate
        if (room >= 16) {
            time_rows(m, slot, 2, m.n_vocab());  // so that the first 1-row block follows another size, as every block does
        }
        // Round robin over the sizes, repeated (timer::rounds). Each size is timed with the context's threads and,
        // for small models, with one thread: on stories260K with two threads a 2-row pass took 0.56 ms and with one
        // 0.17 ms (ggml's sgemm splits tiny matrices into chunks the threads contend for). The first round also
        // decides which sizes fit the context, the sequence ids and the time budget.
        std::vector<shape> sizes;
        std::vector<bool>  alive(c.options.size(), true);
        for (std::int32_t rows : p.rows) {
            if (rows > room / 4 || (m.trees() && rows > m.n_leaves_max() + 1) || (rows > 1 && now_us() > deadline)) {
                break;
            }
            shape s  = c.make(slot, 1, rows);
            bool  ok = true;
            for (std::size_t o = 0; o < c.options.size() && ok; ++o) {
                // One row always runs on the context's threads, as plain decoding does: flash attention splits a
                // single row's KV range across threads, so another count would change its rounding.
                if (alive[o] && (o == 0 || rows > 1)) ok = s.tried[o] = c.block(s, o);
            }
            if (!ok) break;
            c.drop_slow(s, alive, p.drop_slower);
            sizes.push_back(std::move(s));
        }
        c.rounds(sizes, p.n_reps, deadline);
        std::vector<double> rebuilds;
        for (const shape & s : sizes) {
            table.rows.push_back(s.rows);
            table.t_us.push_back(s.t());
            table.threads.push_back(c.options[s.best()]);
            // Only the context's own blocks follow another size (the one-thread block follows the same size).
            rebuilds.push_back(fastest(s.changed[0]) - fastest(s.steady[0]));
        }
        // One figure for all sizes: building a graph costs about the same whatever the batch size.
        table.rebuild_us = std::max(0.0, median(rebuilds));
        if (table.rows.empty()) {
            m.clear(slot);
            return table;
        }

        // Attention: the same sizes again at a long context fill.
        const std::int32_t n_long = std::min(p.n_past_long, room / 2);
        if (n_long > 4 * c.n_short && now_us() < deadline) {
            fill_context(m, slot, n_long, m.n_vocab());
            std::vector<double> slopes;
            for (size_t k = 0; k < table.rows.size(); k += std::max<size_t>(1, table.rows.size() / 3)) {
                const std::int32_t rows = table.rows[k];
                if (m.n_past(slot) + rows + 1 > room) break;
                m.set_decode_threads(table.threads[k]);
                std::vector<double> ts;
                for (int r = 0; r < p.n_reps; ++r) {
                    const double t = time_rows(m, slot, rows, m.n_vocab());
                    if (t > 0) ts.push_back(t);
                }
                if (ts.empty()) continue;
                slopes.push_back((fastest(ts) - table.t_us[k]) / (double(rows) * double(m.n_past(slot) - c.n_short)));
            }
            // A slope from differences of noisy timings can come out absurd on a busy machine; attention at the long
            // fill is capped at doubling a single row's cost, which covers every model shape we have measured.
            table.attn_us = std::clamp(median(slopes), 0.0, table.t_us[0] / double(std::max(1, n_long)));
        }
        m.clear(slot);
    }
    calibrate_batches(m, table, p);
    return table;
}

double tree_step_ratio(target_model & m, std::int32_t slot, std::int32_t n_rows, std::int32_t leaves, std::int32_t tree_threads,
                       std::int32_t reps) {
    const std::int32_t nodes = n_rows - 1;
    if (!m.trees() || leaves < 2 || nodes % leaves != 0 || nodes / leaves < 2 || leaves > m.n_leaves_max() ||
        4 * n_rows > m.n_ctx_slot()) {
        return -1;
    }
    const std::int32_t n_vocab = m.n_vocab();
    // Four kinds of step, taken in turn, as a drafted tree's steps vary:
    //  - two trees of n_rows rows, `leaves` branches and half as many (twice as deep): at a fixed budget the rows
    //    stay and the branches change;
    //  - each with half of its first branch accepted (the best path comes first: commit keeps its cells in place)
    //    or half of its last (decoded again at the head of the next pass, whose rows then change).
    // A real tree's accepted path is mostly but not always its first. Every kind costs what a tree step pays: a
    // sequence per leaf, the mask, the commit, what llama.cpp rebuilds when a pass's shape changes. On an H200, the
    // demo model's first-branch steps alone came to 1.9-2.2 plain steps, its last-branch steps alone 6.8-8.0, and
    // its trees in a bench 4.2 (0.67 ms a step of 8 nodes).
    struct tree_shape {
        std::vector<token_id>     tokens;
        std::vector<std::int32_t> parents, depths, path;  // path: the accepted nodes, root's child first
    };
    std::vector<tree_shape> trees;
    for (std::int32_t l : {leaves, leaves / 2}) {
        if (l < 1 || nodes % l != 0) continue;
        tree_shape t;
        const std::int32_t depth = nodes / l;
        for (std::int32_t b = 0; b < l; ++b) {
            for (std::int32_t d = 1; d <= depth; ++d) {
                t.tokens.push_back((token_id) ((b * 7919 + d * 104729 + 13) % n_vocab));
                t.parents.push_back(d == 1 ? -1 : (std::int32_t) t.tokens.size() - 2);
                t.depths.push_back(d);
            }
        }
        for (std::int32_t b : {0, l - 1}) {
            t.path.clear();
            for (std::int32_t d = 0; d < depth / 2; ++d) t.path.push_back(b * depth + d);
            trees.push_back(t);
        }
    }
    warm_up_guard guard{m, slot};
    const std::int32_t fill = std::min<std::int32_t>(64, m.n_ctx_slot() / 4);
    // One step: its pass and its commit, by the wall clock (a commit's work is on the host). tree: null for plain.
    auto step = [&](const tree_shape * t) -> double {
        if (m.n_past(slot) + n_rows + 1 > m.n_ctx_slot() / 2) fill_context(m, slot, fill, n_vocab);
        tree_request r;
        r.slot = slot;
        r.root = (token_id) ((m.n_past(slot) * 31 + 7) % n_vocab);
        if (t) {
            r.tokens  = t->tokens;
            r.parents = t->parents;
            r.depths  = t->depths;
        }
        m.set_decode_threads(t ? tree_threads : 0);  // one row on the context's own, as plain decoding
        const double t0 = now_us();
        if (m.decode({&r, 1}) != decode_status::ok) return -1;
        m.commit(0, t ? std::span<const std::int32_t>(t->path) : std::span<const std::int32_t>());
        return now_us() - t0;
    };
    fill_context(m, slot, fill, n_vocab);
    // Blocks of plain steps (steady, as plain decoding runs) and of tree steps (each kind reps / 2 times, in turn),
    // twice each, so that a slow spell of a shared machine slows both; each block's first step follows the other kind
    // and is not counted. A tree step is the mean over the kinds of each kind's fastest: the fastest alone would be
    // the cheapest kind's.
    std::vector<double>              t_plain;
    std::vector<std::vector<double>> t_kind(trees.size());
    for (std::int32_t round = 0; round < 2; ++round) {
        for (std::int32_t i = 0; i <= reps / 2; ++i) {
            const double t = step(nullptr);
            if (t <= 0) return -1;
            if (i > 0) t_plain.push_back(t);
        }
        for (std::int32_t i = 0; i <= (reps / 2) * (std::int32_t) trees.size(); ++i) {
            const std::size_t k = (std::size_t) i % trees.size();
            const double      t = step(&trees[k]);
            if (t <= 0) return -1;
            if (i > 0) t_kind[k].push_back(t);
        }
    }
    double sum = 0;
    for (const auto & v : t_kind) sum += fastest(v);
    return sum / (double) trees.size() / fastest(t_plain);
}

void calibrate_batches(target_model & m, cost_table & table, const calibrate_params & p) {
    table.batches.clear();
    if (m.trees() || m.n_slots() < 2 || p.per.empty() || p.per.front() != 1 || !table.valid()) {
        return;  // trees share one pass however many requests: t(total rows) prices them
    }
    const double deadline = now_us() + p.max_seconds_batches * 1e6;
    timer        c(m, p);
    std::vector<std::int32_t> counts;
    for (std::int32_t s = 2; s < m.n_slots(); s *= 2) counts.push_back(s);
    counts.push_back(m.n_slots());

    // First round: which shapes fit (rows per pass, context room, time budget) and which thread counts are worth
    // timing. Chain lengths go in the outer loop, so a time budget that runs out leaves every request count its
    // short chains. One row per request keeps the context's count, as plain decoding does (see calibrate_cost).
    std::vector<shape>             shapes;
    std::vector<std::vector<bool>> alive(counts.size(), std::vector<bool>(c.options.size(), true));
    std::vector<bool>              full(counts.size(), false);  // no longer chain fits
    bool                           settled = false;             // the grid agrees with the one-request table
    for (const std::int32_t per : p.per) {
        for (std::size_t b = 0; b < counts.size(); ++b) {
            full[b] = full[b] || counts[b] * per > m.n_rows_max() || c.n_short + per + 1 > m.n_ctx_slot() / 2 ||
                      (per > 1 && now_us() > deadline);
            if (full[b]) continue;
            shape s = c.make(0, counts[b], per);
            for (std::size_t o = 0; o < c.options.size(); ++o) {
                if (alive[b][o] && (o == 0 || per > 1)) s.tried[o] = c.block(s, o);
            }
            if (!s.tried[0]) {  // the memory cannot hold it: nor longer chains
                full[b] = true;
                continue;
            }
            c.drop_slow(s, alive[b], p.drop_slower);
            shapes.push_back(std::move(s));
        }
        // Where llama.cpp's work grows with total rows whatever the sequences (weight-bound models: TinyLlama Q4_0,
        // 4 requests x 2 rows 174 ms, one 8-row chain 178 ms), the one-request table already prices batches: keep
        // the short chains measured, which the prediction extends as that table, and spend no more time.
        settled = per >= 2 && std::all_of(shapes.begin(), shapes.end(), [&](const shape & s) {
                      return std::abs(s.t() / table.predict_us(s.requests * s.rows, 0) - 1) <= p.grid_agree;
                  });
        if (settled) break;
    }
    if (!settled) c.rounds(shapes, p.n_reps, deadline);
    std::stable_sort(shapes.begin(), shapes.end(),
                     [](const shape & a, const shape & b) { return a.requests < b.requests; });
    for (const shape & s : shapes) {
        if (s.rows == 1) table.batches.push_back({s.requests, {}, {}, {}});
        cost_table::batch_costs & bc = table.batches.back();
        bc.per.push_back(s.rows);
        bc.t_us.push_back(s.t());
        bc.threads.push_back(c.options[s.best()]);
    }
    for (std::int32_t k = 0; k < counts.back(); ++k) m.clear(k);
}

}  // namespace rest
