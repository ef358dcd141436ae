// The decoding methods `rest bench` compares, all on one loaded model. The drafting methods share one context laid
// out for trees; plain has a plain context (as `rest generate --no-spec` does), and llama-plain is llama.cpp's own
// loop on its own context.
//
//   plain              sequential decoding through rest's decoder (the baseline every speedup divides)
//   llama-plain        llama.cpp's own plain loop (the honest-baseline check: rest's plain must not be slow)
//   rest               datastore + context + past outputs, automatic budget (the cost model)
//   rest-datastore     the datastore alone;  rest-context: the context alone;  rest-history: past outputs alone
//   <rest method>@N    the same with a fixed budget of N draft nodes every step (REST-style; for comparisons)
//   <llama.cpp type>@N at most N draft tokens a step (ngram-cache@N: llama-lookup's --spec-draft-n-max N), so one
//                      run holds each type at several caps (issue 23's panel compares each at its best)
//   rest+pred          rest with a predicted output (the edit workload, edit-workload.h): plain's own greedy output
//                      for the prompt; rest+pred-eK: with K random edits per 128 tokens; rest+pred-unrelated: the
//                      output for another prompt (the next record's)
//   ngram-cache        llama-lookup's drafter: static cache from the datastore's corpus + context cache + dynamic
//                      cache of earlier requests; ngram-cache-nostatic: without the static cache (llama-server's
//                      ngram-cache type without a lookup-cache file)
//   ngram-simple, ngram-mod, ngram-map-k, ngram-map-k4v: llama.cpp's common_speculative types (server defaults)
//
// Every method except llama-plain is verified by rest's verifier, so llama.cpp's drafters are measured with the
// same verification cost as rest's own. Each rest method has its own budget policy and its own history store:
// no method sees another's outputs, and a method's history holds only earlier prompts.
#pragma once

#include "rest/exactness.h"
#include "rest/llama-model.h"

#include "../session.h"
#include "llama-baselines.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

struct method_spec {
    enum class kind { plain, llama_plain, rest, llama_drafter };
    std::string  name;
    kind         type = kind::plain;
    bool         use_datastore = false;
    bool         use_context = false;
    bool         use_history = false;
    std::int32_t n_fixed = -1;  // rest: >= 0 verifies exactly this many nodes per step; llama.cpp's: its draft cap
    std::string  drafter;       // llama.cpp's drafters: the type, without @N
    std::int32_t pred_edits = -1;  // rest+pred: edits per 128 tokens of the prediction (-1: no prediction)
    bool         pred_unrelated = false;  // rest+pred-unrelated
    bool has_prediction() const { return pred_edits >= 0 || pred_unrelated; }
};

// Parses "plain,rest,rest@8,ngram-cache,...". Throws rest::user_error naming an unknown method.
std::vector<method_spec> parse_methods(const std::string & list);

struct method_config {
    rest::drafter_params draft;            // rest's drafter settings
    std::int32_t         n_draft_max = -1; // rest: cap on nodes per step (-1: draft.n_budget_max)
    std::int32_t         n_llama_draft_max = 64;  // llama.cpp drafters: most draft tokens per step
    ngram_params         ngram;
    std::string          model_path;       // for llama-plain
    std::int32_t         n_batch = 512;
    std::int32_t         n_threads = 0;
    std::int32_t         n_gpu_layers = 0;     // for llama-plain (rest's context has the session's)
    rest::context_params ctx;              // the session's context settings; plain gets its own plain context
};

struct method_run {
    std::vector<rest::token_id> tokens;
    rest::generation_stats      stats;
    std::string                 stop;
    std::vector<float>          top2_gaps;  // plain, greedy: logit gap between the top two tokens at each emitted token
    std::vector<rest::token_id> runner_up;  // plain, greedy: the second-best token at each emitted token
};

class method_runner {
  public:
    virtual ~method_runner() = default;
    // prediction: a predicted output, used by the methods that draft from one (the others ignore it).
    virtual method_run run(std::span<const rest::token_id> prompt, std::int32_t n_predict,
                           const rest::sampler_params & sampling, std::span<const rest::token_id> prediction = {}) = 0;
    // Plain greedy decoding resumed after prefix (rest::resume_plain_greedy): only the plain method has it.
    virtual rest::plain_trace resume_greedy(std::span<const rest::token_id> prompt, std::int32_t n_predict,
                                            std::span<const rest::token_id> prefix) {
        (void) prompt, (void) n_predict, (void) prefix;
        throw std::logic_error("only the plain method resumes plain decoding");
    }
};

// static_cache is needed by ngram-cache only (may be null otherwise).
std::unique_ptr<method_runner> make_runner(const method_spec & spec, session & s, const method_config & cfg,
                                           const ngram_static_cache * static_cache);

}  // namespace bench
