// `rest fixture`: writes a random-weight LLaMA GGUF with a real tokenizer (tests, benchmarks, cost curves).
#include "commands.h"
#include "rest/fixture.h"
#include "rest/llama-model.h"

#include <cstdio>
#include <memory>

void add_fixture_command(CLI::App & root) {
    auto * cmd = root.add_subcommand("fixture", "Write a fixture model: random weights, a real llama.cpp tokenizer");
    auto   p   = std::make_shared<rest::fixture_params>();
    auto   out = std::make_shared<std::string>();
    auto   shape = std::make_shared<std::string>("tiny");
    cmd->add_option("-o,--output", *out, "Output GGUF path")->required();
    cmd->add_option("--shape", *shape, "tiny (defaults below) or tinyllama-1.1b (22 layers, dim 2048, ffn 5632, 32/4 heads)")
        ->check(CLI::IsMember({"tiny", "tinyllama-1.1b"}));
    cmd->add_option("--vocab", p->vocab, "llama.cpp vocabulary name (models/ggml-vocab-NAME.gguf) or a GGUF path")
        ->capture_default_str();
    cmd->add_option("--layers", p->n_layer, "Transformer blocks")
        ->check(CLI::Range(1, 512))  // what llama.cpp loads
        ->capture_default_str();
    cmd->add_option("--embd", p->n_embd, "Embedding width")->capture_default_str();
    cmd->add_option("--heads", p->n_head, "Attention heads")->capture_default_str();
    cmd->add_option("--heads-kv", p->n_head_kv, "KV heads")->capture_default_str();
    cmd->add_option("--ffn", p->n_ff, "Feed-forward width")->capture_default_str();
    cmd->add_option("--ctx", p->n_ctx, "Training context length recorded in the model")->capture_default_str();
    cmd->add_option("--seed", p->seed, "Weight seed")->capture_default_str();
    cmd->add_option("--type", p->type, "f32, f16, q8_0 or q4_0")->capture_default_str();
    cmd->add_option("--output-scale", p->output_scale, "Output matrix scale (peakier logits when larger)")
        ->capture_default_str();
    cmd->callback([=] {
        rest::llama_log_quiet();
        rest::fixture_params params = *p;
        if (*shape == "tinyllama-1.1b") {
            auto big = rest::fixture_params::tinyllama_1b();
            big.vocab = p->vocab;
            big.seed  = p->seed;
            big.type  = cmd->count("--type") ? p->type : big.type;
            params    = big;
        }
        rest::write_fixture_model(*out, params);
        std::printf("wrote %s (%s, %d layers, dim %d, vocab %s)\n", out->c_str(), params.type.c_str(), params.n_layer,
                    params.n_embd, params.vocab.c_str());
    });
}
