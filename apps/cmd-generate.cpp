// `rest generate`: plain or speculative generation for one prompt or a prompt set, streaming or --json.
#include "commands.h"
#include "prompts.h"
#include "session.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace {

struct generate_args {
    session_params       sp;
    std::string          prompt;
    std::string          file;
    std::string          field = "prompt";
    std::string          prediction_file;   // one predicted output for every prompt
    std::string          prediction_field;  // or each JSON record's own
    std::int32_t         n_predict = 128;
    rest::sampler_params sampling;
    bool                 json = false;
    bool                 no_spec = false;
};

nlohmann::json stats_json(const run_result & r, const rest::tokenizer & tok) {
    const auto &   s      = r.stats;
    const double   gen_us = s.t_total_us - s.t_prefill_us;
    nlohmann::json j;
    j["text"]               = tok.detokenize(r.tokens);
    j["tokens"]             = r.tokens;
    j["n_tokens"]           = s.n_tokens;
    j["n_prompt"]           = s.n_prompt;
    j["n_forward"]          = s.n_forward;
    j["n_steps"]            = s.n_steps;
    j["tokens_per_forward"] = s.tokens_per_forward();
    j["ms_per_token"]       = s.n_tokens ? gen_us / 1000.0 / (double) s.n_tokens : 0.0;
    j["tokens_per_second"]  = gen_us > 0 ? (double) s.n_tokens * 1e6 / gen_us : 0.0;
    j["n_drafted"]          = s.n_drafted;
    j["n_accepted"]         = s.n_accepted;
    j["accepted_prediction_tokens"] = s.n_prediction_accepted;
    j["n_recomputed"]       = s.n_recomputed;
    j["rejected_prediction_tokens"] = s.n_prediction_rejected;
    j["accept_hist"]        = s.accept_hist;
    j["budget_hist"]        = s.budget_hist;
    j["t_prefill_ms"]       = s.t_prefill_us / 1000.0;
    j["t_draft_ms"]         = s.t_draft_us / 1000.0;
    j["t_verify_ms"]        = s.t_verify_us / 1000.0;
    j["t_sample_ms"]        = s.t_sample_us / 1000.0;
    j["t_total_ms"]         = s.t_total_us / 1000.0;
    j["stop_reason"]        = rest::stop_reason_name(r.stopped);
    return j;
}

std::string prediction_note(const rest::generation_stats & s) {
    if (s.n_prediction_accepted + s.n_prediction_rejected == 0) return "";
    return ", prediction " + std::to_string(s.n_prediction_accepted) + " accepted / " +
           std::to_string(s.n_prediction_rejected) + " rejected";
}

// One record: its continuation on stdout (after the prompt itself when echo), its statistics added to total.
void run_record(const generate_args & a, session & s, const prompt_record & rec, bool echo,
                rest::generation_stats & total) {
    const auto & tok = s.model().vocab();
    const auto tokens = s.tokenize_prompt(rec.turns.front());
    run_options opt;
    opt.n_predict = a.n_predict;
    opt.speculate = !a.no_spec;
    opt.sampling  = a.sampling;
    if (!rec.prediction.empty()) opt.prediction = s.tokenize_prediction(rec.prediction);
    // One prompt is echoed before its continuation, once the first token comes: a prompt the context cannot
    // hold then gives its error alone, not after the whole prompt (or a binary given as -f) on stdout.
    const auto echo_prompt = [&echo, &rec] {
        if (echo) std::fputs(rec.turns.front().c_str(), stdout);
        echo = false;
    };
    if (!a.json) {
        opt.on_token = [&tok, &echo_prompt](rest::token_id t) {
            echo_prompt();
            const std::string piece = tok.piece(t);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return !std::ferror(stdout);  // output that goes nowhere ends the record (run_generate reports it)
        };
    }
    run_result r = s.run(tokens, opt);
    echo_prompt();  // nothing was generated
    if (a.json) {
        // Random or small models can emit partial UTF-8 sequences: replace them rather than fail the dump.
        nlohmann::json j   = stats_json(r, tok);
        j["prompt_tokens"] = tokens;  // prompt_tokens + tokens: the exact sequence (a datastore of own outputs)
        std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::fputs("\n", stdout);
    }
    std::fflush(stdout);
    total.add(r.stats);
}

