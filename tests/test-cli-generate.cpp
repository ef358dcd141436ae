// `rest generate` as a user meets it: bad model files and bad arguments give a one-line error and a non-zero exit
// below 128 (never a crash); --json carries the documented fields; speculation with a datastore gives the same
// greedy text as --no-spec.
#include "cli-util.h"
#include "llama-args.h"
#include "test-util.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>

namespace fs = std::filesystem;
using rest_test::run_cli;
using rest_test::shell_quote;

namespace {

class generate_cli : public rest_test::cli_test {
  protected:
    void SetUp() override {
        open("cli-gen-");
        if (HasFatalFailure()) return;
        rest::fixture_params p;
        model_ = rest_test::fixture_model(p);
    }
    std::string model_;
};

TEST_F(generate_cli, bad_model_files_fail_cleanly) {
    const std::string missing = dir_ + "/missing.gguf";
    const std::string text    = dir_ + "/text.gguf";
    const std::string cut     = dir_ + "/truncated.gguf";
    const std::string empty   = dir_ + "/empty.gguf";
    std::ofstream(text) << "hello, I am not a model\n";
    std::ofstream(empty) << "";
    fs::copy_file(model_, cut);
    fs::resize_file(cut, fs::file_size(model_) / 3);
    for (const auto & path : {missing, text, cut, empty, dir_}) {
        const auto r = run("generate -m " + shell_quote(path) + " -p hi -n 4");
        EXPECT_TRUE(r.one_line_error()) << path << ": code " << r.code << " stderr: " << r.err;
    }
    // A header-only cut (magic intact, tensors missing) too.
    fs::resize_file(cut, 200);
    const auto r = run("generate -m " + shell_quote(cut) + " -p hi -n 4");
    EXPECT_TRUE(r.one_line_error()) << r.err;
}

// The byte offset just past `key`'s name in a GGUF file's metadata (the value's type follows), or npos.
std::size_t after_key(const std::string & bytes, const std::string & key) {
    const std::size_t at = bytes.find(key);
    return at == std::string::npos ? at : at + key.size();
}

// A mapped file truncated or rewritten in place (`cp new.idx in-use.idx`) makes the next read of a lost page
// SIGBUS: one line that says how to replace such files, exit 1, not "Bus error". Sent here (to a server, which runs
// until stopped), not provoked: when a truncation lands is a race.
TEST_F(generate_cli, a_bus_error_is_one_line) {
    const std::string log = shell_quote(dir_ + "/serve.log");
    const std::string cmd = shell_quote(bin_) + " serve -m " + shell_quote(model_) + " --port 0 -t 1 --np 1 >" + log +
                            " 2>&1 & p=$!; i=0; until grep -q listening " + log + " || [ $i -ge 600 ]; do sleep 0.1; "
                            "i=$((i+1)); done; kill -BUS $p; wait $p; c=$?; cat " + log + " >&2; exit $c";
    const auto r = run_cli("/bin/sh", "-c " + shell_quote(cmd), dir_);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_FALSE(r.signaled);
    EXPECT_TRUE(r.ends_in_error()) << r.err;
    EXPECT_NE(r.err.find("truncated or rewritten while in use"), std::string::npos) << r.err;
}

// Metadata llama.cpp aborts on (exit 134) instead of refusing: a vocabulary whose token text repeats (one flipped
// byte does it) and a layer count of 0. Each is a one-line error before llama.cpp sees the file.
TEST_F(generate_cli, corrupt_model_metadata_fails_cleanly) {
    std::ifstream     in(model_, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // tokenizer.ggml.tokens: u32 array type, u32 string type, u64 count, then (u64 length, text) per token.
    std::size_t at = after_key(bytes, "tokenizer.ggml.tokens");
    ASSERT_NE(at, std::string::npos);
    at += 4 + 4 + 8;
    std::map<std::uint64_t, std::size_t> first_of_length;  // a token text's length -> where the first such starts
    std::string dup = bytes;
    for (int i = 0; i < 5000 && at + 8 <= bytes.size(); ++i) {
        std::uint64_t len = 0;
        std::memcpy(&len, bytes.data() + at, 8);
        ASSERT_LT(len, 1000u);
        const auto [it, fresh] = first_of_length.emplace(len, at + 8);
        if (!fresh && len >= 2 && bytes.compare(at + 8, len, bytes, it->second, len) != 0) {
            dup.replace(at + 8, len, bytes, it->second, len);  // this token's text becomes an earlier one's
            break;
        }
        at += 8 + len;
    }
    ASSERT_NE(dup, bytes);
    std::string no_layers = bytes;
    const std::size_t blocks = after_key(bytes, ".block_count");
    ASSERT_NE(blocks, std::string::npos);
    std::memset(no_layers.data() + blocks + 4, 0, 4);  // after the u32 type, the u32 value
    // A NaN epsilon passes every load check; llama.cpp's norm asserts in the first pass, which rest reports on one
    // line instead of a core dump and a debugger's backtrace on stdout.
    std::string nan_eps = bytes;
    const std::size_t eps = after_key(bytes, "layer_norm_rms_epsilon");
    ASSERT_NE(eps, std::string::npos);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(nan_eps.data() + eps + 4, &nan, 4);
    // What each says: the metadata checks name the fault before llama.cpp loads the file (its own stop, reported as
    // one line too, would pass one_line_error() alone).
    const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
        {"dup-token.gguf", dup, "corrupt vocabulary"},
        {"no-layers.gguf", no_layers, "block_count is 0"},
        {"nan-eps.gguf", nan_eps, "llama.cpp stopped on an internal check"}};
    for (const auto & [name, content, says] : cases) {
        const std::string path = dir_ + "/" + name;
        std::ofstream(path, std::ios::binary) << content;
        const auto r = run("generate -m " + shell_quote(path) + " -p hi -n 4");
        EXPECT_TRUE(r.one_line_error()) << name << ": code " << r.code << " stderr: " << r.err;
        EXPECT_NE(r.err.find(says), std::string::npos) << name << ": " << r.err;
        EXPECT_EQ(r.out, "") << name;
        if (content == nan_eps) continue;  // its vocabulary is fine: an index builds
        const auto b = run("index build -m " + shell_quote(path) + " -o " + shell_quote(dir_ + "/x.idx") + " " +
                           shell_quote(path));
        EXPECT_TRUE(b.one_line_error()) << name << ": code " << b.code << " stderr: " << b.err;
    }
    // A quantized K cache whose blocks do not divide the key heads (the fixture's 16 values; q8_0's blocks are 32):
    // llama.cpp refuses it with flash attention on, and without it wrote garbage.
    const auto q = run("generate -m " + shell_quote(model_) + " -p hi -n 4 --cache-type-k q8_0 --flash-attn off");
    EXPECT_TRUE(q.one_line_error()) << "code " << q.code << " stderr: " << q.err;
}

// A model whose context is 128 positions (stories260K's): llama.cpp rounds the context up to 256, but capped its
// batch at the 128 asked, and asserted (an abort) on a longer prompt chunk or a verify pass of 129 rows or more.
TEST_F(generate_cli, a_short_context_model_takes_prompts_and_passes_past_its_trained_length) {
    rest::fixture_params p;
    p.n_ctx = 128;
    const std::string model = rest_test::fixture_model(p);
    std::string       prompt;
    for (int i = 0; i < 55; ++i) prompt += "one two three ";  // ~170 tokens: past 128, inside 256
    const std::string base = "generate -m " + shell_quote(model) + " -p " + shell_quote(prompt) + " -n 24 --json -t 1";
    const auto plain = run(base + " --no-spec");
    ASSERT_EQ(plain.code, 0) << plain.err;
    EXPECT_GT(nlohmann::json::parse(plain.out)["prompt_tokens"].size(), 128u);
    const auto spec = run(base + " --draft-fixed 200");  // the prompt repeats: the context drafts long chains
    ASSERT_EQ(spec.code, 0) << spec.err;
    EXPECT_EQ(nlohmann::json::parse(spec.out)["tokens"], nlohmann::json::parse(plain.out)["tokens"]);
}

TEST_F(generate_cli, bad_arguments_fail_cleanly) {
    EXPECT_TRUE(run("generate -m " + shell_quote(model_) + " -n 4").one_line_error());                 // no prompt
    EXPECT_TRUE(run("generate -m " + shell_quote(model_) + " -p hi -f x -n 4").one_line_error());      // both
    EXPECT_TRUE(run("generate -m " + shell_quote(model_) + " -f /nonexistent.jsonl").one_line_error());
    EXPECT_TRUE(run("generate -m " + shell_quote(model_) + " -p hi --index /nonexistent.idx").one_line_error());
    const auto r = run("generate -m " + shell_quote(model_) + " -p hi -n notanumber");
    EXPECT_TRUE(r.one_line_error()) << r.err;  // CLI11's report is one line too
    // serve's options, before it loads anything: a port past 65535 wrapped around (73617 bound 8081 and printed
    // 73617), and a directory as --history-file gave a stream error and left DIR.lock behind.
    EXPECT_TRUE(run("serve -m " + shell_quote(model_) + " --port 73617").one_line_error());
    const auto h = run("serve -m " + shell_quote(model_) + " --port 0 --history-file " + shell_quote(dir_));
    EXPECT_TRUE(h.one_line_error()) << h.err;
    EXPECT_FALSE(fs::exists(dir_ + ".lock"));
    // Values no sampler or context can use: refused, not run (a NaN temperature sampled junk, a context of a
    // billion positions grew by 330 MB/s), and a directory is not a prompt file.
    for (const char * bad : {"--temp nan", "--temp 1 --top-p 0", "--min-p 2", "--repeat-penalty 0", "-t -1", "-b 0",
                             "-c -5", "-c 1000000000", "--draft-max -5", "--draft-fixed -2"}) {
        const auto b = run("generate -m " + shell_quote(model_) + " -p hi -n 4 " + bad);
        EXPECT_TRUE(b.one_line_error()) << bad << ": code " << b.code << " stderr: " << b.err;
    }
    EXPECT_TRUE(run("generate -m " + shell_quote(model_) + " -f " + shell_quote(dir_) + " -n 4").one_line_error());
    // A mistyped command is named, with the commands there are.
    const auto typo = run("genrate -m " + shell_quote(model_));
    EXPECT_TRUE(typo.one_line_error()) << typo.err;
    EXPECT_NE(typo.err.find("'genrate' is not a command of 'rest' (commands: generate,"), std::string::npos)
        << typo.err;
    const auto sub = run("index foo");
    EXPECT_NE(sub.err.find("'foo' is not a command of 'rest index'"), std::string::npos) << sub.err;
    // A prompt the context cannot hold is an error alone: nothing of it on stdout first.
    std::string long_prompt;
    for (int i = 0; i < 800; ++i) long_prompt += "word ";
    const auto l = run("generate -m " + shell_quote(model_) + " -c 256 -p " + shell_quote(long_prompt) + " -n 4");
    EXPECT_TRUE(l.ends_in_error()) << l.err;
    EXPECT_EQ(l.out, "");
}

// llama.cpp's spellings (apps/llama-args.h): every rewritten name exists on the commands the table says, and
// `generate -ngl 0 -fa ... -ctk ... -ctv ...` runs as the long names do (it failed in CLI11 as -n -g -l).
TEST_F(generate_cli, llama_cpp_spellings_are_understood) {
    for (const auto & a : llama_arg_aliases()) {
        for (const char * cmd : a.commands) {
            const auto help = run(std::string(cmd) + " --help");
            ASSERT_EQ(help.code, 0) << cmd << ": " << help.err;
            EXPECT_NE(help.out.find(std::string(a.rest) + " "), std::string::npos)
                << a.llama << " -> " << a.rest << " is not an option of `rest " << cmd << "`";
        }
    }
    const std::string m = "generate -m " + shell_quote(model_) + " -p hi -n 8 --no-spec --json -t 1 ";
    const auto        longs = run(m + "--n-gpu-layers 0 --flash-attn off --cache-type-k f16 --cache-type-v f16");
    ASSERT_EQ(longs.code, 0) << longs.err;
    for (const char * fa : {"-fa off", "-fa 0", "-fa -1", "-fa auto"}) {
        const auto r = run(m + "-ngl 0 " + fa + " -ctk f16 -ctv f16");
        ASSERT_EQ(r.code, 0) << fa << ": " << r.err;
        EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"], nlohmann::json::parse(longs.out)["tokens"]) << fa;
    }
    // The older flag form of -fa (no value) means on.
    const auto flag = run("generate -m " + shell_quote(model_) + " -p hi -n 8 --no-spec -t 1 -fa --json");
    EXPECT_EQ(flag.code, 0) << flag.err;
    // A name on a command that lacks it is CLI11's error naming rest's option; a bad value names the option too.
    const auto np = run(m + "-np 2");
    EXPECT_TRUE(np.code > 0 && np.code < 128) << np.code;
    EXPECT_NE(np.err.find("--parallel"), std::string::npos) << np.err;
    const auto fa = run(m + "-fa sometimes");
    EXPECT_TRUE(fa.code > 0 && fa.code < 128) << fa.code;
    EXPECT_NE(fa.err.find("--flash-attn"), std::string::npos) << fa.err;
}

// The verify-cost table: measured once and cached; --verbose prints it either way; --recalibrate measures it again
// and replaces the cached one.
TEST_F(generate_cli, verify_cost_is_cached_and_recalibrated_on_request) {
    const std::string cache = dir_ + "/cache";
    // One layout, so one table: with auto, a run whose chains measure flat also writes the tree layout's table, and
    // which of the two the check below reads would depend on the machine's noise.
    auto gen = [&](const std::string & extra) {
        return run_cli("/usr/bin/env", "RESTCPP_CACHE_DIR=" + shell_quote(cache) + " " + shell_quote(bin_) +
                                           " generate -m " + shell_quote(model_) +
                                           " -p 'Once upon' -n 4 -t 1 --draft-layout chain --verbose" + extra, dir_);
    };
    const auto first = gen("");
    ASSERT_EQ(first.code, 0) << first.err;
    EXPECT_NE(first.err.find("verify cost measured in"), std::string::npos) << first.err;
    ASSERT_TRUE(fs::exists(cache + "/costs"));
    std::string file;
    for (const auto & e : fs::directory_iterator(cache + "/costs")) file = e.path().string();
    ASSERT_FALSE(file.empty());
    const auto stamp = fs::last_write_time(file);

    const auto second = gen("");
    ASSERT_EQ(second.code, 0) << second.err;
    EXPECT_NE(second.err.find("verify cost cached in"), std::string::npos) << second.err;
    EXPECT_EQ(second.err.find("measured in"), std::string::npos) << second.err;
    EXPECT_EQ(fs::last_write_time(file), stamp);

    const auto third = gen(" --recalibrate");
    ASSERT_EQ(third.code, 0) << third.err;
    EXPECT_NE(third.err.find("verify cost measured in"), std::string::npos) << third.err;
    EXPECT_NE(fs::last_write_time(file), stamp) << "the cached table is replaced";
}

// A temperature of 0 with penalties is the argmax of the penalized logits, as llama.cpp's chain takes it (penalties
// first), and the prompt is in the penalty window, as llama.cpp's server and CLI put it there. Penalties were ignored
// at temperature 0 and saw only the output otherwise, so llama-server's output for such a request differed.
// Speculation verifies with the same chain: drafts from the penalized output are accepted, and the output equals plain.
TEST_F(generate_cli, greedy_with_penalties_applies_them_and_speculation_matches_plain) {
    const std::string prompt = "one two three one two three one two";
    const std::string base =
        "generate -m " + shell_quote(model_) + " -p " + shell_quote(prompt) + " -n 48 --json -t 1 --temp 0";
    // Below 1 the penalty favours what the window holds: the random-weight fixture's argmax never repeats a token,
    // so a penalty above 1 would change nothing here, while this one makes it repeat the prompt.
    const std::string pen = " --repeat-penalty 0.2";
    const auto raw = run(base + " --no-spec");
    const auto plain = run(base + pen + " --no-spec");
    ASSERT_EQ(raw.code, 0) << raw.err;
    ASSERT_EQ(plain.code, 0) << plain.err;
    const auto pj = nlohmann::json::parse(plain.out);
    const auto rj = nlohmann::json::parse(raw.out);
    EXPECT_NE(pj["tokens"], rj["tokens"]) << "the penalties changed nothing";
    // Before the first token only the prompt can be in the window: a first token other than the plain argmax's.
    EXPECT_NE(pj["tokens"][0], rj["tokens"][0]) << "the prompt is not in the penalty window";
    const std::string corpus = dir_ + "/penalized.txt";
    std::ofstream(corpus) << prompt << pj["text"].get<std::string>() << "\n";
    const std::string idx = dir_ + "/penalized.idx";
    const auto b = run("index build -m " + shell_quote(model_) + " -o " + shell_quote(idx) + " " + shell_quote(corpus));
    ASSERT_EQ(b.code, 0) << b.err;
    for (const char * layout : {"chain", "tree"}) {
        const auto spec =
            run(base + pen + " --draft-fixed 8 --draft-layout " + layout + " --index " + shell_quote(idx));
        ASSERT_EQ(spec.code, 0) << layout << ": " << spec.err;
        const auto sj = nlohmann::json::parse(spec.out);
        EXPECT_EQ(sj["tokens"], pj["tokens"]) << layout;
        EXPECT_GT(sj["tokens_per_forward"].get<double>(), 2.0)
            << layout << ": the penalized output's drafts were not accepted";
    }
}

// Output that cannot be written is an error (it was exit 0 with nothing said), a record that fails is named, the
// records of several turns are said to run their first only, and llama.cpp's habits hold: a repeated option takes
// its last value, and a seed of -1 is a random one.
TEST_F(generate_cli, write_errors_bad_records_and_repeated_options) {
    const std::string m   = "generate -m " + shell_quote(model_) + " -t 1 ";
    const std::string err = dir_ + "/full.err";
    for (const char * json : {"", "--json"}) {
        const int st = std::system((shell_quote(bin_) + " " + m + "-p hi -n 8 " + json + " >/dev/full 2>" +
                                    shell_quote(err)).c_str());
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0) << json;
        std::ifstream     in(err);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        EXPECT_NE(text.find("rest: error: writing the output failed"), std::string::npos) << json << ": " << text;
    }
    std::string long_prompt;
    for (int i = 0; i < 400; ++i) long_prompt += "word ";
    const std::string records = dir_ + "/records.jsonl";
    std::ofstream(records) << R"({"prompt": "one"})" << "\n"
                           << nlohmann::json{{"prompt", long_prompt}}.dump() << "\n"
                           << R"({"prompt": "three"})" << "\n";
    const auto bad = run(m + "-c 256 -n 4 --json -f " + shell_quote(records));
    EXPECT_TRUE(bad.ends_in_error()) << bad.err;
    EXPECT_NE(bad.err.find("records.jsonl: record 2: "), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << "record 1's output comes first";
    const std::string turns = dir_ + "/turns.jsonl";
    std::ofstream(turns) << R"({"turns": ["one", "two"]})" << "\n";
    const auto t = run(m + "-n 4 --json --field turns -f " + shell_quote(turns));
    ASSERT_EQ(t.code, 0) << t.err;
    EXPECT_NE(t.err.find("warning: " + turns + " has records of several turns"), std::string::npos) << t.err;
    const auto last = run(m + "-p hi -n 3 -n 5 --json --seed -1 --temp 0.8 --seed 7");
    ASSERT_EQ(last.code, 0) << last.err;
    EXPECT_EQ(nlohmann::json::parse(last.out)["n_tokens"], 5);
    EXPECT_EQ(run(m + "-p hi -n 2 --seed -1 --temp 0.8").code, 0) << "llama.cpp's random seed";
    // -f - reads the prompt from standard input, as `index build -` reads a corpus.
    const auto piped = run(m + "-f - -n 4 --json", "Once upon a time");
    ASSERT_EQ(piped.code, 0) << piped.err;
    const auto given = run(m + "-p 'Once upon a time' -n 4 --json");
    ASSERT_EQ(given.code, 0) << given.err;
    EXPECT_EQ(nlohmann::json::parse(piped.out)["prompt_tokens"], nlohmann::json::parse(given.out)["prompt_tokens"]);
}

TEST_F(generate_cli, json_fields_and_speculation_matches_plain) {
    const std::string prompt = "The quick brown fox";
    const auto plain = run("generate -m " + shell_quote(model_) + " -p " + shell_quote(prompt) + " -n 48 --no-spec --json -t 1");
    ASSERT_EQ(plain.code, 0) << plain.err;
    const auto pj = nlohmann::json::parse(plain.out);
    for (const char * k : {"text", "tokens", "n_tokens", "n_forward", "tokens_per_forward", "ms_per_token",
                           "accept_hist", "t_draft_ms", "t_verify_ms", "t_sample_ms"}) {
        EXPECT_TRUE(pj.contains(k)) << k;
    }
    EXPECT_EQ(pj["n_tokens"].get<int>(), 48);
    EXPECT_EQ(pj["tokens"].size(), 48u);
    EXPECT_NE(plain.err.find("tokens/forward"), std::string::npos) << "one-line summary on stderr";

    // A datastore holding the plain output: speculation must reproduce it with fewer forward passes.
    const std::string corpus = dir_ + "/corpus.txt";
    std::ofstream(corpus) << prompt << pj["text"].get<std::string>() << "\n";
    const std::string idx = dir_ + "/own.idx";
    const auto b = run("index build -m " + shell_quote(model_) + " -o " + shell_quote(idx) + " " + shell_quote(corpus));
    ASSERT_EQ(b.code, 0) << b.err;
    const auto spec = run("generate -m " + shell_quote(model_) + " -p " + shell_quote(prompt) +
                          " -n 48 --json -t 1 --draft-fixed 8 --index " + shell_quote(idx));
    ASSERT_EQ(spec.code, 0) << spec.err;
    const auto sj = nlohmann::json::parse(spec.out);
    EXPECT_EQ(sj["tokens"], pj["tokens"]);
    EXPECT_LT(sj["n_forward"].get<int>(), pj["n_forward"].get<int>());

    // The warm-up (on by default) changes nothing but timing, and --no-warmup skips it (--verbose says which).
    for (const std::string flags : {" --no-spec", ""}) {
        const std::string cmd = "generate -m " + shell_quote(model_) + " -p " + shell_quote(prompt) +
                                " -n 48 --json -t 1 --verbose --index " + shell_quote(idx) + flags;
        const auto warm = run(cmd);
        const auto cold = run(cmd + " --no-warmup");
        ASSERT_EQ(warm.code, 0) << warm.err;
        ASSERT_EQ(cold.code, 0) << cold.err;
        EXPECT_EQ(nlohmann::json::parse(warm.out)["tokens"], pj["tokens"]) << flags;
        EXPECT_EQ(nlohmann::json::parse(cold.out)["tokens"], pj["tokens"]) << flags;
        EXPECT_NE(warm.err.find("rest: warm-up: up to"), std::string::npos) << warm.err;
        EXPECT_EQ(cold.err.find("warm-up"), std::string::npos) << cold.err;
    }
}

// Predicted outputs: --prediction-file for every prompt and --prediction-field per JSONL record; the output stays
// plain's, the counters are in --json and the summary line, and bad combinations are one-line errors.
TEST_F(generate_cli, prediction_file_and_field_draft_without_changing_the_output) {
    const std::string prompt = "Once upon a time";
    const auto plain = run("generate -m " + shell_quote(model_) + " -p " + shell_quote(prompt) + " -n 48 --no-spec --json -t 1");
    ASSERT_EQ(plain.code, 0) << plain.err;
    const auto        pj   = nlohmann::json::parse(plain.out);
    const std::string pred = dir_ + "/pred.txt";
    std::ofstream(pred) << pj["text"].get<std::string>();
    const auto spec = run("generate -m " + shell_quote(model_) + " -p " + shell_quote(prompt) +
                          " -n 48 --json -t 1 --draft-fixed 8 --no-warm-start --prediction-file " + shell_quote(pred));
    ASSERT_EQ(spec.code, 0) << spec.err;
    const auto sj = nlohmann::json::parse(spec.out);
    EXPECT_EQ(sj["tokens"], pj["tokens"]);
    EXPECT_GT(sj["accepted_prediction_tokens"].get<int>(), 24);
    EXPECT_LT(sj["n_forward"].get<int>(), pj["n_forward"].get<int>() / 3);
    EXPECT_NE(spec.err.find("prediction "), std::string::npos) << spec.err;
    EXPECT_EQ(pj["accepted_prediction_tokens"].get<int>(), 0);

    const std::string jsonl = dir_ + "/prompts.jsonl";
    std::ofstream(jsonl) << nlohmann::json{{"prompt", prompt}, {"expected", pj["text"]}}.dump() << "\n"
                         << nlohmann::json{{"prompt", prompt}, {"expected", "unrelated words"}}.dump() << "\n";
    const auto field = run("generate -m " + shell_quote(model_) + " -f " + shell_quote(jsonl) +
                           " -n 48 --json -t 1 --draft-fixed 8 --no-warm-start --prediction-field expected");
    ASSERT_EQ(field.code, 0) << field.err;
    std::istringstream lines(field.out);
    std::string        line;
    std::vector<nlohmann::json> recs;
    while (std::getline(lines, line)) recs.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0]["tokens"], pj["tokens"]);
    EXPECT_EQ(recs[1]["tokens"], pj["tokens"]);
    EXPECT_GT(recs[0]["accepted_prediction_tokens"].get<int>(), recs[1]["accepted_prediction_tokens"].get<int>());

    const std::string m = "generate -m " + shell_quote(model_) + " -n 4 ";
    EXPECT_TRUE(run(m + "-p hi --prediction-file /nonexistent.txt").one_line_error());
    EXPECT_TRUE(run(m + "-p hi --prediction-field expected").one_line_error());  // needs -f
    EXPECT_TRUE(run(m + "-f " + shell_quote(jsonl) + " --prediction-field missing").one_line_error());
    EXPECT_TRUE(run(m + "-f " + shell_quote(jsonl) + " --prediction-field expected --prediction-file " + shell_quote(pred))
                    .one_line_error());
    std::string huge;
    for (int i = 0; i < 3000; ++i) huge += " word" + std::to_string(i);
    std::ofstream(dir_ + "/huge.txt") << huge;
    const auto too_long = run(m + "-p hi -c 256 --prediction-file " + shell_quote(dir_ + "/huge.txt"));
    EXPECT_TRUE(too_long.one_line_error()) << too_long.err;
    EXPECT_NE(too_long.err.find("prediction"), std::string::npos) << too_long.err;
}

