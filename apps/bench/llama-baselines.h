// llama.cpp's own decoding, as baselines for `rest bench`: its n-gram speculative drafters (common library) behind
// rest's draft_provider interface, and a plain llama.cpp-API decoding loop. This header never includes llama.h;
// llama-baselines.cpp is the only bench code that does (it is linked into the rest CLI only).
//
// The drafters produce chains that rest's verifier checks, so their M and acceptance are exactly llama.cpp's (the
// same drafts, the same greedy acceptance) while the verification cost is the same as for rest's own methods.
#pragma once

#include "rest/datastore.h"
#include "rest/draft-provider.h"
#include "rest/llama-model.h"
#include "rest/sampler.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bench {

// llama.cpp's static n-gram cache (LLAMA_NGRAM_STATIC-grams, as llama-lookup-create builds it), here built from the
// token text of a datastore so it holds exactly the corpus the rest methods search.
class ngram_static_cache {
  public:
    // Reads every document of every shard. O(corpus tokens).
    explicit ngram_static_cache(const rest::datastore & ds);
    ~ngram_static_cache();
    std::size_t size() const;  // distinct n-grams

    struct impl;
    std::unique_ptr<impl> impl_;
};

struct ngram_params {
    std::int32_t cache_draft_max = 16;  // ngram-cache: tokens per draft (llama-lookup's --spec-draft-n-max)
    std::int32_t simple_size_n = 12;    // ngram-simple: key n-gram length (llama.cpp default)
    std::int32_t simple_size_m = 48;    // ngram-simple: drafted m-gram length (llama.cpp default)
    std::int32_t mod_n_match = 24;      // ngram-mod: key length (llama.cpp default)
    std::int32_t mod_n_min = 48;        // ngram-mod: shortest draft kept (llama.cpp default)
    std::int32_t mod_n_max = 64;        // ngram-mod: longest draft (llama.cpp default)
};

// kind: "ngram-cache" (llama-lookup's three caches: this request's context, a dynamic cache of the earlier requests'
// context caches, and the static cache), "ngram-cache-nostatic" (the same without a static cache, as llama-server's
// ngram-cache type runs without a lookup-cache file), or one of llama.cpp's common_speculative types: "ngram-simple",
// "ngram-mod", "ngram-map-k", "ngram-map-k4v". static_cache may be null (ngram-cache then drafts from its context
// and dynamic caches alone); it must outlive the drafter. Throws rest::user_error for an unknown kind.
std::unique_ptr<rest::draft_provider> make_llama_drafter(const std::string & kind, const ngram_params & params,
                                                         const ngram_static_cache * static_cache);

bool is_llama_drafter(const std::string & kind);

struct plain_result {
    std::vector<rest::token_id> tokens;
    std::int64_t n_forward = 0;  // llama_decode calls, the prompt's included
    double       t_prefill_us = 0;
    double       t_total_us = 0;
};

// Plain decoding through the llama.cpp API alone: its own model load, context (llama.cpp's default context
// parameters with the same n_ctx, batch and threads as rest's), llama_decode one token at a time and llama.cpp's
// sampler (greedy, or the same chain rest uses). The prompt is processed as rest does it: all but its last token
// first, then one token per forward pass.
class llama_plain {
  public:
    // n_gpu_layers and the KV cache types as rest's own context has them, so that both baselines run alike.
    llama_plain(const std::string & model_path, std::int32_t n_ctx, std::int32_t n_batch, std::int32_t n_threads,
                std::int32_t n_gpu_layers, const rest::context_params & types);
    ~llama_plain();
    plain_result run(const std::vector<rest::token_id> & prompt, std::int32_t n_predict,
                     const rest::sampler_params & sampling);

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace bench
