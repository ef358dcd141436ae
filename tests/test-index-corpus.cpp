// Reading corpora (text, JSONL, chat; files, directories, filters) and build_datastore end to end, with a byte-level
// fake tokenizer so no model is needed.
#include "index/corpus-reader.h"
#include "ref/ref-index.h"
#include "rest/datastore.h"
#include "rest/index-builder.h"
#include "test-util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace {

namespace fs = std::filesystem;
using rest::token_id;

// One token per byte; chat messages render as "<role>content\n" so tests can see the template was used.
class byte_tokenizer final : public rest::tokenizer {
  public:
    std::vector<token_id> tokenize(std::string_view text, bool, bool) const override {
        std::vector<token_id> out;
        for (unsigned char c : text) {
            out.push_back(c);
        }
        return out;
    }
    std::string detokenize(std::span<const token_id> tokens) const override {
        std::string s;
        for (token_id t : tokens) {
            s += static_cast<char>(t);
        }
        return s;
    }
    std::string   piece(token_id t) const override { return std::string(1, static_cast<char>(t)); }
    std::int32_t  n_vocab() const override { return 256; }
    std::uint64_t fingerprint() const override { return 0xB17E5; }
    std::string   description() const override { return "bytes, 256 tokens"; }
    std::string   apply_chat_template(std::span<const rest::chat_message> messages, bool) const override {
        std::string s;
        for (const auto & m : messages) {
            s += "<" + m.role + ">" + m.content + "\n";
        }
        return s;
    }
};

class index_corpus : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = rest_test::tmp_dir() + "/corpus-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    std::string write(const std::string & name, const std::string & content) {
        const std::string path = dir_ + "/" + name;
        fs::create_directories(fs::path(path).parent_path());
        std::ofstream(path, std::ios::binary) << content;
        return path;
    }
    // Builds, opens and returns the datastore; warnings collected in warnings_.
    std::unique_ptr<rest::datastore> build(const std::vector<std::string> & inputs, rest::corpus_params cp = {},
                                           int n_threads = 2) {
        rest::corpus_build_params p;
        p.corpus    = std::move(cp);
        p.n_threads = n_threads;
        const std::string out = dir_ + "/out.idx";
        summary_ = rest::build_datastore(out, inputs, tok_, p, [&](const std::string & w) { warnings_.push_back(w); });
        return rest::datastore::open(out, tok_.fingerprint(), tok_.description());
    }
    std::uint64_t count(const rest::datastore & ds, const std::string & s) {
        const auto t = tok_.tokenize(s, false, false);
        return rest::find_all(ds, t).count;
    }
    template <typename F> void expect_user_error(F && f, std::initializer_list<std::string> needles) {
        try {
            f();
            ADD_FAILURE() << "no error thrown";
        } catch (const rest::user_error & e) {
            const std::string msg = e.what();
            EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
            for (const auto & n : needles) {
                EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
            }
        }
    }

    byte_tokenizer            tok_;
    std::string               dir_;
    std::vector<std::string>  warnings_;
    rest::corpus_build_summary summary_;
};

TEST_F(index_corpus, text_files_and_directories) {
    write("a.txt", "hello world");
    write("sub/b.py", "print('hello')");
    write("sub/deeper/c.py", "hello again");
    const auto ds = build({dir_ + "/a.txt", dir_ + "/sub"});
    EXPECT_EQ(ds->info().n_documents, 3u);
    EXPECT_EQ(ds->info().n_tokens, 11u + 14u + 11u);
    EXPECT_EQ(count(*ds, "hello"), 3u);
    EXPECT_EQ(count(*ds, "worldprint"), 0u);  // documents do not run into each other
    EXPECT_EQ(summary_.n_files, 3u);
    EXPECT_EQ(summary_.n_bytes, 36u);
}

TEST_F(index_corpus, include_filter_and_order) {
    write("d/x.py", "python");
    write("d/y.txt", "text");
    write("d/a/z.py", "more python");
    rest::corpus_params cp;
    cp.include = {"*.py"};
    const auto files = rest::list_corpus_files({dir_ + "/d"}, cp);
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(fs::path(files[0].path).filename(), "z.py");  // d/a/z.py sorts before d/x.py
    EXPECT_EQ(fs::path(files[1].path).filename(), "x.py");
    const auto ds = build({dir_ + "/d"}, cp);
    EXPECT_EQ(ds->info().n_documents, 2u);
    EXPECT_EQ(count(*ds, "text"), 0u);
}

TEST_F(index_corpus, split_paragraphs) {
    write("p.txt", "first para\nline two\n\n\n  \nsecond para\n\nthird");
    rest::corpus_params cp;
    cp.split_paragraphs = true;
    const auto ds = build({dir_ + "/p.txt"}, cp);
    EXPECT_EQ(ds->info().n_documents, 3u);
    EXPECT_EQ(count(*ds, "line two\nsecond"), 0u);
    EXPECT_EQ(count(*ds, "first para\nline two\n"), 1u);
}

