#include "bench-report.h"

#include "rest/types.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace bench {

namespace {

const double k_nan = std::numeric_limits<double>::quiet_NaN();

// Linear-interpolated quantile of the finite values (NaN when there are none).
double quantile(std::vector<double> v, double q) {
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    if (v.empty()) return k_nan;
    std::sort(v.begin(), v.end());
    const double pos = q * (double) (v.size() - 1);
    const size_t lo  = (size_t) pos;
    const size_t hi  = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - (double) lo);
}

double decode_us(const rest::generation_stats & s) {
    return s.t_total_us - s.t_prefill_us;
}

double ms_per_token(const rest::generation_stats & s) {
    return s.n_tokens ? decode_us(s) / 1000.0 / (double) s.n_tokens : k_nan;
}

void add_hist(std::vector<std::int64_t> & into, const std::vector<std::int64_t> & h) {
    if (into.size() < h.size()) into.resize(h.size(), 0);
    for (size_t i = 0; i < h.size(); ++i) into[i] += h[i];
}

nlohmann::json num(double x) {
    return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

std::string fmt(const char * f, double x) {
    if (!std::isfinite(x)) return "-";
    char buf[64];
    std::snprintf(buf, sizeof(buf), f, x);
    return buf;
}

}  // namespace

void judge_case(std::vector<bench_cell> & row, int reference, method_runner & plain,
                std::span<const rest::token_id> prompt, std::int32_t n_predict) {
    if (reference < 0 || !row[(size_t) reference].ran) return;
    const method_run & ref = row[(size_t) reference].run;
    if (ref.top2_gaps.size() != ref.tokens.size() || ref.runner_up.size() != ref.tokens.size()) return;  // sampled
    const rest::plain_trace trace{ref.tokens, ref.runner_up, ref.top2_gaps};
    const rest::plain_resume resume = [&](std::span<const rest::token_id> prefix) {
        return plain.resume_greedy(prompt, n_predict, prefix);
    };
    for (size_t m = 0; m < row.size(); ++m) {
        if (!row[m].ran || (int) m == reference) continue;
        row[m].verdict = rest::compare_to_plain(trace, row[m].run.tokens, k_near_tie_eps, resume);
        row[m].judged  = true;
    }
}

