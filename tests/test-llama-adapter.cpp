// The llama.cpp adapter: tokenizer round trips, fixture metadata, and plain greedy decoding through the adapter
// against greedy decoding written directly on llama.cpp's API.
#include "llama.h"
#include "rest/cost-model.h"
#include "rest/decoder.h"
#include "rest/llama-model.h"
#include "test-util.h"

#include <cstdlib>
#include <random>

using namespace rest;

namespace {

const char * k_texts[] = {
    "",
    "Hello world",
    "  leading and trailing spaces  ",
    "Ünïcödé: naïve café, 日本語のテキスト, emoji 🦙🚀, Ελληνικά",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "tabs\tand\nnewlines\r\n and   runs    of spaces",
    "1234567890 3.14159 -2e10 0xFF",
};

class tokenizer_round_trip : public ::testing::TestWithParam<std::string> {};

TEST_P(tokenizer_round_trip, detokenize_inverts_tokenize) {
    const auto tok = load_tokenizer(fixture_vocab_path(GetParam()));
    EXPECT_GT(tok->n_vocab(), 1000);
    for (const char * text : k_texts) {
        const auto ids = tok->tokenize(text, false, false);
        if (std::string(text).empty()) {
            EXPECT_TRUE(ids.empty());
        }
        for (token_id t : ids) {
            ASSERT_GE(t, 0);
            ASSERT_LT(t, tok->n_vocab());
        }
        std::string back = tok->detokenize(ids);
        // SentencePiece vocabularies drop the one leading space they add themselves.
        if (back.size() == std::string(text).size() + 1 && back[0] == ' ') {
            back.erase(0, 1);
        }
        EXPECT_EQ(back, std::string(text)) << "vocab " << GetParam();
    }
}

TEST_P(tokenizer_round_trip, fingerprint_is_stable_and_distinct) {
    const auto a = load_tokenizer(fixture_vocab_path(GetParam()));
    const auto b = load_tokenizer(fixture_vocab_path(GetParam()));
    EXPECT_EQ(a->fingerprint(), b->fingerprint());
    const auto other = load_tokenizer(fixture_vocab_path(GetParam() == "qwen2" ? "llama-spm" : "qwen2"));
    EXPECT_NE(a->fingerprint(), other->fingerprint());
    EXPECT_NE(a->description().find(std::to_string(a->n_vocab())), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(vocabs, tokenizer_round_trip, ::testing::Values("llama-spm", "qwen2", "deepseek-coder"));

TEST(tokenizer, bad_files_are_one_line_user_errors) {
    const std::string dir = rest_test::tmp_dir();
    EXPECT_THROW(load_tokenizer(dir + "/does-not-exist.gguf"), user_error);
    const std::string junk = dir + "/junk.gguf";
    {
        std::FILE * f = std::fopen(junk.c_str(), "wb");
        std::fputs("this is not a gguf file at all, just some text that is long enough to be read", f);
        std::fclose(f);
    }
    try {
        load_tokenizer(junk);
        FAIL() << "expected user_error";
    } catch (const user_error & e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
}

struct fixture_case {
    std::string vocab;
    std::string type;
    int         n_layer, n_embd, n_head, n_head_kv, n_ff;
};

class fixture_metadata : public ::testing::TestWithParam<fixture_case> {};

TEST_P(fixture_metadata, model_has_the_requested_shape) {
    const fixture_case & c = GetParam();
    fixture_params       p;
    p.vocab     = c.vocab;
    p.type      = c.type;
    p.n_layer   = c.n_layer;
    p.n_embd    = c.n_embd;
    p.n_head    = c.n_head;
    p.n_head_kv = c.n_head_kv;
    p.n_ff      = c.n_ff;
    const auto m = rest_test::load_model(rest_test::fixture_model(p));
    const auto & info = m->info();
    EXPECT_EQ(info.n_layer, c.n_layer);
    EXPECT_EQ(info.n_embd, c.n_embd);
    EXPECT_EQ(info.n_head, c.n_head);
    EXPECT_EQ(info.n_head_kv, c.n_head_kv);
    EXPECT_EQ(info.n_vocab, load_tokenizer(fixture_vocab_path(c.vocab))->n_vocab());
    std::string want = c.type;
    for (auto & ch : want) ch = (char) std::toupper(ch);
    EXPECT_EQ(info.file_type, want);
    EXPECT_EQ(m->vocab().fingerprint(), load_tokenizer(fixture_vocab_path(c.vocab))->fingerprint());
}

INSTANTIATE_TEST_SUITE_P(shapes, fixture_metadata,
                         ::testing::Values(fixture_case{"llama-spm", "f32", 2, 64, 4, 2, 128},
                                           fixture_case{"llama-spm", "q8_0", 3, 64, 4, 4, 96},
                                           fixture_case{"llama-spm", "q4_0", 2, 128, 8, 2, 256},
                                           fixture_case{"qwen2", "f16", 1, 32, 2, 1, 64}));

// Greedy decoding written directly on llama.cpp's API: the reference the adapter must match token for token.
// offloaded: the adapter's model is on a GPU backend (its flash-attention choice then is llama.cpp's).
std::vector<llama_token> reference_greedy(const std::string & path, const std::vector<llama_token> & prompt, int n,
                                          bool offloaded) {
    // Offloaded as rest_test::load_model offloads the adapter's model (REST_TEST_NGL; llama.cpp's default would put
    // every layer on a GPU whenever the build has one, and the adapter none).
    const char * ngl_env = std::getenv("REST_TEST_NGL");
    const int    ngl     = ngl_env ? std::atoi(ngl_env) : 0;
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers       = ngl;
    llama_model * model = llama_model_load_from_file(path.c_str(), mp);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx     = 512;
    cp.n_batch   = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    // The adapter's automatic setting for these F32/F16 fixtures: off on a CPU (llama.cpp's own default would enable
    // it; the two attention paths round differently, and a random model amplifies that), llama.cpp's choice when
    // offloaded. On an H200 the reference with it off and the offloaded adapter with it on parted at token 21.
    cp.flash_attn_type = offloaded ? LLAMA_FLASH_ATTN_TYPE_AUTO : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    llama_sampler * smpl = llama_sampler_init_greedy();
    std::vector<llama_token> tokens = prompt;
    std::vector<llama_token> out;
    llama_batch batch = llama_batch_get_one(tokens.data(), (int32_t) tokens.size());
    for (int i = 0; i < n; ++i) {
        if (llama_decode(ctx, batch) != 0) break;
        llama_token t = llama_sampler_sample(smpl, ctx, -1);
        out.push_back(t);
        if (llama_vocab_is_eog(llama_model_get_vocab(model), t)) break;
        tokens.push_back(t);
        batch = llama_batch_get_one(&tokens.back(), 1);
    }
    llama_sampler_free(smpl);
    llama_free(ctx);
    llama_model_free(model);
    return out;
}

// warm: run warm_up() over this table first (its largest size is returned in *warm_rows).
std::vector<token_id> adapter_greedy(const model & m, const std::vector<token_id> & prompt, int n,
                                     const cost_table * warm = nullptr, std::int32_t * warm_rows = nullptr) {
    context_params cp;
    cp.n_ctx     = 512;
    cp.n_threads = 1;
    auto           ctx = m.new_context(cp);
    if (warm != nullptr) {
        const warm_up_result w = warm_up(*ctx, 0, *warm, 64);
        if (warm_rows != nullptr) *warm_rows = w.rows;
        EXPECT_EQ(ctx->n_past(0), 0);
    }
    greedy_sampler sampler;
    decoder        dec(*ctx, nullptr);
    request        r;
    r.params.n_predict = n;
    r.sampler          = &sampler;
    r.is_eog           = [&](token_id t) { return m.is_eog(t); };
    dec.run(r, prompt);
    return r.output;
}

TEST(plain_decoding, adapter_greedy_equals_direct_llama_greedy) {
    for (const char * vocab : {"llama-spm", "qwen2"}) {
        fixture_params p;
        p.vocab = vocab;
        const std::string path = rest_test::fixture_model(p);
        const auto m = rest_test::load_model(path);
        for (const char * text : {"Once upon a time", "def main():", "The quick brown fox"}) {
            const auto prompt = m->vocab().tokenize(text, true, false);
            const auto want   = reference_greedy(path, prompt, 48, m->info().backend != "CPU");
            const auto got    = adapter_greedy(*m, prompt, 48);
            ASSERT_EQ(got, want) << vocab << " / " << text;
        }
    }
}

TEST(plain_decoding, a_warm_up_leaves_outputs_as_a_fresh_context_gives_them) {
    // A one-row pass of 1 s and larger ones of 1 us: the 2-row pass looks cold, so the warm-up runs the largest size
    // that costs at most 4 one-row passes (16 rows; 32 rows are priced at 5 s).
    cost_table t;
    t.rows  = {1, 2, 4, 8, 16, 32};
    t.t_us  = {1e6, 1, 1, 1, 1, 5e6};
    fixture_params p;
    const std::string path = rest_test::fixture_model(p);
    const auto m = rest_test::load_model(path);
    for (const char * text : {"Once upon a time", "def main():"}) {
        const auto   prompt = m->vocab().tokenize(text, true, false);
        std::int32_t rows   = 0;
        const auto   got    = adapter_greedy(*m, prompt, 48, &t, &rows);
        EXPECT_EQ(rows, 16);
        ASSERT_EQ(got, reference_greedy(path, prompt, 48, m->info().backend != "CPU")) << text;
    }
}

TEST(plain_decoding, stories260k_once_upon_a_time) {
    const std::string data = rest_test::shared_data();
    if (data.empty()) {
        GTEST_SKIP() << "../shared/data is absent";
    }
    const auto m      = rest_test::load_model(data + "/models/stories260K.gguf");
    const auto prompt = m->vocab().tokenize("Once upon a time", true, false);
    const auto out    = adapter_greedy(*m, prompt, 24);
    const std::string text = "Once upon a time" + m->vocab().detokenize(out);
    EXPECT_EQ(text.rfind("Once upon a time, there was a little girl named Lily", 0), 0u) << text;
}

TEST(model_loading, bad_model_files_are_user_errors) {
    const std::string dir = rest_test::tmp_dir();
    EXPECT_THROW(rest_test::load_model(dir + "/missing.gguf"), user_error);
    fixture_params p;
    const std::string good = rest_test::fixture_model(p);
    const std::string cut  = dir + "/truncated.gguf";
    std::filesystem::copy_file(good, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, std::filesystem::file_size(good) / 2);
    EXPECT_THROW(rest_test::load_model(cut), user_error);
}

}  // namespace
