// `rest index ...` on bad input: each case exits 1..127 (no crash, no signal) with exactly one line on stderr.
// Runs the built binary ($REST_BIN/rest) with llama.cpp's vocab-only GGUFs and, when present, stories260K.
#include "index/index-format.h"
#include "cli-util.h"
#include "index-version1.h"
#include "test-util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#ifndef REST_LLAMA_SOURCE
#define REST_LLAMA_SOURCE ""
#endif

namespace {

namespace fs = std::filesystem;

using rest_test::shell_quote;
using rest_test::slurp;
using run_result = rest_test::cli_result;

class index_cli : public rest_test::cli_test {
  protected:
    void SetUp() override {
        spm_ = std::string(REST_LLAMA_SOURCE) + "/models/ggml-vocab-llama-spm.gguf";
        if (!fs::exists(spm_)) {
            GTEST_SKIP() << "llama.cpp vocab models not found under " << REST_LLAMA_SOURCE;
        }
        open("cli-");
    }

    std::string write(const std::string & name, const std::string & content) {
        const std::string p = dir_ + "/" + name;
        std::ofstream(p, std::ios::binary) << content;
        return p;
    }

    std::string build_good() {
        const std::string txt = write("corpus.txt", "int main(void) { return 0; }\nint add(int a, int b) { return a + b; }\n");
        const std::string idx = dir_ + "/good.idx";
        const run_result  r   = run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(idx) + " " + shell_quote(txt));
        EXPECT_EQ(r.code, 0) << r.err;
        return idx;
    }

    // The acceptance rule for bad input: a clean non-zero exit and one line of stderr with the needles.
    void expect_one_line_error(const run_result & r, std::initializer_list<std::string> needles) {
        EXPECT_FALSE(r.signaled) << "crashed: " << r.err;
        EXPECT_GE(r.code, 1);
        EXPECT_LE(r.code, 127);
        ASSERT_FALSE(r.err.empty());
        EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "stderr is not one line:\n" << r.err;
        EXPECT_EQ(r.err.rfind("rest: error: ", 0), 0u) << r.err;
        for (const auto & n : needles) {
            EXPECT_NE(r.err.find(n), std::string::npos) << "'" << n << "' not in: " << r.err;
        }
    }

    std::string spm_;
};

TEST_F(index_cli, build_inspect_query_round_trip) {
    const std::string idx = build_good();
    const run_result  i   = run("index inspect --json " + shell_quote(idx));
    ASSERT_EQ(i.code, 0) << i.err;
    EXPECT_NE(i.out.find("\"format_version\": 3"), std::string::npos) << i.out;
    EXPECT_NE(i.out.find("\"documents\": 1"), std::string::npos) << i.out;
    EXPECT_NE(i.out.find("\"token_width_bytes\": 2"), std::string::npos) << i.out;
    EXPECT_NE(i.out.find("\"bigram_table\": true"), std::string::npos) << i.out;
    EXPECT_NE(i.out.find("\"sample_rows\": "), std::string::npos) << i.out;
    // A format 1 copy has none, and the text output says so and what to do.
    rest_test::write_version1_copy(idx, idx + ".v1");
    const run_result old = run("index inspect " + shell_quote(idx + ".v1"));
    ASSERT_EQ(old.code, 0) << old.err;
    EXPECT_NE(old.out.find("format version: 1"), std::string::npos) << old.out;
    EXPECT_NE(old.out.find("bigram tables:  0 of 1 shards (`rest index compact`"), std::string::npos) << old.out;
    EXPECT_NE(old.out.find("suffix samples: 0 of 1 shards"), std::string::npos) << old.out;
    const std::string now = run("index inspect " + shell_quote(idx)).out;
    EXPECT_EQ(now.find("bigram tables:"), std::string::npos) << now;
    EXPECT_EQ(now.find("suffix samples:"), std::string::npos) << now;
    const run_result v = run("index verify " + shell_quote(idx));
    EXPECT_EQ(v.code, 0) << v.err;
    const run_result q = run("index query -m " + shell_quote(spm_) + " " + shell_quote(idx) + " 'int add(int a, int'");
    ASSERT_EQ(q.code, 0) << q.err;
    EXPECT_NE(q.out.find("1 occurrences"), std::string::npos) << q.out;
    EXPECT_NE(q.out.find("b) { return a + b; }"), std::string::npos) << q.out;
}