std::vector<method_summary> summarize(const std::vector<method_spec> & methods, const std::vector<bench_case> & cases,
                                      const std::vector<std::vector<bench_cell>> & cells, int reference) {
    std::vector<method_summary> out(methods.size());
    for (size_t m = 0; m < methods.size(); ++m) {
        method_summary & s = out[m];
        s.name             = methods[m].name;
        std::vector<double> mspt, Ms;
        double              dec_us = 0, ref_us = 0, cmp_us = 0, draft_us = 0;
        for (size_t c = 0; c < cases.size(); ++c) {
            const bench_cell & cell = cells[c][m];
            if (!cell.ran) {
                s.speedups.push_back(k_nan);
                s.first_diff.push_back(-1);
                s.diff_gap.push_back(k_nan);
                continue;
            }
            const auto & st = cell.run.stats;
            ++s.n_cases;
            s.n_tokens += st.n_tokens;
            s.n_forward += st.n_forward;
            s.n_steps += st.n_steps;
            s.n_drafted += st.n_drafted;
            s.n_accepted += st.n_accepted;
            s.n_prediction_accepted += st.n_prediction_accepted;
            s.n_recomputed += st.n_recomputed;
            s.n_prediction_rejected += st.n_prediction_rejected;
            dec_us += decode_us(st);
            draft_us += st.t_draft_us;
            add_hist(s.accept_hist, st.accept_hist);
            add_hist(s.budget_hist, st.budget_hist);
            mspt.push_back(ms_per_token(st));
            Ms.push_back(st.n_forward ? (double) st.n_tokens / (double) st.n_forward : k_nan);
            double       sp   = k_nan;
            std::int32_t diff = -1;
            double       gap  = k_nan;
            if (reference >= 0 && cells[c][reference].ran) {
                const auto & ref = cells[c][reference].run;
                sp               = ms_per_token(ref.stats) / ms_per_token(st);
                ref_us += decode_us(ref.stats);
                cmp_us += decode_us(st);
                ++s.n_compared;
                if (cell.judged) {
                    const rest::exactness_verdict & v = cell.verdict;
                    s.n_equal += v.exact();
                    s.n_near_tie += v.ok && !v.exact();
                    s.n_near_tie_divergences += v.near_ties;
                    diff = v.first_divergence;
                    gap  = v.gap_at_first >= 0 ? v.gap_at_first : k_nan;
                } else {  // sampled: same-seed identity, token for token
                    const auto & a = ref.tokens;
                    const auto & b = cell.run.tokens;
                    const auto   mm = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
                    if (mm.first == a.end() && mm.second == b.end()) {
                        ++s.n_equal;
                    } else {
                        diff = (std::int32_t) (mm.first - a.begin());
                    }
                }
            }
            s.speedups.push_back(sp);
            s.first_diff.push_back(diff);
            s.diff_gap.push_back(gap);
        }
        s.M                   = s.n_forward ? (double) s.n_tokens / (double) s.n_forward : 0;
        double sumM           = 0;
        size_t nM             = 0;
        for (double x : Ms) {
            if (std::isfinite(x)) { sumM += x; ++nM; }
        }
        s.M_prompt_mean       = nM ? sumM / (double) nM : k_nan;
        s.ms_per_token        = quantile(mspt, 0.5);
        s.ms_per_token_total  = s.n_tokens ? dec_us / 1000.0 / (double) s.n_tokens : k_nan;
        s.speedup_median      = quantile(s.speedups, 0.5);
        s.speedup_p25         = quantile(s.speedups, 0.25);
        s.speedup_p75         = quantile(s.speedups, 0.75);
        s.speedup_min         = quantile(s.speedups, 0.0);
        s.speedup_max         = quantile(s.speedups, 1.0);
        s.speedup_total       = cmp_us > 0 && ref_us > 0 ? ref_us / cmp_us : k_nan;
        s.t_draft_ms_per_step = s.n_steps ? draft_us / 1000.0 / (double) s.n_steps : k_nan;
        s.accepted_per_step   = s.n_steps ? (double) s.n_accepted / (double) s.n_steps : k_nan;
    }
    return out;
}

std::string markdown_table(const std::vector<method_summary> & sums, const nlohmann::json & meta) {
    std::ostringstream o;
    o << "| method | M (tokens/forward) | M, prompt mean | ms/token (median) | tokens/s | speedup median "
         "[p25-p75] | speedup, total time | draft ms/step | accepted/step | output = plain |\n";
    o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto & s : sums) {
        o << "| " << s.name << " | " << fmt("%.2f", s.M) << " | " << fmt("%.2f", s.M_prompt_mean) << " | "
          << fmt("%.3f", s.ms_per_token) << " | " << fmt("%.0f", 1000.0 / s.ms_per_token_total) << " | "
          << fmt("%.2fx", s.speedup_median) << " [" << fmt("%.2f", s.speedup_p25) << "-"
          << fmt("%.2f", s.speedup_p75) << "] | " << fmt("%.2fx", s.speedup_total) << " | "
          << fmt("%.3f", s.t_draft_ms_per_step) << " | " << fmt("%.2f", s.accepted_per_step) << " | "
          << s.n_equal << "/" << s.n_compared;
        if (s.n_near_tie > 0) o << " (+" << s.n_near_tie << " near-tie)";
        if (s.n_compared - s.n_equal - s.n_near_tie > 0) o << " **" << s.n_compared - s.n_equal - s.n_near_tie << " DIFFER**";
        o << " |\n";
    }
    o << "\n";
    bool predicted = false;
    for (const auto & s : sums) predicted = predicted || s.n_prediction_accepted + s.n_prediction_rejected > 0;
    if (predicted) {
        o << "| method | prediction tokens accepted | rejected |\n|---|---:|---:|\n";
        for (const auto & s : sums) {
            if (s.n_prediction_accepted + s.n_prediction_rejected == 0) continue;
            o << "| " << s.name << " | " << s.n_prediction_accepted << " | " << s.n_prediction_rejected << " |\n";
        }
        o << "\n";
    }
    o << "M: generated tokens / target forward passes, the prompt's included. Speedup: plain's decode ms/token over "
         "the method's, per prompt. output = plain: prompts whose greedy output equals plain's token for token; "
         "+N near-tie: prompts that differ only where plain's top two logits are within 0.01 and the method took "
         "plain's runner-up, each checked against plain resumed from the method's prefix (float rounding of batched "
         "decodes); DIFFER: any other difference.\n\n";
    if (meta.contains("summary_line")) {
        o << meta["summary_line"].get<std::string>() << "\n";
    }
    return o.str();
}

