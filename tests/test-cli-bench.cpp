// `rest bench` end to end on fixture models: it writes a valid results.json (every method, every prompt), the
// Markdown table and the plot tables; every rest method's greedy output equals plain's on every prompt; a datastore
// holding the model's own output makes rest draft and accept; multi-turn records run turn 2 on the model's own
// answer (through the chat template when the vocabulary has one, by concatenation otherwise); bad method lists fail
// with a one-line error. No timing is asserted.
#include "cli-util.h"
#include "test-util.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using rest_test::run_cli;
using rest_test::shell_quote;

namespace {

// Drops bytes that do not form valid UTF-8 (index build refuses such files; a random model emits byte tokens).
std::string valid_utf8(const std::string & s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = (unsigned char) s[i];
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        bool ok = n > 0 && i + n <= s.size();
        for (size_t k = 1; ok && k < n; ++k) ok = ((unsigned char) s[i + k] >> 6) == 0x2;
        if (ok) out.append(s, i, n);
        i += ok ? n : 1;
    }
    return out;
}

class bench_cli : public rest_test::cli_test {
  protected:
    void SetUp() override { open("cli-bench-"); }

    // A JSONL prompt file, and a datastore of the prompts followed by the model's own greedy continuations.
    void make_inputs(const std::string & model, const std::vector<std::string> & prompts, int n) {
        prompts_ = dir_ + "/prompts.jsonl";
        {
            std::ofstream f(prompts_);
            for (const auto & p : prompts) f << nlohmann::json{{"prompt", p}}.dump() << "\n";
        }
        // One plain `rest generate -p` per prompt: stdout is the prompt, its continuation and a newline, raw bytes
        // (a random model's text need not be valid UTF-8, so not --json; invalid bytes are dropped).
        std::ofstream corpus(dir_ + "/corpus.txt");
        for (const auto & p : prompts) {
            const auto g = run("generate -m " + shell_quote(model) + " -p " + shell_quote(p) + " -n " +
                               std::to_string(n) + " --no-spec -t 1");
            ASSERT_EQ(g.code, 0) << g.err;
            ASSERT_TRUE(g.out.starts_with(p));
            corpus << valid_utf8(g.out) << "\n";
        }
        corpus.close();
        index_ = dir_ + "/own.idx";
        const auto b = run("index build -m " + shell_quote(model) + " -o " + shell_quote(index_) +
                           " --split-paragraphs " + shell_quote(dir_ + "/corpus.txt"));
        ASSERT_EQ(b.code, 0) << b.err;
    }

    nlohmann::json read_json(const std::string & path) {
        std::ifstream in(path);
        EXPECT_TRUE(in) << path;
        return nlohmann::json::parse(in);
    }

    std::string prompts_, index_;
};

const nlohmann::json * method(const nlohmann::json & j, const std::string & name) {
    for (const auto & m : j["methods"]) {
        if (m["name"] == name) return &m;
    }
    return nullptr;
}

TEST_F(bench_cli, writes_results_and_rest_output_equals_plain) {
    rest::fixture_params p;
    const std::string    model = rest_test::fixture_model(p);
    const std::vector<std::string> prompts = {"The quick brown fox", "int main(void) {", "Once upon a time"};
    make_inputs(model, prompts, 40);
    const std::string out     = dir_ + "/out";
    const std::string methods = "plain,llama-plain,rest,rest-datastore,rest-context,rest@8,ngram-cache@16,ngram-simple,ngram-mod";
    const auto r = run("bench -m " + shell_quote(model) + " --index " + shell_quote(index_) + " --prompts " +
                       shell_quote(prompts_) + " -n 40 -t 1 --quiet --methods " + methods + " --out " + shell_quote(out));
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char * f : {"results.json", "results.md", "speedup.tsv", "accept.tsv", "cost.tsv"}) {
        EXPECT_TRUE(fs::exists(out + "/" + f) && fs::file_size(out + "/" + f) > 0) << f;
    }
    const auto j = read_json(out + "/results.json");
    ASSERT_EQ(j["methods"].size(), 9u);
    ASSERT_EQ(j["cases"].size(), prompts.size());
    EXPECT_TRUE(j["machine"].contains("loadavg_start"));
    EXPECT_EQ(j.value("settle_ms", -1), 10) << "the default pause between methods, recorded";
    EXPECT_FALSE(j["cost_table"]["rows"].empty());
    // ngram-cache@N drafts with the static cache of the datastore's corpus, as ngram-cache does.
    EXPECT_GT(j.value("ngram_static_cache_ngrams", 0), 0);
    for (const auto & m : j["methods"]) {
        const std::string name = m["name"];
        SCOPED_TRACE(name);
        EXPECT_EQ(m["n_cases"].get<int>(), (int) prompts.size());
        EXPECT_EQ(m["n_tokens"].get<int>(), 40 * (int) prompts.size()) << "the fixture never emits EOG this early";
        EXPECT_GT(m["M"].get<double>(), 0.0);
        EXPECT_EQ(m["speedup_per_case"].size(), prompts.size());
        if (name.starts_with("rest") || name == "plain") {
            EXPECT_EQ(m["n_compared"].get<int>(), (int) prompts.size());
            EXPECT_TRUE(m["output_equals_plain_but_near_ties"].get<bool>()) << "first differing token per case: "
                                                              << m["first_diff_per_case"].dump();
        }
        for (const auto & c : j["cases"]) EXPECT_TRUE(c["methods"].contains(name));
    }
    // The datastore holds each prompt's own continuation: rest drafts it and needs fewer forward passes than plain.
    const auto * plain = method(j, "plain");
    const auto * fixed = method(j, "rest@8");
    ASSERT_TRUE(plain && fixed);
    EXPECT_GT((*fixed)["n_accepted"].get<int>(), 0);
    EXPECT_GT((*fixed)["M"].get<double>(), 1.5 * (*plain)["M"].get<double>());
    EXPECT_EQ((*plain)["n_drafted"].get<int>(), 0);
    // The Markdown table has a row per method.
    std::ifstream md(out + "/results.md");
    std::string   text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
    for (const auto & m : j["methods"]) {
        EXPECT_NE(text.find("| " + m["name"].get<std::string>() + " |"), std::string::npos) << m["name"];
    }
}

