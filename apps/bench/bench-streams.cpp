#include "bench-streams.h"

#include "bench-report.h"

#include "rest/drafter.h"
#include "rest/history-store.h"
#include "rest/slot-batch.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>

namespace bench {

namespace {

struct wave_result {
    double                                   seconds = 0;
    std::int64_t                             tokens  = 0;
    std::int64_t                             forwards = 0;  // summed over requests, as each request counts them
    double                                   draft_s  = 0;  // drafting time, all requests
    std::vector<std::vector<rest::token_id>> outputs;       // by prompt index
};

// All prompts through n_streams slots of ctx with continuous batching; spec: REST with a fresh budget and store.
wave_result run_wave(session & s, rest::target_model & ctx, std::int32_t n_streams, bool spec,
                     const streams_params & p) {
    const rest::model &                  m = s.model();
    std::unique_ptr<rest::budget_policy> policy;
    std::unique_ptr<rest::history_store> history;
    const rest::drafter_params &         dp = p.draft;
    std::int32_t                         n_draft_max = 0;
    if (spec) {
        rest::budget_spec spec;
        spec.n_max  = p.n_draft_max >= 0 ? p.n_draft_max : dp.n_budget_max;
        spec.costs  = s.costs();
        n_draft_max = rest::budget_cap(spec);
        policy      = rest::make_budget_policy(spec);
        policy->observe_warm_up(s.warm_rows());
        history     = std::make_unique<rest::history_store>(rest::history_store_params{});
    }
    rest::decoder    dec(ctx, policy.get());
    rest::slot_batch batch(dec, n_streams, ctx.n_rows_max());
    struct slot {
        std::unique_ptr<rest::token_sampler> sampler;
        std::unique_ptr<rest::drafter>       drafter;
        rest::request                        req;
        std::size_t                          prompt = 0;
    };
    std::vector<slot> slots((std::size_t) n_streams);
    std::deque<std::size_t> queue;
    for (std::size_t i = 0; i < p.prompts.size(); ++i) queue.push_back(i);
    wave_result w;
    w.outputs.resize(p.prompts.size());
    auto admit = [&](std::int32_t k) {
        slot & sl = slots[(std::size_t) k];
        sl.prompt = queue.front();
        queue.pop_front();
        sl.sampler = m.new_sampler(rest::sampler_params{});
        sl.drafter = spec ? std::make_unique<rest::drafter>(s.datastore(), history.get(), dp) : nullptr;
        sl.req     = rest::request{};
        sl.req.params.n_predict   = p.n_predict;
        sl.req.params.n_draft_max = n_draft_max;
        sl.req.sampler            = sl.sampler.get();
        sl.req.draft              = sl.drafter.get();
        sl.req.is_eog             = [&m](rest::token_id t) { return m.is_eog(t); };
        batch.start(k, sl.req, p.prompts[sl.prompt]);
    };
    const auto t0 = std::chrono::steady_clock::now();
    while (true) {
        for (std::int32_t k; !queue.empty() && (k = batch.free_slot()) >= 0;) admit(k);
        if (batch.n_busy() == 0) break;
        for (const std::int32_t k : batch.step()) {
            slot & sl = slots[(std::size_t) k];
            if (sl.drafter) sl.drafter->finish();  // into the online store, as the server's engine does
            w.tokens += (std::int64_t) sl.req.output.size();
            w.forwards += sl.req.stats.n_forward;
            w.draft_s += sl.req.stats.t_draft_us * 1e-6;
            w.outputs[sl.prompt] = std::move(sl.req.output);
            batch.release(k);
        }
    }
    w.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return w;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

}  // namespace

void run_streams(session & s, const streams_params & p) {
    const std::int32_t n_slots = s.context().n_slots();
    rest::context_params cp = p.ctx;  // plain: the same slots, context and threads, llama.cpp's default layout
    cp.trees                = false;
    const auto plain_ctx = s.model().new_context(cp);
    if (s.warm_rows() > 0) rest::warm_up(*plain_ctx, 0, {}, 1);  // as the session warmed REST's context
    nlohmann::json rows = nlohmann::json::array();
    std::string md = "| streams | plain tokens/s | REST tokens/s | REST/plain (median of per-rep ratios) | "
                     "tokens/forward | greedy outputs identical |\n|---:|---:|---:|---:|---:|---|\n";
    for (const std::int32_t n : p.streams) {
        if (n < 1 || n > n_slots) {
            throw rest::user_error("--streams: " + std::to_string(n) + " is outside 1.." + std::to_string(n_slots));
        }
        std::vector<double> tps_plain, tps_spec, ratio, m_spec;
        std::size_t         same = 0, total = 0;
        nlohmann::json      reps = nlohmann::json::array();
        for (std::int32_t r = 0; r < p.reps; ++r) {
            wave_result a, b;  // plain, spec; the order alternates so drift hits both alike
            if (r % 2 == 0) {
                a = run_wave(s, *plain_ctx, n, false, p);
                b = run_wave(s, s.context(), n, true, p);
            } else {
                b = run_wave(s, s.context(), n, true, p);
                a = run_wave(s, *plain_ctx, n, false, p);
            }
            tps_plain.push_back((double) a.tokens / a.seconds);
            tps_spec.push_back((double) b.tokens / b.seconds);
            ratio.push_back(tps_spec.back() / tps_plain.back());
            m_spec.push_back((double) b.tokens / (double) std::max<std::int64_t>(1, b.forwards));
            for (std::size_t i = 0; i < a.outputs.size(); ++i) {
                same += a.outputs[i] == b.outputs[i];
                ++total;
            }
            reps.push_back({{"plain_tokens_per_s", tps_plain.back()}, {"rest_tokens_per_s", tps_spec.back()},
                            {"ratio", ratio.back()}, {"rest_tokens_per_forward", m_spec.back()},
                            {"plain_seconds", a.seconds}, {"rest_seconds", b.seconds}, {"rest_draft_seconds", b.draft_s}});
            std::fprintf(stderr, "streams %d rep %d: plain %.0f tok/s, REST %.0f tok/s (x%.3f), M %.2f, drafting %.0f%% of REST's time\n",
                         n, r + 1, tps_plain.back(), tps_spec.back(), ratio.back(), m_spec.back(),
                         100.0 * b.draft_s / b.seconds);
        }
        char line[256];
        std::snprintf(line, sizeof(line), "| %d | %.0f | %.0f | %.3f | %.2f | %zu/%zu |\n", n, median(tps_plain),
                      median(tps_spec), median(ratio), median(m_spec), same, total);
        md += line;
        rows.push_back({{"streams", n}, {"plain_tokens_per_s", median(tps_plain)},
                        {"rest_tokens_per_s", median(tps_spec)}, {"ratio_median", median(ratio)},
                        {"rest_tokens_per_forward", median(m_spec)}, {"identical", same}, {"outputs", total},
                        {"reps", reps}});
    }
    std::fputs(md.c_str(), stdout);
    if (!p.out_dir.empty()) {
        std::ofstream(p.out_dir + "/streams.json") << nlohmann::json{{"rows", rows}, {"n_predict", p.n_predict},
                                                                    {"prompts", p.prompts.size()},
                                                                    {"layout", s.layout()},
                                                                    {"cost_table", cost_table_json(s.costs())}}.dump(1)
                                                   << "\n";
        std::ofstream(p.out_dir + "/streams.md") << md;
    }
}

}  // namespace bench