nlohmann::json results_json(const std::vector<method_summary> & sums, const std::vector<method_spec> & methods,
                            const std::vector<bench_case> & cases, const std::vector<std::vector<bench_cell>> & cells,
                            const rest::cost_table & costs, const nlohmann::json & meta) {
    nlohmann::json j = meta;
    nlohmann::json jm = nlohmann::json::array();
    for (const auto & s : sums) {
        nlohmann::json x;
        x["name"]                = s.name;
        x["n_cases"]             = s.n_cases;
        x["n_tokens"]            = s.n_tokens;
        x["n_forward"]           = s.n_forward;
        x["n_steps"]             = s.n_steps;
        x["n_drafted"]           = s.n_drafted;
        x["n_accepted"]          = s.n_accepted;
        x["accepted_prediction_tokens"] = s.n_prediction_accepted;
        x["n_recomputed"]        = s.n_recomputed;
        x["rejected_prediction_tokens"] = s.n_prediction_rejected;
        x["M"]                   = num(s.M);
        x["M_prompt_mean"]       = num(s.M_prompt_mean);
        x["ms_per_token_median"] = num(s.ms_per_token);
        x["ms_per_token_total"]  = num(s.ms_per_token_total);
        x["tokens_per_second"]   = num(1000.0 / s.ms_per_token_total);
        x["speedup_median"]      = num(s.speedup_median);
        x["speedup_p25"]         = num(s.speedup_p25);
        x["speedup_p75"]         = num(s.speedup_p75);
        x["speedup_min"]         = num(s.speedup_min);
        x["speedup_max"]         = num(s.speedup_max);
        x["speedup_total"]       = num(s.speedup_total);
        x["t_draft_ms_per_step"] = num(s.t_draft_ms_per_step);
        x["accepted_per_step"]   = num(s.accepted_per_step);
        x["accept_hist"]         = s.accept_hist;
        x["budget_hist"]         = s.budget_hist;
        x["n_equal_plain"]       = s.n_equal;
        x["n_compared"]          = s.n_compared;
        x["n_near_tie"]          = s.n_near_tie;
        x["n_near_tie_divergences"] = s.n_near_tie_divergences;
        x["output_equals_plain"] = s.n_compared > 0 && s.n_equal == s.n_compared;
        x["output_equals_plain_but_near_ties"] = s.n_compared > 0 && s.n_equal + s.n_near_tie == s.n_compared;
        nlohmann::json sp        = nlohmann::json::array();
        for (double v : s.speedups) sp.push_back(num(v));
        x["speedup_per_case"]    = sp;
        x["first_diff_per_case"] = s.first_diff;
        nlohmann::json gp        = nlohmann::json::array();
        for (double v : s.diff_gap) gp.push_back(num(v));
        x["plain_top2_gap_at_diff_per_case"] = gp;
        jm.push_back(std::move(x));
    }
    j["methods"] = jm;
    nlohmann::json jc = nlohmann::json::array();
    for (size_t c = 0; c < cases.size(); ++c) {
        nlohmann::json x;
        x["prompt"]   = cases[c].prompt;
        x["turn"]     = cases[c].turn;
        x["n_prompt"] = cases[c].n_prompt;
        nlohmann::json per;
        for (size_t m = 0; m < methods.size(); ++m) {
            const bench_cell & cell = cells[c][m];
            if (!cell.ran) continue;
            const auto & st = cell.run.stats;
            per[methods[m].name] = {
                {"n_tokens", st.n_tokens},
                {"n_forward", st.n_forward},
                {"t_prefill_ms", st.t_prefill_us / 1000.0},
                {"t_total_ms", st.t_total_us / 1000.0},
                {"t_draft_ms", st.t_draft_us / 1000.0},
                {"t_verify_ms", st.t_verify_us / 1000.0},
                {"stop", cell.run.stop},
            };
        }
        x["methods"] = per;
        jc.push_back(std::move(x));
    }
    j["cases"]      = jc;
    j["cost_table"] = cost_table_json(costs);
    return j;
}