// --streams: the concurrency experiment writes a row per stream count; with one stream, batching cannot change the
// arithmetic, so REST's output equals plain's, and with the model's own continuations in the datastore it needs
// fewer forward passes.
TEST_F(bench_cli, streams_experiment_compares_plain_and_rest_per_concurrency) {
    rest::fixture_params p;
    const std::string    model = rest_test::fixture_model(p);
    const std::vector<std::string> prompts = {"The quick brown fox", "int main(void) {", "Once upon a time",
                                              "def f(x):", "SELECT * FROM"};
    make_inputs(model, prompts, 40);
    const std::string out = dir_ + "/streams";
    const auto r = run("bench -m " + shell_quote(model) + " --index " + shell_quote(index_) + " --prompts " +
                       shell_quote(prompts_) + " -n 40 -t 1 --streams 1,3 --reps 2 --out " + shell_quote(out));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = read_json(out + "/streams.json");
    ASSERT_EQ(j["rows"].size(), 2u);
    EXPECT_EQ(j["rows"][0]["streams"].get<int>(), 1);
    EXPECT_EQ(j["rows"][1]["streams"].get<int>(), 3);
    for (const auto & row : j["rows"]) {
        EXPECT_EQ(row["outputs"].get<int>(), 2 * (int) prompts.size());
        EXPECT_EQ(row["reps"].size(), 2u);
        EXPECT_GT(row["plain_tokens_per_s"].get<double>(), 0.0);
        EXPECT_GT(row["rest_tokens_per_s"].get<double>(), 0.0);
    }
    EXPECT_EQ(j["rows"][0]["identical"].get<int>(), 2 * (int) prompts.size());
    EXPECT_GT(j["rows"][0]["rest_tokens_per_forward"].get<double>(), 1.2);
    // Three slots verifying chains: the cost table has its batch grid for 2 and 3 requests, from one row each.
    const auto & grid = j["cost_table"]["batches"];
    ASSERT_EQ(grid.size(), 2u) << j["cost_table"].dump();
    EXPECT_EQ(grid[0]["requests"].get<int>(), 2);
    EXPECT_EQ(grid[1]["requests"].get<int>(), 3);
    for (const auto & b : grid) EXPECT_EQ(b["rows_per_request"][0].get<int>(), 1);
    EXPECT_NE(r.out.find("| 3 |"), std::string::npos) << r.out;
    // More streams than slots, or none, is a clean error.
    const auto bad = run("bench -m " + shell_quote(model) + " --prompts " + shell_quote(prompts_) +
                         " -n 4 --streams 0 --out " + shell_quote(out));
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.err.find("--streams"), std::string::npos) << bad.err;
}

TEST_F(bench_cli, multi_turn_records_run_turn_two_on_the_models_answer) {
    for (const std::string vocab : {"llama-spm", "qwen2"}) {
        SCOPED_TRACE(vocab);
        rest::fixture_params p;
        p.vocab = vocab;
        const std::string model   = rest_test::fixture_model(p);
        const std::string prompts = dir_ + "/mt-" + vocab + ".jsonl";
        std::ofstream(prompts) << R"({"turns": ["Write a haiku about rain.", "Now make it rhyme."]})" << "\n"
                               << R"({"turns": ["What is 2+2?", "And times 3?"]})" << "\n";
        const std::string out = dir_ + "/out-" + vocab;
        const auto r = run("bench -m " + shell_quote(model) + " --prompts " + shell_quote(prompts) +
                           " --field turns -n 12 -t 1 --quiet --methods plain,rest-context,llama-plain --out " +
                           shell_quote(out));
        ASSERT_EQ(r.code, 0) << r.err;
        const auto j = read_json(out + "/results.json");
        ASSERT_EQ(j["cases"].size(), 4u);
        EXPECT_EQ(j["cases"][1]["turn"].get<int>(), 1);
        // Turn 2 carries turn 1, the answer and the new question.
        EXPECT_GT(j["cases"][1]["n_prompt"].get<int>(), j["cases"][0]["n_prompt"].get<int>() + 12);
        const std::string mode = j["prompts"]["chat_template"];
        if (vocab == "qwen2") {
            EXPECT_EQ(mode, "the model's chat template");
        } else {
            EXPECT_NE(mode.find("no chat template"), std::string::npos) << mode;
        }
        EXPECT_TRUE((*method(j, "rest-context"))["output_equals_plain"].get<bool>());
    }
}