TEST_F(index_corpus, binary_and_invalid_utf8_are_skipped_with_a_warning) {
    write("good.txt", "valid text \xC3\xA9");
    write("bin.dat", std::string("ab\0cd", 5));
    write("latin1.txt", "caf\xE9");
    write("overlong.txt", "\xC0\xAF");
    write("surrogate.txt", "\xED\xA0\x80");
    const auto ds = build({dir_});
    EXPECT_EQ(ds->info().n_documents, 1u);
    EXPECT_EQ(summary_.n_files_skipped, 4u);
    ASSERT_EQ(warnings_.size(), 4u);
    for (const auto & w : warnings_) {
        EXPECT_EQ(w.find('\n'), std::string::npos);
    }
    EXPECT_NE(warnings_[0].find("NUL byte at offset 2"), std::string::npos) << warnings_[0];
    EXPECT_NE(warnings_[1].find("invalid UTF-8 at byte 3"), std::string::npos) << warnings_[1];
}

TEST_F(index_corpus, utf8_validator) {
    EXPECT_EQ(rest::find_invalid_utf8("plain"), std::string_view::npos);
    EXPECT_EQ(rest::find_invalid_utf8("\xF0\x9F\x98\x80 emoji"), std::string_view::npos);
    EXPECT_EQ(rest::find_invalid_utf8("ab\xF0\x9F\x98"), 2u);  // truncated sequence
    EXPECT_EQ(rest::find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // past U+10FFFF
    EXPECT_EQ(rest::find_invalid_utf8("x\x80"), 1u);            // stray continuation byte
}

TEST_F(index_corpus, only_binary_files_is_an_empty_corpus) {
    write("bin.dat", std::string("\0\0\0", 3));
    expect_user_error([&] { build({dir_}); }, {"empty corpus", "1 skipped"});
    EXPECT_FALSE(fs::exists(dir_ + "/out.idx"));
}

TEST_F(index_corpus, empty_inputs) {
    write("empty.txt", "");
    expect_user_error([&] { build({dir_ + "/empty.txt"}); }, {"empty corpus"});
    fs::create_directories(dir_ + "/nothing");
    expect_user_error([&] { build({dir_ + "/nothing"}); }, {"empty corpus"});
}

TEST_F(index_corpus, missing_input) {
    expect_user_error([&] { build({dir_ + "/nope.txt"}); }, {"nope.txt", "No such file"});
}

TEST_F(index_corpus, jsonl_fields) {
    write("r.jsonl", "{\"text\": \"alpha\", \"meta\": {\"tags\": [\"x1\", \"y2\"]}}\n\n"
                     "{\"text\": \"beta\", \"meta\": {\"tags\": []}}\n");
    rest::corpus_params cp;
    cp.format = rest::corpus_format::jsonl;
    auto ds   = build({dir_ + "/r.jsonl"}, cp);
    EXPECT_EQ(ds->info().n_documents, 2u);
    EXPECT_EQ(ds->info().n_tokens, 9u);
    cp.fields = {"text", "meta.tags"};
    ds        = build({dir_ + "/r.jsonl"}, cp);
    EXPECT_EQ(count(*ds, "alpha\nx1\ny2"), 1u);
    cp.fields = {"meta.tags.1"};  // a record without the field is an error, not a silent skip
    expect_user_error([&] { build({dir_ + "/r.jsonl"}, cp); }, {"r.jsonl:3", "no field 'meta.tags.1'"});
}

TEST_F(index_corpus, jsonl_token_ids_are_taken_as_is) {
    // 300 and 65 would never come out of tokenizing text with this byte tokenizer (300 is out of its range and is
    // rejected); 7 and 8 are control bytes: taken as ids, not re-tokenized.
    write("t.jsonl", "{\"tokens\": [7, 8, 65, 66]}\n{\"tokens\": [66, 7]}\n");
    rest::corpus_params cp;
    cp.format = rest::corpus_format::jsonl;
    cp.fields = {"tokens"};
    auto ds   = build({dir_ + "/t.jsonl"}, cp);
    EXPECT_EQ(ds->info().n_documents, 2u);
    EXPECT_EQ(ds->info().n_tokens, 6u);
    const std::vector<token_id> seq = {7, 8, 65, 66};
    EXPECT_EQ(rest::find_all(*ds, seq).count, 1u);
    write("bad.jsonl", "{\"tokens\": [7, 300]}\n");
    expect_user_error([&] { build({dir_ + "/bad.jsonl"}, cp); }, {"bad.jsonl:1", "300", "[0, 256)"});
    write("mixed.jsonl", "{\"tokens\": [7, 8], \"text\": \"x\"}\n");
    cp.fields = {"tokens", "text"};
    expect_user_error([&] { build({dir_ + "/mixed.jsonl"}, cp); }, {"mixed.jsonl:1", "token ids"});
}

TEST_F(index_corpus, jsonl_missing_field) {
    write("r.jsonl", "{\"text\": \"alpha\"}\n{\"body\": \"beta\"}\n");
    rest::corpus_params cp;
    cp.format = rest::corpus_format::jsonl;
    expect_user_error([&] { build({dir_ + "/r.jsonl"}, cp); }, {"r.jsonl:2", "no field 'text'"});
}

TEST_F(index_corpus, jsonl_bad_line_reports_line_number) {
    write("r.jsonl", "{\"text\": \"one\"}\n\n{\"text\": \"two\"}\n{\"text\": oops}\n{\"text\": \"four\"}\n");
    rest::corpus_params cp;
    cp.format = rest::corpus_format::jsonl;
    expect_user_error([&] { build({dir_ + "/r.jsonl"}, cp); }, {"r.jsonl:4", "invalid JSON"});
    write("u.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"caf\xE9\"}\n");
    expect_user_error([&] { build({dir_ + "/u.jsonl"}, cp); }, {"u.jsonl:2", "invalid JSON"});
    write("n.jsonl", "{\"text\": 42}\n");
    expect_user_error([&] { build({dir_ + "/n.jsonl"}, cp); }, {"n.jsonl:1", "number"});
}

TEST_F(index_corpus, json_array_of_records) {
    write("a.json", "[\n {\"instruction\": \"add\", \"output\": \"1+1\"},\n {\"instruction\": \"sub\", \"output\": 3}\n]");
    rest::corpus_params cp;
    cp.format = rest::corpus_format::jsonl;
    cp.fields = {"instruction", "output"};
    expect_user_error([&] { build({dir_ + "/a.json"}, cp); }, {"a.json: record 2", "number"});
}

TEST_F(index_corpus, chat_sharegpt_and_openai) {
    write("c.jsonl",
          "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": \"gpt\", \"value\": \"hello\"}]}\n"
          "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": "
          "[{\"type\": \"text\", \"text\": \"parts\"}]}]}\n");
    rest::corpus_params cp;
    cp.format     = rest::corpus_format::chat;
    const auto ds = build({dir_ + "/c.jsonl"}, cp);
    EXPECT_EQ(ds->info().n_documents, 2u);
    EXPECT_EQ(count(*ds, "<user>hi\n<assistant>hello\n"), 1u);
    EXPECT_EQ(count(*ds, "<system>be brief\n<user>parts\n"), 1u);
}

TEST_F(index_corpus, chat_bad_record) {
    write("c.jsonl", "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]}\n{\"text\": \"not chat\"}\n");
    rest::corpus_params cp;
    cp.format = rest::corpus_format::chat;
    expect_user_error([&] { build({dir_ + "/c.jsonl"}, cp); }, {"c.jsonl:2", "conversations", "messages"});
    write("r.jsonl", "{\"conversations\": [{\"from\": \"alien\", \"value\": \"hi\"}]}\n");
    expect_user_error([&] { build({dir_ + "/r.jsonl"}, cp); }, {"r.jsonl:1", "unknown chat role 'alien'"});
}

// Many documents over several batches and threads: the datastore holds them in input order regardless of threads.
TEST_F(index_corpus, parallel_tokenization_is_deterministic) {
    std::string lines;
    for (int i = 0; i < 3000; ++i) {
        lines += "{\"text\": \"record " + std::to_string(i) + std::string(2000, 'x') + "\"}\n";
    }
    write("many.jsonl", lines);
    rest::corpus_params cp;
    cp.format = rest::corpus_format::jsonl;
    const auto one  = build({dir_ + "/many.jsonl"}, cp, 1);
    const auto info = one->info();
    auto all_tokens = [](const rest::datastore & ds) {
        std::vector<token_id> t;
        for (std::uint64_t i = 0; i < ds.shards()[0].n_tokens(); ++i) {
            t.push_back(ds.shards()[0].token_at(i));
        }
        return t;
    };
    const auto a = all_tokens(*one);
    const auto four = build({dir_ + "/many.jsonl"}, cp, 4);
    EXPECT_EQ(four->info().n_tokens, info.n_tokens);
    EXPECT_EQ(four->info().n_documents, 3000u);
    EXPECT_EQ(all_tokens(*four), a);
    // The first document is "record 0xxx...": read() stops at its end.
    std::vector<token_id> first(5000);
    first.resize(four->shards()[0].read(0, first));
    EXPECT_EQ(first.size(), 8u + 2000u);
}

}  // namespace