nlohmann::json cost_table_json(const rest::cost_table & costs) {
    nlohmann::json jt;
    jt["rows"]       = costs.rows;
    jt["t_us"]       = costs.t_us;
    jt["attn_us"]    = costs.attn_us;
    jt["rebuild_us"] = costs.rebuild_us;
    jt["threads"]    = costs.threads;
    jt["batches"]    = nlohmann::json::array();
    for (const auto & b : costs.batches) {
        jt["batches"].push_back({{"requests", b.requests}, {"rows_per_request", b.per}, {"t_us", b.t_us},
                                 {"threads", b.threads}});
    }
    return jt;
}

void write_result_file(const std::string & dir, const std::string & name, const std::string & text) {
    const std::string path = dir + "/" + name;
    errno                  = 0;
    std::ofstream f(path);
    f << text;
    f.close();
    if (f.fail()) {  // a full disk shows at the write or the close, not at open: the file would be left empty
        throw rest::user_error("cannot write '" + path + "'" + (errno ? std::string(": ") + std::strerror(errno) : ""));
    }
}

void write_plot_tables(const std::string & dir, const std::vector<method_summary> & sums,
                       const rest::cost_table & costs) {
    {
        std::ostringstream f;
        f << "# method\tmedian\tp25\tp75\tmin\tmax\tM\n";
        for (const auto & s : sums) {
            f << s.name << "\t" << s.speedup_median << "\t" << s.speedup_p25 << "\t" << s.speedup_p75 << "\t"
              << s.speedup_min << "\t" << s.speedup_max << "\t" << s.M << "\n";
        }
        write_result_file(dir, "speedup.tsv", f.str());
    }
    {
        // Fraction of steps that accepted k draft tokens (k = 0 .. 15, the last row: 15 or more), one column per
        // method; llama-plain and plain only have k = 0 and are left out.
        constexpr int      k_max = 16;
        std::ostringstream f;
        std::vector<const method_summary *> cols;
        for (const auto & s : sums) {
            if (s.n_drafted > 0) cols.push_back(&s);
        }
        f << "k";
        for (const auto * s : cols) f << "\t" << s->name;
        f << "\n";
        for (int k = 0; k < k_max; ++k) {
            f << (k == k_max - 1 ? std::to_string(k) + "+" : std::to_string(k));
            for (const auto * s : cols) {
                std::int64_t n = 0, tot = 0;
                for (size_t i = 0; i < s->accept_hist.size(); ++i) {
                    tot += s->accept_hist[i];
                    if ((int) i == k || (k == k_max - 1 && (int) i >= k)) n += s->accept_hist[i];
                }
                f << "\t" << (tot ? (double) n / (double) tot : 0.0);
            }
            f << "\n";
        }
        write_result_file(dir, "accept.tsv", f.str());
    }
    {
        std::ostringstream f;
        f << "# rows\tt_ms\tt_over_t1\n";
        for (size_t i = 0; i < costs.rows.size() && i < costs.t_us.size(); ++i) {
            f << costs.rows[i] << "\t" << costs.t_us[i] / 1000.0 << "\t" << costs.t_us[i] / costs.t_us[0] << "\n";
        }
        write_result_file(dir, "cost.tsv", f.str());
    }
}

}  // namespace bench