TEST_F(index_cli, build_from_stdin_and_jsonl) {
    const std::string idx = dir_ + "/stdin.idx";
    run_result        r   = run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(idx) + " --format jsonl -",
                                "{\"text\": \"hello world\"}\n{\"text\": \"second record\"}\n");
    ASSERT_EQ(r.code, 0) << r.err;
    r = run("index inspect --json " + shell_quote(idx));
    EXPECT_NE(r.out.find("\"documents\": 2"), std::string::npos) << r.out;
}

TEST_F(index_cli, missing_input) {
    expect_one_line_error(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(dir_ + "/x.idx") + " " +
                              shell_quote(dir_ + "/nope.txt")),
                          {"nope.txt", "No such file"});
    EXPECT_FALSE(fs::exists(dir_ + "/x.idx"));
}

// An output that is also an input would be overwritten by the index: refused, the input kept as it was. So is a
// --shard-tokens so small that each shard's first-token table outweighs its text.
TEST_F(index_cli, an_input_given_as_the_output_is_refused) {
    const std::string txt = write("in.txt", "some text to keep\n");
    expect_one_line_error(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(txt) + " " + shell_quote(txt)),
                          {"also an input"});
    std::ifstream in(txt);
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "some text to keep\n");
    const auto r = run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(dir_ + "/x.idx") +
                       " --shard-tokens 1 " + shell_quote(txt));
    EXPECT_FALSE(r.signaled);
    EXPECT_NE(r.code, 0) << r.err;
    EXPECT_FALSE(fs::exists(dir_ + "/x.idx"));
}

// The same for an output found by walking a directory given as input (`-o DIR/a.py DIR` overwrote a.py), and for a
// device as input (/dev/zero was read whole, hundreds of MB a second, before any check).
TEST_F(index_cli, an_output_found_in_an_input_directory_and_a_device_are_refused) {
    const std::string sub = dir_ + "/src";
    fs::create_directories(sub);
    std::ofstream(sub + "/a.py") << "def a():\n    return 1\n";
    std::ofstream(sub + "/b.py") << "def b():\n    return 2\n";
    expect_one_line_error(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(sub + "/a.py") + " " +
                              shell_quote(sub)),
                          {"also an input", "a.py"});
    EXPECT_EQ(slurp(sub + "/a.py"), "def a():\n    return 1\n");
    expect_one_line_error(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(dir_ + "/z.idx") + " /dev/zero"),
                          {"/dev/zero", "device"});
    expect_one_line_error(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(sub) + " " +
                              shell_quote(sub + "/b.py")),
                          {"is a directory"});
    // An index built into the directory it indexes: built again, its last version (and its lock file) is no input.
    const std::string in_dir = sub + "/x.idx";
    for (int k = 0; k < 2; ++k) {
        const run_result r = run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(in_dir) + " --include '*.py' " +
                                 shell_quote(sub));
        ASSERT_EQ(r.code, 0) << "build " << k << ": " << r.err;
    }
    const run_result r = run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(in_dir) + " " + shell_quote(sub));
    EXPECT_EQ(r.code, 0) << "walked without --include, the old index and x.idx.lock are left out: " << r.err;
    // A build through a symlink to a file not yet written writes the target; --shard-tokens takes digits only.
    fs::create_symlink("later.idx", dir_ + "/link.idx");
    ASSERT_EQ(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(dir_ + "/link.idx") + " " +
                  shell_quote(sub + "/b.py")).code,
              0);
    EXPECT_TRUE(fs::is_symlink(dir_ + "/link.idx"));
    EXPECT_TRUE(fs::is_regular_file(dir_ + "/later.idx"));
    for (const char * v : {"-1", "99999999999999999999999", "1e6"}) {
        expect_one_line_error(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(dir_ + "/s.idx") +
                                  " --shard-tokens " + v + " " + shell_quote(sub + "/b.py")),
                              {"--shard-tokens", v});
    }
}

// Writers of one index exclude each other through INDEX.lock: a build too (it was not, and an append running beside
// it renamed its own file over the build's). An index named through a symlink is written at the link's target, and
// the link stays a link.
TEST_F(index_cli, a_build_waits_for_no_writer_and_a_symlinked_index_stays_linked) {
    const std::string idx = build_good();
    const int         fd  = ::open((idx + ".lock").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    const std::string txt = write("more.txt", "int sub(int a, int b) { return a - b; }\n");
    const std::string before = slurp(idx);
    expect_one_line_error(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(idx) + " " + shell_quote(txt)),
                          {"another process"});
    EXPECT_EQ(slurp(idx), before);
    ::close(fd);

    const std::string link = dir_ + "/current.idx";
    fs::create_symlink(idx, link);
    const run_result a = run("index append -m " + shell_quote(spm_) + " " + shell_quote(link) + " " + shell_quote(txt));
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_TRUE(fs::is_symlink(link));
    EXPECT_NE(slurp(idx), before) << "the target holds the appended shard";
    const run_result c = run("index compact " + shell_quote(link));
    ASSERT_EQ(c.code, 0) << c.err;
    EXPECT_TRUE(fs::is_symlink(link));
    const run_result i = run("index inspect --json " + shell_quote(idx));
    ASSERT_EQ(i.code, 0) << i.err;
    EXPECT_NE(i.out.find("\"shards\": 1,"), std::string::npos) << i.out;
}

