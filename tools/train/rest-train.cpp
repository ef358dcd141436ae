// rest-train: `vocab`, `init`, `train`, `tokens`, `import`, `eval` and `quantize`, the C++ steps of
// scripts/train-demo-model.sh.
#include "train.h"

#include "rest/fixture.h"
#include "rest/types.h"

#include <CLI/CLI.hpp>

#include <cstdio>

int main(int argc, char ** argv) {
    CLI::App app{"rest-train: train the rest.cpp demo model from scratch (see scripts/train-demo-model.sh)"};
    app.require_subcommand(1);

    auto * vocab = app.add_subcommand("vocab", "Write an SPM tokenizer GGUF from a sentencepiece .model");
    std::string spm_model, vocab_out;
    vocab->add_option("--spm", spm_model, "sentencepiece model (spm_train --model_type=bpe)")->required();
    vocab->add_option("-o,--output", vocab_out, "Output GGUF (tokenizer keys only)")->required();
    vocab->callback([&] {
        rest::train::write_spm_vocab(spm_model, vocab_out);
        std::printf("wrote %s\n", vocab_out.c_str());
    });

    auto * init = app.add_subcommand("init", "Write a random-init f32 LLaMA GGUF with the given vocabulary");
    rest::fixture_params fp;
    fp.type         = "f32";
    fp.output_scale = 0.1f;  // near-uniform initial predictions: initial loss ~ ln(n_vocab)
    std::string init_out;
    init->add_option("--vocab", fp.vocab, "Vocabulary GGUF (from `rest-train vocab`)")->required();
    init->add_option("-o,--output", init_out, "Output GGUF")->required();
    init->add_option("--layers", fp.n_layer, "Transformer blocks")->capture_default_str();
    init->add_option("--embd", fp.n_embd, "Embedding width")->capture_default_str();
    init->add_option("--heads", fp.n_head, "Attention heads")->capture_default_str();
    init->add_option("--heads-kv", fp.n_head_kv, "KV heads")->capture_default_str();
    init->add_option("--ffn", fp.n_ff, "Feed-forward width")->capture_default_str();
    init->add_option("--ctx", fp.n_ctx, "Context length")->capture_default_str();
    init->add_option("--seed", fp.seed, "Weight seed")->capture_default_str();
    init->add_option("--output-scale", fp.output_scale, "Output matrix init scale")->capture_default_str();
    // The fixture draws token embeddings with standard deviation 1, made for inference tests; Adam moves each
    // weight by about lr per step, so from-scratch training wants them at the scale of the other matrices.
    float embd_std = 0.02f;
    init->add_option("--embd-std", embd_std, "Token embedding init standard deviation")->capture_default_str();
    init->callback([&] {
        rest::write_fixture_model(init_out, fp);
        rest::train::rescale_tensor(init_out, "token_embd.weight", embd_std);
        std::printf("wrote %s\n", init_out.c_str());
    });

    auto * train = app.add_subcommand("train", "Train with llama.cpp's AdamW (llama_opt_epoch), checkpointing");
    rest::train::train_params tp;
    train->add_option("-m,--model", tp.model, "f32 GGUF to start from")->required();
    train->add_option("-o,--output", tp.out, "Trained f32 GGUF (rewritten at each checkpoint)")->required();
    train->add_option("--train-files", tp.train_files, "File listing training sources, one a line")->required();
    train->add_option("--heldout-files", tp.heldout_files, "File listing held-out sources");
    train->add_option("--log", tp.log_path, "Per-step TSV log")->required();
    train->add_option("--ctx", tp.n_ctx, "Tokens per sequence (= per optimizer step)")->capture_default_str();
    train->add_option("-t,--threads", tp.n_threads, "CPU threads")->capture_default_str();
    train->add_option("--steps", tp.steps, "Optimizer steps")->capture_default_str();
    train->add_option("--warmup", tp.warmup, "Warm-up steps")->capture_default_str();
    train->add_option("--lr", tp.lr, "Peak learning rate")->capture_default_str();
    train->add_option("--lr-min", tp.lr_min, "Final learning rate (cosine)")->capture_default_str();
    train->add_option("--wd", tp.wd, "AdamW weight decay")->capture_default_str();
    train->add_option("--beta2", tp.beta2, "AdamW beta2")->capture_default_str();
    train->add_option("--eval-every", tp.eval_every, "Steps between held-out evals/checkpoints")->capture_default_str();
    train->add_option("--eval-seqs", tp.eval_seqs, "Held-out sequences per periodic eval")->capture_default_str();
    train->add_option("--max-minutes", tp.max_minutes, "Stop early after this many minutes (0: never)")
        ->capture_default_str();
    train->add_option("--seed", tp.seed, "Sampling seed")->capture_default_str();
    train->callback([&] { rest::train::train_model(tp); });

    auto * check = app.add_subcommand("check", "Check that the model's tokenizer round-trips the listed files");
    std::string c_model, c_files;
    check->add_option("-m,--model", c_model, "GGUF with the tokenizer")->required();
    check->add_option("--files", c_files, "File listing sources, one a line")->required();
    check->callback([&] { rest::train::check_tokenizer(c_model, c_files); });

    auto * quant = app.add_subcommand("quantize", "Convert a trained GGUF to f16/q8_0 and name it");
    std::string q_in, q_out, q_type = "q8_0", q_name = "rest.cpp demo model";
    quant->add_option("-m,--model", q_in, "Input GGUF")->required();
    quant->add_option("-o,--output", q_out, "Output GGUF")->required();
    quant->add_option("--type", q_type, "f32, f16 or q8_0")->capture_default_str();
    quant->add_option("--name", q_name, "general.name")->capture_default_str();
    quant->callback([&] { rest::train::quantize_model(q_in, q_out, q_type, q_name); });

    auto * tok = app.add_subcommand("tokens", "Tokenize listed files (BOS + text + EOS each) to u16 ids for PyTorch");
    std::string t_model, t_files, t_out;
    tok->add_option("-m,--model", t_model, "GGUF with the tokenizer")->required();
    tok->add_option("--files", t_files, "File listing sources, one a line")->required();
    tok->add_option("-o,--output", t_out, "Output: little-endian u16 token ids")->required();
    tok->callback([&] { rest::train::export_tokens(t_model, t_files, t_out); });

    auto * imp = app.add_subcommand("import", "Copy trained weights (NAME.f32 files) into a GGUF from `init`");
    std::string i_model, i_dir, i_out;
    imp->add_option("-m,--model", i_model, "GGUF whose names, shapes and metadata to keep")->required();
    imp->add_option("--weights", i_dir, "Directory of raw f32 tensors named after the GGUF's tensors")->required();
    imp->add_option("-o,--output", i_out, "Output GGUF")->required();
    imp->callback([&] { rest::train::import_weights(i_model, i_dir, i_out); });

    auto * ev = app.add_subcommand("eval", "Held-out next-token loss of a GGUF, by llama.cpp's forward pass");
    std::string e_model, e_files;
    std::int32_t e_ctx = 256, e_threads = 2;
    ev->add_option("-m,--model", e_model, "GGUF")->required();
    ev->add_option("--files", e_files, "File listing held-out sources")->required();
    ev->add_option("--ctx", e_ctx, "Window length")->capture_default_str();
    ev->add_option("-t,--threads", e_threads, "CPU threads")->capture_default_str();
    ev->callback([&] { rest::train::heldout_loss(e_model, e_files, e_ctx, e_threads); });

    rest::train::quiet_logs();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        return app.exit(e);
    } catch (const rest::user_error & e) {
        std::fprintf(stderr, "rest-train: %s\n", e.what());
        return 1;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "rest-train: %s\n", e.what());
        return 1;
    }
    return 0;
}