void run_generate(const generate_args & a) {
    if (a.prompt.empty() == a.file.empty()) {
        throw rest::user_error("give exactly one of -p TEXT or -f FILE");
    }
    rest::check_sampler_params(a.sampling);  // before the model loads and a first run measures its costs
    if (!a.prediction_file.empty() && !a.prediction_field.empty()) {
        throw rest::user_error("give at most one of --prediction-file and --prediction-field");
    }
    if (!a.prediction_field.empty() && a.file.empty()) {
        throw rest::user_error("--prediction-field reads the records of -f FILE; give -f");
    }
    if (a.no_spec && (!a.prediction_file.empty() || !a.prediction_field.empty())) {
        std::fprintf(stderr, "rest: warning: a prediction only drafts tokens; with --no-spec it is not used\n");
    }
    // With --no-spec a prediction is not read at all, so it cannot fail a run it does not serve.
    const std::string          pred_field = a.no_spec ? "" : a.prediction_field;
    std::vector<prompt_record> prompts =
        a.file.empty() ? std::vector<prompt_record>{{{a.prompt}, {}}} : read_prompt_file(a.file, a.field, pred_field);
    if (!a.prediction_file.empty() && !a.no_spec) {
        const std::string text = read_text_file(a.prediction_file);
        for (auto & rec : prompts) rec.prediction = text;
    }
    session_params sp = a.sp;
    sp.speculate      = !a.no_spec;
    session s(sp);

    rest::generation_stats total;
    if (std::any_of(prompts.begin(), prompts.end(), [](const prompt_record & r) { return r.turns.size() > 1; })) {
        std::fprintf(stderr, "rest: warning: %s has records of several turns: generate runs each record's first "
                     "(rest bench runs them all)\n", a.file.c_str());
    }
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        // A record that fails (a prompt the context cannot hold) ends the run naming it; those before it are out.
        const auto at = [&a, i](const std::string & what) {
            return a.file.empty() ? what : a.file + ": record " + std::to_string(i + 1) + ": " + what;
        };
        try {
            run_record(a, s, prompts[i], !a.json && prompts.size() == 1, total);
        } catch (const rest::user_error & e) {
            throw rest::user_error(at(e.what()));
        }
        if (std::ferror(stdout)) {  // a full disk or /dev/full: stop here rather than generate for nothing
            throw rest::user_error(at(std::string("writing the output failed: ") + std::strerror(errno)));
        }
    }
    s.save_learned();
    const double gen_us = total.t_total_us - total.t_prefill_us;
    std::fprintf(stderr,
                 "rest: %lld tokens in %.1f ms (%.1f tok/s), %lld forward passes, %.2f tokens/forward, "
                 "%lld/%lld draft tokens accepted%s%s\n",
                 (long long) total.n_tokens, gen_us / 1000.0, gen_us > 0 ? total.n_tokens * 1e6 / gen_us : 0.0,
                 (long long) total.n_forward, total.tokens_per_forward(), (long long) total.n_accepted,
                 (long long) total.n_drafted, a.no_spec ? " (--no-spec)" : "",
                 prediction_note(total).c_str());
}

}  // namespace

void add_generate_command(CLI::App & root) {
    auto * cmd = root.add_subcommand("generate", "Generate text, with REST speculation (lossless) or plain decoding");
    auto   a   = std::make_shared<generate_args>();
    cmd->add_option("-m,--model", a->sp.model_path, "GGUF model")->required();
    cmd->add_option("-p,--prompt", a->prompt, "Prompt text");
    cmd->add_option("-f,--file", a->file, "Prompt file: text (one prompt), or .jsonl/.json records (see --field)");
    cmd->add_option("--field", a->field, "Dotted field of each JSONL record holding the prompt")->capture_default_str();
    cmd->add_option("--prediction-file", a->prediction_file,
                    "Predicted output (text the output is expected to repeat, with edits): drafts from it, output unchanged");
    cmd->add_option("--prediction-field", a->prediction_field, "Dotted field of each JSONL record holding its predicted output");
    cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate (-1: until end of generation)")
        ->check(CLI::Range(-1, INT32_MAX))
        ->capture_default_str();
    cmd->add_option("-c,--ctx-size", a->sp.ctx.n_ctx, "Context size (0: model's, capped at 4096)")->capture_default_str();
    cmd->add_option("-t,--threads", a->sp.ctx.n_threads, "CPU threads (0: all)")->capture_default_str();
    cmd->add_option("-b,--batch-size", a->sp.ctx.n_batch, "Most tokens per forward pass")->capture_default_str();
    add_offload_options(cmd, a->sp.n_gpu_layers, a->sp.rpc_servers);
    cmd->add_option("--temp", a->sampling.temp, "Temperature (0: greedy)")->capture_default_str();
    cmd->add_option("--top-k", a->sampling.top_k, "Top-k (0: off)")->capture_default_str();
    cmd->add_option("--top-p", a->sampling.top_p, "Top-p (1: off)")->capture_default_str();
    cmd->add_option("--min-p", a->sampling.min_p, "Min-p (0: off)")->capture_default_str();
    cmd->add_option("--repeat-penalty", a->sampling.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
    cmd->add_option("--presence-penalty", a->sampling.presence_penalty, "Presence penalty")->capture_default_str();
    add_seed_option(cmd, a->sampling.seed, "Sampling seed (-1 or 4294967295: random)");
    add_index_option(cmd, a->sp.index_paths);
    cmd->add_option("--draft-max", a->sp.n_draft_max,
                    "Cap on draft nodes per step; the cost model picks each step's budget below it (-1: 64)")
        ->check(draft_nodes_range())
        ->capture_default_str();
    cmd->add_option("--draft-fixed", a->sp.n_draft_fixed,
                    "Verify exactly this many draft nodes every step, each pass on the thread count measured fastest "
                    "for it (for comparisons)")
        ->check(draft_nodes_range());
    add_verify_options(cmd, a->sp);
    cmd->add_flag("--verbose", a->sp.verbose, "Print the measured verify cost");
    cmd->add_flag("--no-spec", a->no_spec, "Plain decoding (no speculation)");
    add_warm_up_option(cmd, a->sp.warm_up);
    cmd->add_flag("--no-warm-start", [a](std::int64_t) { a->sp.warm_start = false; },
                  "Start the automatic budget cold: neither read nor write what earlier runs learned");
    cmd->add_flag("--json", a->json, "Print one JSON object per prompt (text, tokens, stats)");
    cmd->callback([a] { run_generate(*a); });
}