// A writer killed mid-write leaves INDEX.tmp.PID, which nothing renamed or removed: the next writer of that index
// removes those no live writer holds locked, and keeps one that is held.
TEST_F(index_cli, a_dead_writers_temp_file_is_removed_by_the_next_writer) {
    const std::string idx  = build_good();
    const std::string dead = idx + ".tmp.424242", live = idx + ".tmp.424243", other = idx + ".tmp.42x";
    for (const auto & f : {dead, live, other}) std::ofstream(f) << "partial";
    const int fd = ::open(live.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    const run_result c = run("index compact " + shell_quote(idx));
    ::close(fd);
    ASSERT_EQ(c.code, 0) << c.err;
    EXPECT_FALSE(fs::exists(dead));
    EXPECT_TRUE(fs::exists(live)) << "a live writer's";
    EXPECT_TRUE(fs::exists(other)) << "not a temp file's name";
    EXPECT_NE(c.err.find("removed 1 temp file"), std::string::npos) << c.err;
}

TEST_F(index_cli, missing_model) {
    const std::string txt = write("a.txt", "text");
    expect_one_line_error(run("index build -m " + shell_quote(dir_ + "/no-model.gguf") + " -o " + shell_quote(dir_ + "/x.idx") +
                              " " + shell_quote(txt)),
                          {"no-model.gguf"});
}

TEST_F(index_cli, empty_corpus) {
    const std::string txt = write("empty.txt", "");
    expect_one_line_error(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(dir_ + "/x.idx") + " " + shell_quote(txt)),
                          {"empty corpus"});
    EXPECT_FALSE(fs::exists(dir_ + "/x.idx"));
    for (const auto & e : fs::directory_iterator(dir_)) {
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "temp file left: " << e.path();
    }
}

// Binary and invalid UTF-8 files are skipped with one warning line each; the rest is indexed.
TEST_F(index_cli, binary_input_is_skipped_with_a_warning) {
    write("good.txt", "some text");
    write("blob.bin", std::string("\x7f" "ELF\0\0\0", 7));
    const run_result r = run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(dir_ + "/x.idx") + " " + shell_quote(dir_));
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find("rest: warning: skipping"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("blob.bin"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("1 skipped"), std::string::npos) << r.out;
}

TEST_F(index_cli, jsonl_bad_line) {
    const std::string f = write("bad.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \n");
    expect_one_line_error(run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(dir_ + "/x.idx") + " --format jsonl " +
                              shell_quote(f)),
                          {"bad.jsonl:3", "invalid JSON"});
}

TEST_F(index_cli, bad_index_files) {
    const std::string idx   = build_good();
    const std::string bytes = slurp(idx);
    auto              save  = [&](const std::string & name, const std::string & b) { return write(name, b); };

    expect_one_line_error(run("index inspect " + shell_quote(save("trunc.idx", bytes.substr(0, bytes.size() - 100)))),
                          {"trunc.idx", "truncated"});
    std::string magic = bytes;
    std::memcpy(magic.data(), "NOTANIDX", 8);
    expect_one_line_error(run("index inspect " + shell_quote(save("magic.idx", magic))), {"magic.idx", "not a rest index"});
    std::string         future  = bytes;
    const std::uint32_t version = rest::index_format::k_version + 1;
    std::memcpy(future.data() + offsetof(rest::index_format::file_header, version), &version, 4);
    expect_one_line_error(run("index inspect " + shell_quote(save("future.idx", future))), {"future.idx", "newer"});
    expect_one_line_error(run("index verify " + shell_quote(dir_ + "/absent.idx")), {"absent.idx", "No such file"});
}