// What the automatic budget learned is saved per model, datastore and setting, read by the next run (warm start),
// and a corrupt file in its place is ignored with a one-line warning and replaced; --no-warm-start neither reads
// nor writes it.
TEST_F(generate_cli, budget_state_is_saved_read_and_a_corrupt_one_ignored) {
    const std::string cache  = dir_ + "/cache";
    const std::string prompt = "The quick brown fox";
    const auto plain = run("generate -m " + shell_quote(model_) + " -p " + shell_quote(prompt) + " -n 32 --no-spec --json -t 1");
    ASSERT_EQ(plain.code, 0) << plain.err;
    const auto        pj     = nlohmann::json::parse(plain.out);
    const std::string corpus = dir_ + "/corpus.txt";
    std::ofstream(corpus) << prompt << pj["text"].get<std::string>() << "\n";
    const std::string idx = dir_ + "/own.idx";
    ASSERT_EQ(run("index build -m " + shell_quote(model_) + " -o " + shell_quote(idx) + " " + shell_quote(corpus)).code, 0);
    auto gen = [&](const std::string & extra) {
        return run_cli("/usr/bin/env", "RESTCPP_CACHE_DIR=" + shell_quote(cache) + " " + shell_quote(bin_) +
                                           " generate -m " + shell_quote(model_) + " -p " + shell_quote(prompt) +
                                           " -n 32 --json -t 1 --index " + shell_quote(idx) + extra, dir_);
    };
    auto state_file = [&] {
        std::string file;
        if (fs::exists(cache + "/budget")) {
            for (const auto & e : fs::directory_iterator(cache + "/budget")) file = e.path().string();
        }
        return file;
    };
    const auto first = gen("");
    ASSERT_EQ(first.code, 0) << first.err;
    EXPECT_EQ(nlohmann::json::parse(first.out)["tokens"], pj["tokens"]);
    const std::string file = state_file();
    ASSERT_FALSE(file.empty()) << "no budget state saved";
    const auto state = nlohmann::json::parse(rest_test::slurp(file));
    EXPECT_EQ(state["format"], "rest-budget-state");
    EXPECT_TRUE(state["version"].is_number_integer());
    EXPECT_FALSE(state["acceptance"].empty());
    EXPECT_TRUE(state.contains("shape_values"));
    EXPECT_TRUE(state["cold_us"].is_number()) << "a shape's cold first pass, persisted";

    const auto second = gen("");  // warm
    ASSERT_EQ(second.code, 0) << second.err;
    EXPECT_EQ(second.err.find("warning"), std::string::npos) << second.err;
    EXPECT_EQ(nlohmann::json::parse(second.out)["tokens"], pj["tokens"]);

    for (const std::string & junk : {std::string("{not json"), std::string("\x00\xff\x13garbage", 10),
                                     std::string("{\"format\": \"rest-budget-state\", \"version\": 999}"),
                                     [&] { auto j = state; j["cold_us"] = "slow"; return j.dump(); }(),
                                     state.dump().substr(0, state.dump().size() / 2)}) {
        std::ofstream(file, std::ios::binary | std::ios::trunc) << junk;
        const auto r = gen("");
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_FALSE(r.signaled);
        EXPECT_NE(r.err.find("warning: ignoring the budget cache"), std::string::npos) << r.err;
        EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"], pj["tokens"]);
        EXPECT_NO_THROW(nlohmann::json::parse(rest_test::slurp(file))) << "the corrupt file is replaced";
    }

    std::ofstream(file, std::ios::binary | std::ios::trunc) << "{not json";
    const auto cold = gen(" --no-warm-start");
    ASSERT_EQ(cold.code, 0) << cold.err;
    EXPECT_EQ(cold.err.find("warning"), std::string::npos) << "--no-warm-start reads nothing: " << cold.err;
    EXPECT_EQ(rest_test::slurp(file), "{not json") << "--no-warm-start writes nothing";
}

// --draft-layout auto picks trees only where the measured verify cost is flat: never on this CPU, even with
// --ngl (a CPU-only build offloads nothing).
TEST_F(generate_cli, auto_layout_follows_the_measured_cost) {
    const auto r = run_cli("/usr/bin/env", "RESTCPP_CACHE_DIR=" + shell_quote(dir_ + "/cache") + " " + shell_quote(bin_) +
                                               " generate -m " + shell_quote(model_) + " -p hi -n 4 -t 1 --ngl 99 --verbose",
                           dir_);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("rest: verifying chains (--draft-layout auto"), std::string::npos) << r.err;
    const auto t = run_cli("/usr/bin/env", "RESTCPP_CACHE_DIR=" + shell_quote(dir_ + "/cache") + " " + shell_quote(bin_) +
                                               " generate -m " + shell_quote(model_) + " -p hi -n 4 -t 1 --draft-layout tree --verbose",
                           dir_);
    ASSERT_EQ(t.code, 0) << t.err;
    EXPECT_NE(t.err.find("rest: verifying trees (--draft-layout tree"), std::string::npos) << t.err;
}

}  // namespace