// llama.cpp's drafters at a cap (@N): never more than N draft tokens a step. ngram-cache keeps what earlier requests
// produced (its dynamic cache, as llama-lookup's -lcd file does from run to run): asked the same prompt a third time
// with no datastore, it drafts from the first two answers and needs fewer forward passes than the first time (its
// dynamic cache drafts a token only from 2 occurrences). Without the merge the three requests cost the same.
TEST_F(bench_cli, llama_drafters_take_a_cap_and_ngram_cache_learns_from_earlier_requests) {
    rest::fixture_params p;
    const std::string    model   = rest_test::fixture_model(p);
    const std::string    prompts = dir_ + "/p.jsonl";
    {
        std::ofstream f(prompts);
        for (int i = 0; i < 3; ++i) f << R"({"prompt": "Once upon a time"})" << "\n";
    }
    const std::string out = dir_ + "/capped";
    const auto r = run("bench -m " + shell_quote(model) + " --prompts " + shell_quote(prompts) +
                       " -n 48 -t 1 --quiet --methods plain,ngram-cache@3,ngram-cache-nostatic@4,ngram-simple@2 --out " + shell_quote(out));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = read_json(out + "/results.json");
    for (const auto & [name, cap] :
         {std::pair{"ngram-cache@3", 3}, std::pair{"ngram-cache-nostatic@4", 4}, std::pair{"ngram-simple@2", 2}}) {
        const auto * m = method(j, name);
        ASSERT_TRUE(m) << name;
        EXPECT_LE((*m)["budget_hist"].size(), (size_t) cap + 1) << name << ": " << (*m)["budget_hist"].dump();
    }
    ASSERT_EQ(j["cases"].size(), 3u);
    const int first = j["cases"][0]["methods"]["ngram-cache@3"]["n_forward"];
    const int third = j["cases"][2]["methods"]["ngram-cache@3"]["n_forward"];
    EXPECT_LT(third, first);
}

TEST_F(bench_cli, bad_method_lists_fail_cleanly) {
    rest::fixture_params p;
    const std::string    model   = rest_test::fixture_model(p);
    const std::string    prompts = dir_ + "/p.jsonl";
    std::ofstream(prompts) << R"({"prompt": "hello"})" << "\n";
    const std::string base = "bench -m " + shell_quote(model) + " --prompts " + shell_quote(prompts) + " -n 4 --out " +
                             shell_quote(dir_ + "/out") + " --methods ";
    for (const char * bad : {"plain,nosuch", "ngram-cache@0", "plain@2", "rest@x", "plain,plain", "rest-datastore"}) {
        const auto r = run(base + bad);  // rest-datastore without --index
        EXPECT_TRUE(r.one_line_error()) << bad << ": code " << r.code << " stderr: " << r.err;
    }
    for (const char * bad : {"-1", "x", "60001"}) {
        const auto st = run(base + "plain --settle-ms " + bad);
        EXPECT_TRUE(st.one_line_error()) << "--settle-ms " << bad << ": code " << st.code << " stderr: " << st.err;
    }
    const auto r = run("bench -m " + shell_quote(model) + " --prompts " + shell_quote(dir_ + "/missing.jsonl") +
                       " --out " + shell_quote(dir_ + "/out"));
    EXPECT_TRUE(r.one_line_error()) << r.err;
    // A prompt set none of which fits the context measures nothing: an error, where it used to exit 0 with an empty
    // table.
    std::string huge;
    for (int i = 0; i < 3000; ++i) huge += "word ";
    const std::string too_long = dir_ + "/long.jsonl";
    std::ofstream(too_long) << nlohmann::json{{"prompt", huge}}.dump() << "\n";
    const auto l = run("bench -m " + shell_quote(model) + " --prompts " + shell_quote(too_long) + " -n 4 -c 512 --out " +
                       shell_quote(dir_ + "/out2") + " --methods plain");
    EXPECT_TRUE(l.ends_in_error()) << "code " << l.code << " stderr: " << l.err;
    // A result file that cannot be written (here a directory in its place; a full disk alike) is an error naming it,
    // where it left empty files and exit 0.
    std::filesystem::create_directories(dir_ + "/out3/results.md");
    const auto w = run("bench -m " + shell_quote(model) + " --prompts " + shell_quote(prompts) + " -n 4 --out " +
                       shell_quote(dir_ + "/out3") + " --methods plain");
    EXPECT_TRUE(w.ends_in_error()) << "code " << w.code << " stderr: " << w.err;
    EXPECT_NE(w.err.find("results.md"), std::string::npos) << w.err;
}

}  // namespace
