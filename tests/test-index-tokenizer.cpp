// build_datastore with real llama.cpp tokenizers (vocab-only loads): the u16 path (llama-spm, stories260K) and the
// u32 path (qwen2, 151k tokens), checked against a naive scan of the same tokenization.
#include "ref/ref-index.h"
#include "rest/datastore.h"
#include "rest/index-builder.h"
#include "rest/llama-model.h"
#include "test-util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#ifndef REST_LLAMA_SOURCE
#define REST_LLAMA_SOURCE ""
#endif

namespace {

namespace fs = std::filesystem;
using rest::token_id;

const char * k_docs[] = {
    "def add(a, b):\n    return a + b\n",
    "def sub(a, b):\n    return a - b\n",
    "Le café est très bon. 你好，世界！ def add(x, y): return x + y",
    "for i in range(10):\n    print(add(i, i))\n",
};

std::string vocab(const std::string & name) {
    return std::string(REST_LLAMA_SOURCE) + "/models/ggml-vocab-" + name + ".gguf";
}

// Builds from k_docs (one file each) and checks counts, widths and lookups against the naive scan.
void check_model(const std::string & model, int want_width) {
    if (!fs::exists(model)) {
        GTEST_SKIP() << model << " not found";
    }
    rest::llama_log_quiet();
    const auto        tok = rest::load_tokenizer(model);
    const std::string dir = rest_test::tmp_dir() + "/tok-" + fs::path(model).stem().string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::vector<std::vector<token_id>> docs;
    std::vector<std::string>           inputs;
    for (std::size_t i = 0; i < std::size(k_docs); ++i) {
        inputs.push_back(dir + "/doc" + std::to_string(i) + ".py");
        std::ofstream(inputs.back(), std::ios::binary) << k_docs[i];
        docs.push_back(tok->tokenize(k_docs[i], false, false));
    }
    rest::corpus_build_params p;
    p.n_threads           = 2;
    const std::string out = dir + "/out.idx";
    const auto        s   = rest::build_datastore(out, inputs, *tok, p);
    const auto        ds  = rest::datastore::open(out, tok->fingerprint(), tok->description());
    ds->verify();
    EXPECT_EQ(ds->info().token_width, want_width);
    EXPECT_EQ(ds->info().n_documents, std::size(k_docs));
    EXPECT_EQ(ds->info().tokenizer_description, tok->description());
    const auto text = rest_ref::join_documents(docs);
    EXPECT_EQ(ds->info().n_tokens, text.size() - (std::size(k_docs) - 1));
    EXPECT_EQ(s.info.n_tokens, ds->info().n_tokens);
    for (const char * q : {"def add(", "return a", "    return", "café", "世界", "print(add"}) {
        const auto pattern = tok->tokenize(q, false, false);
        ASSERT_FALSE(pattern.empty());
        EXPECT_EQ(rest::find_all(*ds, pattern).count, rest_ref::occurrences(text, pattern).size()) << q;
    }
}

TEST(index_tokenizer, llama_spm_is_u16) {
    check_model(vocab("llama-spm"), 2);
}

TEST(index_tokenizer, qwen2_is_u32) {
    check_model(vocab("qwen2"), 4);
}

TEST(index_tokenizer, stories260k_tinystories) {
    const std::string data = rest_test::shared_data();
    if (data.empty()) {
        GTEST_SKIP() << "REST_SHARED_DATA not available";
    }
    rest::llama_log_quiet();
    const auto                tok = rest::load_tokenizer(data + "/models/stories260K.gguf");
    rest::corpus_build_params p;
    p.n_threads                     = 2;
    p.corpus.split_paragraphs       = true;
    p.index.n_shard_tokens_max      = 100000;  // several shards
    const std::string out           = rest_test::tmp_dir() + "/tok-tinystories.idx";
    const auto        s = rest::build_datastore(out, {data + "/corpora/tinystories-A.txt"}, *tok, p);
    const auto        ds = rest::datastore::open(out, tok->fingerprint(), tok->description());
    EXPECT_GT(ds->shards().size(), 1u);
    EXPECT_GT(s.info.n_tokens, 100000u);
    const auto pattern = tok->tokenize("Once upon a time", false, false);
    const auto m       = rest::find_all(*ds, pattern);
    EXPECT_GT(m.count, 100u);
    // Wrong tokenizer: a different vocabulary is refused, naming both.
    const std::string spm = vocab("llama-spm");
    if (fs::exists(spm)) {
        const auto other = rest::load_tokenizer(spm);
        try {
            rest::datastore::open(out, other->fingerprint(), other->description());
            ADD_FAILURE() << "opened with the wrong tokenizer";
        } catch (const rest::user_error & e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(tok->description()), std::string::npos) << msg;
            EXPECT_NE(msg.find(other->description()), std::string::npos) << msg;
        }
    }
}

}  // namespace