TEST_F(index_cli, flipped_byte_caught_by_verify) {
    const std::string idx   = build_good();
    std::string       bytes = slurp(idx);
    bytes[rest::index_format::k_header_bytes + 2] ^= 0x01;  // inside shard 0's text
    const std::string bad = write("flipped.idx", bytes);
    EXPECT_EQ(run("index inspect " + shell_quote(bad)).code, 0);  // open reads the header only
    expect_one_line_error(run("index verify " + shell_quote(bad)), {"flipped.idx", "shard 0 text", "checksum"});
}

// --field and --include take one value each: the inputs after them stay inputs (CLI11 list options would take them).
TEST_F(index_cli, list_options_do_not_swallow_inputs) {
    const std::string a = write("a.jsonl", "{\"text\": \"first document\"}\n");
    const std::string b = write("b.jsonl", "{\"text\": \"second document\"}\n");
    const std::string idx = dir_ + "/two.idx";
    const run_result  r   = run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(idx) +
                                " --format jsonl --field text " + shell_quote(a) + " " + shell_quote(b));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("indexed 2 documents"), std::string::npos) << r.out;
    fs::create_directories(dir_ + "/d1");
    fs::create_directories(dir_ + "/d2");
    write("d1/x.py", "x = 1\n");
    write("d2/y.py", "y = 2\n");
    const run_result g = run("index build -m " + shell_quote(spm_) + " -o " + shell_quote(idx) + " --include '*.py' " +
                             shell_quote(dir_ + "/d1") + " " + shell_quote(dir_ + "/d2"));
    ASSERT_EQ(g.code, 0) << g.err;
    EXPECT_NE(g.out.find("indexed 2 documents"), std::string::npos) << g.out;
}

// append adds documents as a new shard (same options as build), compact merges the shards; bad targets are one line.
TEST_F(index_cli, append_then_compact) {
    const std::string idx = build_good();
    const std::string more = write("more.txt", "double scale(double x) { return 2.5 * x; }\n");
    const run_result  a   = run("index append -m " + shell_quote(spm_) + " " + shell_quote(idx) + " " + shell_quote(more));
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_NE(a.out.find("appended 1 documents"), std::string::npos) << a.out;
    const run_result i = run("index inspect --json " + shell_quote(idx));
    EXPECT_NE(i.out.find("\"documents\": 2"), std::string::npos) << i.out;
    for (const char * when : {"appended", "compacted"}) {
        for (const char * text : {"'int add(int a, int'", "'double scale(double x)'"}) {
            const run_result q = run("index query -m " + shell_quote(spm_) + " " + shell_quote(idx) + " " + text);
            ASSERT_EQ(q.code, 0) << q.err;
            EXPECT_NE(q.out.find("1 occurrences"), std::string::npos) << when << " " << text << ": " << q.out;
        }
        if (std::string(when) == "appended") {
            const run_result c = run("index compact " + shell_quote(idx));
            ASSERT_EQ(c.code, 0) << c.err;
            EXPECT_NE(c.out.find("2 shard(s) -> 1"), std::string::npos) << c.out;
        }
    }
    EXPECT_EQ(run("index verify " + shell_quote(idx)).code, 0);
    expect_one_line_error(run("index append -m " + shell_quote(spm_) + " " + shell_quote(dir_ + "/none.idx") + " " +
                              shell_quote(more)),
                          {"none.idx"});
    expect_one_line_error(run("index compact " + shell_quote(more)), {"more.txt"});
    const std::string qwen = std::string(REST_LLAMA_SOURCE) + "/models/ggml-vocab-qwen2.gguf";
    if (fs::exists(qwen)) {
        expect_one_line_error(run("index append -m " + shell_quote(qwen) + " " + shell_quote(idx) + " " + shell_quote(more)),
                              {"good.idx", "151936 tokens"});
    }
}

TEST_F(index_cli, wrong_tokenizer_names_both) {
    const std::string idx  = build_good();
    const std::string qwen = std::string(REST_LLAMA_SOURCE) + "/models/ggml-vocab-qwen2.gguf";
    if (!fs::exists(qwen)) {
        GTEST_SKIP() << "no qwen2 vocab";
    }
    expect_one_line_error(run("index query -m " + shell_quote(qwen) + " " + shell_quote(idx) + " 'int'"),
                          {"good.idx", "32000 tokens", "151936 tokens"});
}

TEST_F(index_cli, bad_arguments) {
    const run_result r = run("index build -m " + shell_quote(spm_) + " -o x.idx --format yaml in.txt");
    EXPECT_FALSE(r.signaled);
    EXPECT_GE(r.code, 1);
    EXPECT_LE(r.code, 127);
}

}  // namespace
