// `rest serve` over HTTP: one server (4 slots, API key, fixed 8-node drafts so every step verifies a tree) on a
// fixture model with a chat template (phi-3 vocabulary). Greedy output must equal `rest generate --no-spec`
// token for token on every endpoint, streamed or not, alone or batched with other requests.
#include "test-server-util.h"

#include "rest/llama-model.h"
#include "rest/utf8.h"

#include <atomic>
#include <memory>
#include <filesystem>
#include <regex>
#include <sstream>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

using json = nlohmann::json;
using namespace rest_test;

namespace {

const char * k_key = "test-key-123";

rest::fixture_params model_params() {
    rest::fixture_params p;
    p.vocab = "phi-3";  // carries a Jinja tokenizer.chat_template
    return p;
}

class ServerApi : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        start_error_ = "SetUpTestSuite failed before starting the server";  // (if what follows throws)
        model_path_ = fixture_model(model_params());
        model_      = rest::model::load(model_path_).release();
        srv_        = new server_process();
        start_error_ = srv_->start({"-m", model_path_, "-c", "1024", "--np", "4", "-t", "1", "--draft-fixed", "8",
                                    "--api-key", k_key},
                                   tmp_dir() + "/server-api.log");
    }
    static void TearDownTestSuite() {
        if (start_error_.empty()) {
            srv_->signal(SIGTERM);
            EXPECT_EQ(srv_->wait_exit(60), 0) << srv_->log_tail();
        }
        delete srv_;
        delete model_;
    }
    void SetUp() override { ASSERT_EQ(start_error_, "") << "server did not start"; }

    static client api() { return client(srv_->port(), k_key); }

    // What the server must return as text for these tokens: their pieces, without end-of-generation tokens.
    static std::string text_of(const std::vector<int> & tokens) {
        std::string s;
        for (int t : tokens) {
            if (!model_->is_eog(t)) {
                s += model_->vocab().piece(t);
            }
        }
        return s;
    }

    static std::string              model_path_;
    static rest::model *            model_;
    static server_process *         srv_;
    static std::string              start_error_;
};

std::string      ServerApi::model_path_;
rest::model *    ServerApi::model_ = nullptr;
server_process * ServerApi::srv_   = nullptr;
std::string      ServerApi::start_error_;

std::vector<int> tokens_of(const json & j) {
    return j.get<std::vector<int>>();
}

json completion_body(const std::string & prompt, int max_tokens, bool stream = false) {
    return json{{"model", "any"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
                {"stream", stream}, {"return_tokens", true}};
}

// Concatenated text of a completion or chat stream.
std::string joined_text(const sse_reply & r, bool chat) {
    std::string s;
    for (const auto & ev : r.events) {
        if (!ev.contains("choices") || ev["choices"].empty()) {
            continue;
        }
        const json & c = ev["choices"][0];
        if (chat) {
            if (c["delta"].contains("content")) {
                s += c["delta"]["content"].get<std::string>();
            }
        } else {
            s += c["text"].get<std::string>();
        }
    }
    return s;
}

double metric_value(const std::string & text, const std::string & series) {
    const size_t pos = text.find("\n" + series + " ");
    if (pos == std::string::npos) {
        return -1;
    }
    return std::atof(text.c_str() + pos + 1 + series.size() + 1);
}

const std::vector<std::string> k_prompts = {"Hello world", "Once upon a time", "The quick brown fox jumps",
                                            "1 2 3 4 5 6 7 8 9", "def main():\n    print("};

}  // namespace

TEST_F(ServerApi, HealthAndModels) {
    const http_reply h = client(srv_->port()).get("/health");  // no key needed
    ASSERT_EQ(h.status, 200) << h.body;
    EXPECT_EQ(h.json["status"], "ok");
    EXPECT_EQ(h.json["slots_total"], 4);
    EXPECT_NE(srv_->first_line().find("http://127.0.0.1:"), std::string::npos) << srv_->first_line();

    const http_reply m = api().get("/v1/models");
    ASSERT_EQ(m.status, 200) << m.body;
    EXPECT_EQ(m.json["object"], "list");
    ASSERT_EQ(m.json["data"].size(), 1u);
    EXPECT_EQ(m.json["data"][0]["object"], "model");
    EXPECT_EQ(m.json["data"][0]["id"], std::filesystem::path(model_path_).stem().string());
}

TEST_F(ServerApi, ApiKeyIsRequired) {
    for (const std::string & key : std::vector<std::string>{"", "wrong-key", std::string(k_key) + "x"}) {
        const client c(srv_->port(), key);
        for (const auto & [method, path] : std::vector<std::pair<std::string, std::string>>{
                 {"GET", "/v1/models"}, {"GET", "/metrics"}, {"POST", "/v1/completions"},
                 {"POST", "/v1/chat/completions"}, {"GET", "/v1/corpus"}, {"POST", "/v1/corpus"}}) {
            const http_reply r = method == "GET" ? c.get(path) : c.post(path, completion_body("hi", 2));
            EXPECT_EQ(r.status, 401) << method << " " << path << " key '" << key << "': " << r.body;
            EXPECT_EQ(r.json["error"]["code"], "invalid_api_key") << r.body;
        }
    }
}

// What llama-server also serves: its route names without /v1, its ways of sending the key (X-Api-Key, Authorization
// without "Bearer "), CORS for browser clients (a preflight needs no key), and max_tokens -1 (llama.cpp's web UI).
TEST_F(ServerApi, LlamaServerAliasesKeysAndCors) {
    httplib::Client cli("127.0.0.1", srv_->port());
    const httplib::Headers ask = {{"Origin", "http://ui.example"},
                                  {"Access-Control-Request-Method", "POST"},
                                  {"Access-Control-Request-Headers", "authorization,content-type"}};
    const auto pre = cli.Options("/v1/chat/completions", ask);
    ASSERT_TRUE(pre);
    EXPECT_EQ(pre->status, 204);
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "*");
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization,content-type");
    EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);

    const auto v1 = api().get("/v1/models");
    ASSERT_EQ(v1.status, 200) << v1.body;
    for (const auto & [name, value] : std::vector<std::pair<std::string, std::string>>{
             {"X-Api-Key", k_key}, {"Authorization", k_key}, {"Authorization", std::string("Bearer ") + k_key}}) {
        const auto r = cli.Get("/models", httplib::Headers{{name, value}, {"Origin", "http://ui.example"}});
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200) << name << ": " << r->body;
        EXPECT_EQ(json::parse(r->body), v1.json) << name;
        EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
    }
    const auto bad = cli.Get("/models", httplib::Headers{{"X-Api-Key", "wrong-key"}});
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 401);
    EXPECT_EQ(client(srv_->port()).get("/v1/health").status, 200) << "no key needed, as for /health";
    // /props: what a request without sampling fields gets, and the slots' context (llama.cpp's web UI reads them).
    const auto props = api().get("/props");
    ASSERT_EQ(props.status, 200) << props.body;
    EXPECT_EQ(props.json["total_slots"], 4);
    EXPECT_EQ(props.json["default_generation_settings"]["n_ctx"], v1.json["data"][0]["meta"]["n_ctx_slot"]);
    EXPECT_EQ(props.json["default_generation_settings"]["params"]["temperature"], 1.0);
    EXPECT_EQ(props.json["modalities"]["vision"], false);

    json body = completion_body("Once upon a time", 6);
    const auto a = api().post("/v1/completions", body);
    const auto b = api().post("/completions", body);
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(b.json["choices"][0]["text"], a.json["choices"][0]["text"]);
    const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", -1}, {"n_predict", 3},
                       {"temperature", 0}};
    const auto c1 = api().post("/v1/chat/completions", chat);
    const auto c2 = api().post("/chat/completions", chat);
    ASSERT_EQ(c1.status, 200) << c1.body;
    ASSERT_EQ(c2.status, 200) << c2.body;
    EXPECT_EQ(c2.json["choices"][0]["message"], c1.json["choices"][0]["message"]);
    EXPECT_LE(c1.json["usage"]["completion_tokens"].get<int>(), 3) << "n_predict, read first, limits it";
}

// A prediction longer than a slot's context only drafts: it is cut to the context, not refused (OpenAI takes any),
// and the output stays the request's without it.
TEST_F(ServerApi, APredictionLongerThanTheContextIsCutNotRefused) {
    const json plain = completion_body("Once upon a time", 16);
    json       pred  = plain;
    std::string text;
    for (int i = 0; i < 3000; ++i) text += " word" + std::to_string(i);
    pred["prediction"] = {{"type", "content"}, {"content", text}};
    const auto a = api().post("/v1/completions", plain);
    const auto b = api().post("/v1/completions", pred);
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(b.json["rest"]["tokens"], a.json["rest"]["tokens"]);
}

TEST_F(ServerApi, CompletionsEqualGenerateNoSpec) {
    const int  n   = 40;
    const auto ref = generate_no_spec(model_path_, k_prompts, n, "api-completions");
    ASSERT_EQ(ref.size(), k_prompts.size());
    for (size_t i = 0; i < k_prompts.size(); ++i) {
        const http_reply r = api().post("/v1/completions", completion_body(k_prompts[i], n));
        ASSERT_EQ(r.status, 200) << r.body;
        const auto want = tokens_of(ref[i]["tokens"]);
        const auto got  = tokens_of(r.json["rest"]["tokens"]);
        ASSERT_EQ(check_greedy(*model_, k_prompts[i], got, want), "") << "prompt " << i;
        EXPECT_EQ(r.json["choices"][0]["text"], text_of(got)) << "prompt " << i;
        EXPECT_EQ(r.json["object"], "text_completion");
        EXPECT_EQ(r.json["usage"]["prompt_tokens"], ref[i]["n_prompt"]);
        EXPECT_EQ(r.json["usage"]["completion_tokens"], got.size());
        EXPECT_EQ(r.json["usage"]["total_tokens"], ref[i]["n_prompt"].get<int>() + (int) got.size());
        if (got == want) {
            EXPECT_EQ(r.json["choices"][0]["finish_reason"], ref[i]["stop_reason"] == "length" ? "length" : "stop");
        }
        EXPECT_GT(r.json["rest"]["n_drafted"].get<int>() + r.json["rest"]["n_steps"].get<int>(), 0);
        EXPECT_GT(r.json["rest"]["tokens_per_forward"].get<double>(), 0.0);
    }
}

TEST_F(ServerApi, StreamedCompletionEqualsGenerate) {
    const int  n   = 32;
    const auto ref = generate_no_spec(model_path_, {k_prompts[1]}, n, "api-stream");
    ASSERT_EQ(ref.size(), 1u);

    const sse_reply r = api().stream("/v1/completions", completion_body(k_prompts[1], n, true));
    ASSERT_EQ(r.status, 200) << r.raw;
    ASSERT_FALSE(r.events.empty()) << r.raw;
    const auto got = tokens_of(r.events.back()["rest"]["tokens"]);
    ASSERT_EQ(check_greedy(*model_, k_prompts[1], got, tokens_of(ref[0]["tokens"])), "");
    EXPECT_EQ(r.content_type.rfind("text/event-stream", 0), 0u) << r.content_type;
    ASSERT_TRUE(r.done) << r.raw;
    ASSERT_GE(r.events.size(), 2u);
    EXPECT_EQ(joined_text(r, false), text_of(got));
    for (size_t i = 0; i + 1 < r.events.size(); ++i) {
        EXPECT_EQ(r.events[i]["object"], "text_completion");
        EXPECT_TRUE(r.events[i]["choices"][0]["finish_reason"].is_null()) << i;
        EXPECT_EQ(r.events[i]["id"], r.events[0]["id"]);
    }
    const json & last = r.events.back();
    EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(last["usage"]["completion_tokens"], n);

    // stream_options.include_usage adds one chunk with no choices, as OpenAI does.
    json body = completion_body(k_prompts[1], 4, true);
    body["stream_options"] = {{"include_usage", true}};
    const sse_reply u = api().stream("/v1/completions", body);
    ASSERT_TRUE(u.done);
    ASSERT_GE(u.events.size(), 2u);
    EXPECT_TRUE(u.events.back()["choices"].empty());
    EXPECT_EQ(u.events.back()["usage"]["completion_tokens"], 4);
}

// Log probabilities: one entry per completion token, the model's log-softmax at that position, the alternatives
// most likely first; with greedy decoding the chosen token is the most likely one. With and without speculation
// they agree to the strict comparison's near-tie epsilon, 0.01: batched verification rounds them differently (by
// ~1e-5 on a Zen 4, up to 4e-3 on an AVX-512 Xeon with this fixture's peaky logits and the F16 KV cache).
TEST_F(ServerApi, LogprobsCoverEveryCompletionToken) {
    const int n   = 24;
    json      req = completion_body(k_prompts[0], n);
    req["logprobs"] = 3;
    const http_reply r = api().post("/v1/completions", req);
    ASSERT_EQ(r.status, 200) << r.body;
    const json & lp     = r.json["choices"][0]["logprobs"];
    const auto   tokens = tokens_of(r.json["rest"]["tokens"]);
    // An end-of-generation token ends the text without being part of it.
    const size_t n_text = r.json["choices"][0]["finish_reason"] == "stop" ? tokens.size() - 1 : tokens.size();
    ASSERT_EQ(lp["tokens"].size(), n_text) << lp.dump();
    ASSERT_EQ(lp["token_logprobs"].size(), n_text);
    ASSERT_EQ(lp["top_logprobs"].size(), n_text);
    std::string joined;
    for (size_t i = 0; i < n_text; ++i) {
        EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size());
        joined += lp["tokens"][i].get<std::string>();
        const double v = lp["token_logprobs"][i].get<double>();
        EXPECT_LE(v, 0.0);
        const json & top = lp["top_logprobs"][i];
        EXPECT_GE(top.size(), 1u);
        EXPECT_LE(top.size(), 3u);
        double best = -1e30;
        for (const auto & [piece, x] : top.items()) best = std::max(best, x.get<double>());
        EXPECT_NEAR(best, v, 1e-6) << "greedy: the chosen token is the most likely, position " << i;
    }
    EXPECT_EQ(joined, r.json["choices"][0]["text"].get<std::string>());

    json plain = req;
    plain["speculate"] = false;
    const http_reply p = api().post("/v1/completions", plain);
    ASSERT_EQ(p.status, 200) << p.body;
    if (tokens_of(p.json["rest"]["tokens"]) == tokens) {
        for (size_t i = 0; i < n_text; ++i) {
            EXPECT_NEAR(p.json["choices"][0]["logprobs"]["token_logprobs"][i].get<double>(),
                        lp["token_logprobs"][i].get<double>(), 1e-2) << i;
        }
    }

    // Chat's format: content entries with bytes and a list of alternatives.
    json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Tell me a story."}}})},
                 {"max_tokens", 8}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}};
    const http_reply c = api().post("/v1/chat/completions", chat);
    ASSERT_EQ(c.status, 200) << c.body;
    const json & content = c.json["choices"][0]["logprobs"]["content"];
    ASSERT_FALSE(content.empty()) << c.body;
    std::string text;
    for (const auto & e : content) {
        text += e["token"].get<std::string>();
        EXPECT_EQ(e["bytes"].size(), e["token"].get<std::string>().size());
        ASSERT_EQ(e["top_logprobs"].size(), 2u);
        EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
        EXPECT_NEAR(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>(), 1e-6);
    }
    EXPECT_EQ(text, c.json["choices"][0]["message"]["content"].get<std::string>());
    // Without logprobs the field stays null, as OpenAI's.
    const http_reply none = api().post("/v1/completions", completion_body(k_prompts[0], 4));
    EXPECT_TRUE(none.json["choices"][0]["logprobs"].is_null());
}

TEST_F(ServerApi, ChatEqualsGenerateOnTheRenderedTemplate) {
    const std::vector<rest::chat_message> msgs = {{"system", "You are terse."}, {"user", "Tell me a story."}};
    // The model's own template through llama.cpp's common code (test-server-chat.cpp compares that with llama.cpp
    // called directly); the server shows the same text on /apply-template.
    const std::string rendered = model_->new_chat_template({})->apply(msgs);
    const http_reply  shown    = api().post("/apply-template", json{{"messages", json::array({{{"role", "system"}, {"content", "You are terse."}},
                                                                                            {{"role", "user"}, {"content", "Tell me a story."}}})}});
    ASSERT_EQ(shown.status, 200) << shown.body;
    EXPECT_EQ(shown.json["prompt"], rendered);
    const int         n        = 24;
    const auto        ref      = generate_no_spec(model_path_, {rendered}, n, "api-chat");
    ASSERT_EQ(ref.size(), 1u);
    const auto want_tokens = tokens_of(ref[0]["tokens"]);

    json body = {{"model", "x"}, {"messages", json::array({{{"role", "system"}, {"content", "You are terse."}},
                                                           {{"role", "user"}, {"content", "Tell me a story."}}})},
                 {"max_tokens", n}, {"temperature", 0}, {"return_tokens", true}};
    const http_reply r = api().post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["object"], "chat.completion");
    EXPECT_EQ(r.json["choices"][0]["message"]["role"], "assistant");
    const auto got = tokens_of(r.json["rest"]["tokens"]);
    ASSERT_EQ(check_greedy(*model_, rendered, got, want_tokens), "");
    EXPECT_EQ(r.json["choices"][0]["message"]["content"], text_of(got));
    EXPECT_EQ(r.json["usage"]["prompt_tokens"], ref[0]["n_prompt"]);

    body["stream"] = true;
    const sse_reply s = api().stream("/v1/chat/completions", body);
    ASSERT_TRUE(s.done) << s.raw;
    ASSERT_GE(s.events.size(), 2u);
    EXPECT_EQ(s.events[0]["object"], "chat.completion.chunk");
    EXPECT_EQ(s.events[0]["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(joined_text(s, true), text_of(got));
    EXPECT_FALSE(s.events.back()["choices"][0]["finish_reason"].is_null());

    // Content given as parts, and "developer" (OpenAI's newer "system"), render the same conversation.
    json parts = body;
    parts["stream"]   = false;
    parts["messages"] = json::array({{{"role", "developer"}, {"content", "You are terse."}},
                                     {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "Tell me "}},
                                                                                 {{"type", "text"}, {"text", "a story."}}})}}});
    const http_reply p = api().post("/v1/chat/completions", parts);
    ASSERT_EQ(p.status, 200) << p.body;
    EXPECT_EQ(p.json["choices"][0]["message"]["content"], text_of(got));
}

// llama-server's /tokenize and /detokenize: the model's own tokenizer, BOS only when asked, control tokens parsed.
TEST_F(ServerApi, TokenizeAndDetokenizeAsLlamaServer) {
    const std::string text = "Hello <|user|> world";
    const http_reply  plain = api().post("/tokenize", json{{"content", text}});
    ASSERT_EQ(plain.status, 200) << plain.body;
    EXPECT_EQ(tokens_of(plain.json["tokens"]), model_->vocab().tokenize(text, false, true));
    const http_reply bos = api().post("/tokenize", json{{"content", text}, {"add_special", true}});
    EXPECT_EQ(tokens_of(bos.json["tokens"]), model_->vocab().tokenize(text, true, true));
    const http_reply raw = api().post("/tokenize", json{{"content", text}, {"parse_special", false}});
    EXPECT_EQ(tokens_of(raw.json["tokens"]), model_->vocab().tokenize(text, false, false));
    EXPECT_GT(raw.json["tokens"].size(), plain.json["tokens"].size());  // "<|user|>" spelled out

    const http_reply pieces = api().post("/tokenize", json{{"content", text}, {"with_pieces", true}});
    ASSERT_EQ(pieces.json["tokens"].size(), plain.json["tokens"].size());
    std::string joined;
    for (size_t i = 0; i < pieces.json["tokens"].size(); ++i) {
        const json & t = pieces.json["tokens"][i];
        EXPECT_EQ(t["id"], plain.json["tokens"][i]);
        EXPECT_EQ(t["piece"], model_->vocab().piece(t["id"].get<int>()));
        joined += t["piece"].get<std::string>();
    }
    const http_reply de = api().post("/detokenize", json{{"tokens", plain.json["tokens"]}});
    ASSERT_EQ(de.status, 200) << de.body;
    EXPECT_EQ(de.json["content"], joined);
    EXPECT_NE(de.json["content"].get<std::string>().find("<|user|>"), std::string::npos);  // control tokens shown
    EXPECT_EQ(api().post("/detokenize", json{{"tokens", json::array()}}).json["content"], "");
    // The API key guards them as every other route but /health.
    EXPECT_EQ(client(srv_->port()).post("/tokenize", json{{"content", "x"}}).status, 401);
}

TEST_F(ServerApi, ConcurrentRequestsBeyondTheSlotsQueueAndStayLossless) {
    std::vector<std::string> prompts;
    for (int i = 0; i < 10; ++i) {  // 10 requests for 4 slots
        prompts.push_back("Request number " + std::to_string(i) + " says:");
    }
    const int  n   = 24;
    const auto ref = generate_no_spec(model_path_, prompts, n, "api-concurrent");
    ASSERT_EQ(ref.size(), prompts.size());
    std::vector<std::vector<int>> got(prompts.size());
    std::vector<std::string>      text(prompts.size());
    std::vector<int>              status(prompts.size(), 0);
    std::vector<std::thread>      threads;
    for (size_t i = 0; i < prompts.size(); ++i) {
        threads.emplace_back([&, i] {
            if (i % 2 == 0) {
                const http_reply r = api().post("/v1/completions", completion_body(prompts[i], n));
                status[i]          = r.status;
                if (r.status == 200) {
                    got[i]  = tokens_of(r.json["rest"]["tokens"]);
                    text[i] = r.json["choices"][0]["text"];
                }
            } else {
                const sse_reply r = api().stream("/v1/completions", completion_body(prompts[i], n, true));
                status[i]         = r.done ? r.status : -1;
                if (r.done && !r.events.empty()) {
                    got[i]  = tokens_of(r.events.back()["rest"]["tokens"]);
                    text[i] = joined_text(r, false);
                }
            }
        });
    }
    for (auto & t : threads) {
        t.join();
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_EQ(status[i], 200) << "request " << i;
        EXPECT_EQ(check_greedy(*model_, prompts[i], got[i], tokens_of(ref[i]["tokens"])), "") << "request " << i;
        EXPECT_EQ(text[i], text_of(got[i])) << "request " << i;
    }
}

TEST_F(ServerApi, DraftsFromPastOutputsAndHotAddedCorpusAreAcceptedLosslessly) {
    // A request repeated: its first output is in the online store, so the second one drafts from it.
    // (Prompts whose greedy text splits a UTF-8 character make `rest generate --json` fail; these do not.)
    const std::string prompt = "Say it again:";
    const int         n      = 48;
    const auto        ref    = generate_no_spec(model_path_, {prompt, "A hot-added corpus helps:"}, n, "api-history");
    ASSERT_EQ(ref.size(), 2u);
    const int        n_docs = api().get("/v1/corpus").json["history"]["n_documents"].get<int>();
    const http_reply first  = api().post("/v1/completions", completion_body(prompt, n));
    ASSERT_EQ(first.status, 200);
    // Finished outputs join the store off the engine thread: wait until this one has.
    auto wait_docs = [&](int n_min) {
        for (int i = 0; i < 500 && api().get("/v1/corpus").json["history"]["n_documents"].get<int>() < n_min; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    };
    wait_docs(n_docs + 1);
    const http_reply second = api().post("/v1/completions", completion_body(prompt, n));
    ASSERT_EQ(second.status, 200);
    wait_docs(n_docs + 2);
    EXPECT_EQ(check_greedy(*model_, prompt, tokens_of(second.json["rest"]["tokens"]), tokens_of(ref[0]["tokens"])), "");
    EXPECT_GT(second.json["rest"]["n_accepted"].get<int>(), n / 2) << second.json["rest"].dump();
    EXPECT_LT(second.json["rest"]["n_forward"].get<int>(), first.json["rest"]["n_forward"].get<int>());

    // POST /v1/corpus: the continuation, added before the request ever ran, is drafted and accepted.
    const http_reply before = api().get("/v1/corpus");
    ASSERT_EQ(before.status, 200) << before.body;
    const std::string doc = "A hot-added corpus helps:" + text_of(tokens_of(ref[1]["tokens"]));
    const http_reply  add = api().post("/v1/corpus", json{{"texts", json::array({doc, "another document"})}});
    ASSERT_EQ(add.status, 200) << add.body;
    EXPECT_EQ(add.json["added_documents"], 2);
    EXPECT_GT(add.json["added_tokens"].get<int>(), 0);
    const http_reply after = api().get("/v1/corpus");
    EXPECT_EQ(after.json["history"]["n_documents"].get<int>(), before.json["history"]["n_documents"].get<int>() + 2);
    EXPECT_TRUE(after.json["datastore"].is_null());

    const http_reply r = api().post("/v1/completions", completion_body("A hot-added corpus helps:", n));
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(check_greedy(*model_, "A hot-added corpus helps:", tokens_of(r.json["rest"]["tokens"]),
                           tokens_of(ref[1]["tokens"])),
              "");
    EXPECT_GT(r.json["rest"]["n_accepted"].get<int>(), n / 2) << r.json["rest"].dump();

    // Speculation off for one request: nothing drafted, same output.
    json off          = completion_body(prompt, n);
    off["speculate"]  = false;
    const http_reply p = api().post("/v1/completions", off);
    ASSERT_EQ(p.status, 200);
    EXPECT_EQ(p.json["rest"]["n_drafted"], 0);
    EXPECT_EQ(check_greedy(*model_, prompt, tokens_of(p.json["rest"]["tokens"]), tokens_of(ref[0]["tokens"])), "");
}

TEST_F(ServerApi, StopStringsCutTheTextStreamedOrNot) {
    // Plain decoding (speculate: false) on an otherwise idle server, so the runs below repeat this one exactly.
    const int n    = 40;
    json      body = completion_body(k_prompts[0], n);
    body["speculate"] = false;
    const http_reply plain = api().post("/v1/completions", body);
    ASSERT_EQ(plain.status, 200) << plain.body;
    const std::string full = plain.json["choices"][0]["text"];
    ASSERT_GT(full.size(), 40u);
    // A stop string from the middle of the text (possibly spanning two tokens), on character boundaries.
    auto char_start = [&](size_t i) {
        while (i < full.size() && ((unsigned char) full[i] & 0xC0) == 0x80) {
            ++i;
        }
        return i;
    };
    const size_t      b    = char_start(full.size() / 2);
    const std::string stop = full.substr(b, char_start(b + 4) - b);
    const std::string want = full.substr(0, full.find(stop));

    body["stop"] = json::array({stop, "never-appears-zq"});
    const http_reply r = api().post("/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["choices"][0]["text"], want);
    EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");

    body["stream"] = true;
    const sse_reply s = api().stream("/v1/completions", body);
    ASSERT_TRUE(s.done);
    EXPECT_EQ(joined_text(s, false), want);
    EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerApi, BadInputGetsOpenAIStyleErrors) {
    struct bad_case {
        std::string path;
        std::string body;
        int         status;
        std::string param;  // "" : not checked
    };
    const std::string big_prompt(6000, 'x');  // far beyond the 256 positions of a slot
    const std::vector<bad_case> cases = {
        {"/v1/completions", "{not json", 400, ""},
        {"/v1/completions", "", 400, ""},
        {"/v1/completions", "[1, 2]", 400, ""},
        {"/v1/completions", R"({"max_tokens": 4})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": 5})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": []})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": ["a", "b"]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": [1, -2]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": [99999999]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": "hi", "max_tokens": "4"})", 400, "max_tokens"},
        {"/v1/completions", R"({"prompt": "hi", "max_tokens": 2.5})", 400, "max_tokens"},
        {"/v1/completions", R"({"prompt": "hi", "max_tokens": 0})", 400, "max_tokens"},
        {"/v1/completions", R"({"prompt": "hi", "max_tokens": 5000})", 400, "max_tokens"},
        {"/v1/completions", R"({"prompt": "hi", "temperature": "hot"})", 400, "temperature"},
        {"/v1/completions", R"({"prompt": "hi", "temperature": 3})", 400, "temperature"},
        {"/v1/completions", R"({"prompt": "hi", "top_p": 0})", 400, "top_p"},
        {"/v1/completions", R"({"prompt": "hi", "top_k": -1})", 400, "top_k"},
        {"/v1/completions", R"({"prompt": "hi", "stream": "yes"})", 400, "stream"},
        {"/v1/completions", R"({"prompt": "hi", "stop": 7})", 400, "stop"},
        {"/v1/completions", R"({"prompt": "hi", "stop": [""]})", 400, "stop"},
        {"/v1/completions", R"({"prompt": "hi", "n": 2})", 400, "n"},
        {"/v1/completions", R"({"prompt": "hi", "seed": "x"})", 400, "seed"},
        {"/v1/completions", R"({"prompt": "hi", "echo": true})", 400, "echo"},
        {"/v1/completions", R"({"prompt": "hi", "logprobs": 21})", 400, "logprobs"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", 400,
         "top_logprobs"},
        {"/v1/completions", R"({"prompt": "hi", "frobnicate": 1})", 400, "frobnicate"},
        {"/v1/completions", R"({"prompt": "hi", "messages": []})", 400, "messages"},
        {"/v1/completions", json{{"prompt", big_prompt}}.dump(), 400, "prompt"},
        {"/v1/chat/completions", R"({"prompt": "hi"})", 400, "prompt"},
        {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages": [{"content": "hi"}]})", 400, "messages[0].role"},
        {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400, "messages[0].role"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
         "messages[0].content"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})",
         400, "tools"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 900})",
         400, "max_tokens"},
        {"/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", big_prompt}}}}}.dump(), 400,
         "messages"},
        {"/v1/corpus", R"({"text": 5})", 400, "text"},
        {"/v1/corpus", R"({"texts": ["a", 1]})", 400, "texts"},
        {"/v1/corpus", R"({})", 400, ""},
        {"/v1/corpus", R"({"text": ""})", 400, "text"},
        {"/v1/corpus", "nope", 400, ""},
        {"/tokenize", "{}", 400, "content"},
        {"/tokenize", R"({"content": 5})", 400, "content"},
        {"/tokenize", R"({"content": [99999999]})", 400, "content"},
        {"/tokenize", R"({"content": "a", "with_pieces": 1})", 400, "with_pieces"},
        {"/tokenize", R"({"content": "a", "add_special": "no"})", 400, "add_special"},
        {"/detokenize", "{}", 400, "tokens"},
        {"/detokenize", R"({"tokens": "1 2"})", 400, "tokens"},
        {"/detokenize", R"({"tokens": [99999999]})", 400, "tokens"},
        {"/detokenize", R"({"tokens": [-3]})", 400, "tokens"},
        {"/apply-template", "{}", 400, "messages"},
        {"/apply-template", R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400, "messages[0].role"},
        {"/v1/nothing-here", "{}", 404, ""},
    };
    for (const auto & c : cases) {
        const http_reply r = api().post(c.path, c.body);
        EXPECT_EQ(r.status, c.status) << c.path << " " << c.body.substr(0, 100) << " -> " << r.body;
        ASSERT_TRUE(r.json.is_object()) << c.body.substr(0, 100) << " -> " << r.body;
        ASSERT_TRUE(r.json.contains("error")) << r.body;
        EXPECT_TRUE(r.json["error"]["message"].is_string() && !r.json["error"]["message"].get<std::string>().empty());
        EXPECT_TRUE(r.json["error"]["type"].is_string());
        if (!c.param.empty()) {
            EXPECT_EQ(r.json["error"]["param"], c.param) << c.body.substr(0, 100) << " -> " << r.body;
        }
    }
    // A known path asked with another method: 405, an OpenAI-style error and the methods it takes; an unknown path
    // stays 404.
    for (const auto & [r, allow] : std::vector<std::pair<http_reply, std::string>>{
             {api().get("/v1/completions"), "POST"}, {api().put("/v1/chat/completions", "{}"), "POST"},
             {api().del("/v1/corpora"), "GET, POST"}, {api().put("/v1/corpora", "{}"), "GET, POST"},
             {api().get("/v1/corpora/some-name"), "DELETE"}, {api().post("/health", std::string("{}")), "GET"},
             {api().del("/v1/models"), "GET"}, {api().get("/tokenize"), "POST"}, {api().del("/v1/corpus"), "GET, POST"}}) {
        EXPECT_EQ(r.status, 405) << allow << " " << r.body;
        EXPECT_EQ(r.allow, allow) << r.body;
        EXPECT_EQ(r.json["error"]["code"], "method_not_allowed") << r.body;
    }
    EXPECT_EQ(api().get("/v1/no-such-path").status, 404);
    // Bodies beyond the limit (8 MiB) are refused before they are parsed.
    const http_reply big = api().post("/v1/completions", std::string(9u << 20, ' '));
    EXPECT_EQ(big.status, 413) << big.body.substr(0, 200);
    // A compressed body is refused before it is read: the limit holds for the bytes received, and a small gzip can
    // inflate to any size (cpp-httplib's client gzips this one). A valid request, so that inflating it would pass.
    {
        httplib::Client cli("127.0.0.1", srv_->port());
        cli.set_compress(true);
        const httplib::Headers h{{"Authorization", "Bearer " + std::string(k_key)}};
        const auto r = cli.Post("/v1/completions", h, R"({"prompt": "Once", "max_tokens": 1})", "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 415) << r->body;
        EXPECT_NE(r->body.find("Content-Encoding"), std::string::npos) << r->body;
    }
    // A POST with neither Content-Length nor chunked encoding has no body: answered at once (411), where the server
    // used to read until the client closed (30 s, then "malformed HTTP request").
    {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        ASSERT_GE(fd, 0);
        sockaddr_in a{};
        a.sin_family      = AF_INET;
        a.sin_port        = htons((uint16_t) srv_->port());
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
        timeval tv{5, 0};  // the old behaviour waits 30 s: a reply within 5 s or none
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + std::string(k_key) +
                                "\r\n\r\n";
        ASSERT_EQ(::send(fd, req.data(), req.size(), 0), (ssize_t) req.size());
        char       buf[512] = {};
        const auto n        = ::recv(fd, buf, sizeof(buf) - 1, 0);
        ::close(fd);
        ASSERT_GT(n, 0) << "no reply within 5 s";
        EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 411", 0), 0u) << buf;
    }
    // The server is still healthy, with no slot held.
    const http_reply h = client(srv_->port()).get("/health");
    EXPECT_EQ(h.status, 200);
}

// Opens a connection, sends a non-streaming request and closes the socket without reading the reply.
void send_and_vanish(int port, const std::string & body) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family      = AF_INET;
    a.sin_port        = htons((uint16_t) port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + std::string(k_key) +
                            "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, req.data(), req.size(), 0), (ssize_t) req.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ::close(fd);
}

double cancelled_count(const client & c) {
    return std::max(0.0, metric_value(c.get("/metrics").body, "rest_generations_total{reason=\"cancelled\"}"));
}

// Polls /health until no slot is busy (generous bound; a freed slot shows within one engine step).
bool slots_idle(int port) {
    for (int i = 0; i < 500; ++i) {
        const http_reply h = client(port).get("/health");
        if (h.status == 200 && h.json["slots_busy"] == 0 && h.json["queue"] == 0) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

TEST_F(ServerApi, DisconnectedClientsFreeTheirSlot) {
    ASSERT_TRUE(slots_idle(srv_->port()));
    const double c0 = cancelled_count(api());
    // Streaming: read three events, then hang up. 250 tokens take far longer than noticing the hang-up.
    json body = completion_body("Tell me everything", 250, true);
    const sse_reply s = api().stream("/v1/completions", body, 3);
    EXPECT_EQ(s.events.size(), 3u);
    EXPECT_FALSE(s.done);
    EXPECT_TRUE(slots_idle(srv_->port()));
    // Non-streaming: the client sends and goes away before any byte of the reply.
    body["stream"] = false;
    send_and_vanish(srv_->port(), body.dump());
    EXPECT_TRUE(slots_idle(srv_->port()));
    EXPECT_GE(cancelled_count(api()), c0 + 2);
}

TEST_F(ServerApi, MetricsArePrometheusText) {
    ASSERT_EQ(api().post("/v1/completions", completion_body("metrics", 8)).status, 200);
    const http_reply m = api().get("/metrics");
    ASSERT_EQ(m.status, 200);
    EXPECT_EQ(m.content_type.rfind("text/plain", 0), 0u) << m.content_type;
    const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? -?[0-9.e+-]+(inf)?$)");
    std::istringstream in(m.body);
    std::string        line;
    int                n_samples = 0;
    while (std::getline(in, line)) {
        if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
            continue;
        }
        EXPECT_TRUE(std::regex_match(line, sample)) << line;
        ++n_samples;
    }
    EXPECT_GT(n_samples, 20);
    for (const char * series : {"rest_prompt_tokens_total", "rest_generated_tokens_total", "rest_target_forwards_total",
                                "rest_tokens_per_forward", "rest_decode_steps_total"}) {
        EXPECT_GT(metric_value(m.body, series), 0) << series;
    }
    for (const char * series : {"rest_draft_tokens_total", "rest_accepted_tokens_total", "rest_draft_seconds_total",
                                "rest_verify_seconds_total", "rest_slots_busy", "rest_queue_depth"}) {
        EXPECT_GE(metric_value(m.body, series), 0) << series;
    }
    EXPECT_EQ(metric_value(m.body, "rest_slots"), 4);
    EXPECT_GT(metric_value(m.body, "rest_requests_total{endpoint=\"completions\"}"), 0);
}

// ---- Streamed log probabilities ----
//
// The rule both shapes follow: the whole response carries token i's log probabilities iff its piece starts before
// the end of the returned text (EOG tokens excluded); a stream chunk that brings the text to byte B carries those of
// the tokens not sent yet whose pieces start before B. So the chunks' log probabilities, joined, are the response's.

namespace {

// The pieces of a response's tokens that can be text: up to the first end-of-generation token.
// Whether s (2 to 4 bytes) can begin a valid UTF-8 sequence: padded with continuation bytes (any from the third
// byte on) it is valid.
bool utf8_prefix_ok(std::string s, size_t len) {
    s.resize(len, '\x80');
    return rest::find_invalid_utf8(s) == std::string_view::npos;
}

// The pieces as a client reads them: the JSON text writer (nlohmann's replace handler) turns each invalid UTF-8
// sequence (the bytes it accepted before one that cannot follow them) into U+FFFD, 3 bytes, and reads the rejected
// byte again. Random weights emit such bytes (a lone lead byte before another character), and the stream's
// offsets are the text's as sent. A piece that ends inside a sequence keeps its share of its bytes.
std::vector<std::string> as_sent(const std::vector<std::string> & raw_pieces) {
    std::string         raw;
    std::vector<size_t> starts;
    for (const auto & p : raw_pieces) {
        starts.push_back(raw.size());
        raw += p;
    }
    std::string         out;
    std::vector<size_t> at(raw.size() + 1);  // where each raw byte's text begins in out
    for (size_t i = 0; i < raw.size();) {
        const auto   c   = (unsigned char) raw[i];
        const size_t len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3
                         : c >= 0xF0 && c < 0xF5                 ? 4
                                                                  : 0;
        size_t       ok  = len == 0 ? 0 : 1;  // bytes accepted so far
        while (ok > 0 && ok < len && i + ok < raw.size() && utf8_prefix_ok(raw.substr(i, ok + 1), len)) ++ok;
        if (ok == len && len > 0) {
            for (size_t j = 0; j < len; ++j) at[i + j] = out.size() + j;
            out += raw.substr(i, len);
            i += len;
        } else {
            const size_t span = std::max<size_t>(ok, 1);
            for (size_t j = 0; j < span; ++j) at[i + j] = out.size();
            out += "\xEF\xBF\xBD";
            i += span;
        }
    }
    at[raw.size()] = out.size();
    std::vector<std::string> pieces;
    for (size_t k = 0; k < starts.size(); ++k) {
        const size_t b = at[starts[k]], e = k + 1 < starts.size() ? at[starts[k + 1]] : out.size();
        pieces.push_back(out.substr(b, e - b));
    }
    return pieces;
}

// The tokens' pieces, as generated (raw) or as a client reads them.
std::vector<std::string> raw_pieces(const rest::model & m, const std::vector<int> & tokens) {
    std::vector<std::string> pieces;
    for (const int t : tokens) {
        if (m.is_eog(t)) {
            break;
        }
        pieces.push_back(m.vocab().piece(t));
    }
    return pieces;
}

std::vector<std::string> text_pieces(const rest::model & m, const std::vector<int> & tokens) {
    return as_sent(raw_pieces(m, tokens));
}

// How many of the pieces start before byte `end` of their concatenation.
size_t n_starting_before(const std::vector<std::string> & pieces, size_t end) {
    size_t n = 0, start = 0;
    while (n < pieces.size() && start < end) {
        start += pieces[n++].size();
    }
    return n;
}

size_t n_logprob_entries(const json & lp, bool chat) {
    if (lp.is_null()) {
        return 0;
    }
    return chat ? lp["content"].size() : lp["tokens"].size();
}

// The stream's chunks' choice.logprobs joined into one, in the unstreamed response's shape.
json joined_logprobs(const sse_reply & r, bool chat) {
    json out = chat ? json{{"content", json::array()}}
                    : json{{"tokens", json::array()}, {"token_logprobs", json::array()},
                           {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    for (const auto & ev : r.events) {
        if (!ev.contains("choices") || ev["choices"].empty() || ev["choices"][0]["logprobs"].is_null()) {
            continue;
        }
        for (auto & [key, values] : out.items()) {
            for (const auto & v : ev["choices"][0]["logprobs"][key]) {
                values.push_back(v);
            }
        }
    }
    return out;
}

// Checks the chunk rule on a stream: after each chunk, the log probabilities sent so far are those of the tokens
// whose pieces start before the end of the text sent so far. Returns "" or what broke it.
std::string check_chunk_rule(const sse_reply & r, bool chat, const std::vector<std::string> & pieces) {
    size_t text_end = 0, n_sent = 0;
    for (size_t i = 0; i < r.events.size(); ++i) {
        const json & ev = r.events[i];
        if (!ev.contains("choices") || ev["choices"].empty()) {
            continue;
        }
        const json & c = ev["choices"][0];
        if (chat) {
            if (c["delta"].contains("content")) {
                text_end += c["delta"]["content"].get<std::string>().size();
            }
        } else {
            text_end += c["text"].get<std::string>().size();
        }
        n_sent += n_logprob_entries(c["logprobs"], chat);
        const size_t want = n_starting_before(pieces, text_end);
        if (n_sent != want) {
            return "after event " + std::to_string(i) + " (text at byte " + std::to_string(text_end) + "): " +
                   std::to_string(n_sent) + " log probabilities sent, the rule says " + std::to_string(want);
        }
    }
    return "";
}

// The joined stream's log probabilities against the whole response's: the same tokens and alternatives, values
// within tol (the runs verify different drafts, so batched rounding may differ).
void expect_same_logprobs(const json & streamed, const json & whole, bool chat, double tol) {
    if (chat) {
        const json & a = streamed["content"];
        const json & b = whole["content"];
        ASSERT_EQ(a.size(), b.size()) << a.dump() << "\nvs\n" << b.dump();
        for (size_t i = 0; i < a.size(); ++i) {
            EXPECT_EQ(a[i]["token"], b[i]["token"]) << i;
            EXPECT_EQ(a[i]["bytes"], b[i]["bytes"]) << i;
            EXPECT_NEAR(a[i]["logprob"].get<double>(), b[i]["logprob"].get<double>(), tol) << i;
            ASSERT_EQ(a[i]["top_logprobs"].size(), b[i]["top_logprobs"].size()) << i;
            for (size_t k = 0; k < a[i]["top_logprobs"].size(); ++k) {
                EXPECT_EQ(a[i]["top_logprobs"][k]["token"], b[i]["top_logprobs"][k]["token"]) << i << "/" << k;
                EXPECT_NEAR(a[i]["top_logprobs"][k]["logprob"].get<double>(),
                            b[i]["top_logprobs"][k]["logprob"].get<double>(), tol) << i << "/" << k;
            }
        }
        return;
    }
    ASSERT_EQ(streamed["tokens"], whole["tokens"]);
    EXPECT_EQ(streamed["text_offset"], whole["text_offset"]);
    ASSERT_EQ(streamed["token_logprobs"].size(), whole["token_logprobs"].size());
    ASSERT_EQ(streamed["top_logprobs"].size(), whole["top_logprobs"].size());
    for (size_t i = 0; i < whole["token_logprobs"].size(); ++i) {
        EXPECT_NEAR(streamed["token_logprobs"][i].get<double>(), whole["token_logprobs"][i].get<double>(), tol) << i;
        const json & ta = streamed["top_logprobs"][i];
        const json & tb = whole["top_logprobs"][i];
        ASSERT_EQ(ta.size(), tb.size()) << i;
        for (const auto & [piece, v] : tb.items()) {
            ASSERT_TRUE(ta.contains(piece)) << i << ": " << piece;
            EXPECT_NEAR(ta[piece].get<double>(), v.get<double>(), tol) << i << ": " << piece;
        }
    }
}

// A stop string that first occurs strictly inside a token's piece past the text's first third, so the token that
// completes it is cut in the middle (its start is text, its end is not). "" when the text has none.
std::string stop_inside_a_piece(const std::vector<std::string> & pieces) {
    std::string full;
    for (const auto & p : pieces) full += p;
    std::vector<size_t> starts;
    size_t              start = 0;
    for (const auto & p : pieces) {
        starts.push_back(start);
        start += p.size();
    }
    for (size_t k = 0; k < pieces.size(); ++k) {
        if (starts[k] < full.size() / 3 || pieces[k].size() < 3) {
            continue;
        }
        const std::string stop = full.substr(starts[k] + 1, 3);
        const bool ascii = std::all_of(stop.begin(), stop.end(), [](char c) { return (unsigned char) c < 0x80; });
        const size_t      at    = full.find(stop);
        if (ascii && at != 0 && std::find(starts.begin(), starts.end(), at) == starts.end()) {
            return stop;
        }
    }
    return "";
}

// Stop strings that never match but whose proper prefixes are whole pieces of the text (up to 15, so 16 stops in
// all): the stream holds each such piece back until the next one decides, and its token's log probabilities must
// wait with it. (Whether a chunk ends there depends on when the HTTP thread reads, so many chances are given.)
json stops_held_back(const std::vector<std::string> & pieces) {
    json stops = json::array();
    for (size_t k = 2; k < pieces.size() && stops.size() < 15; ++k) {
        const std::string & p = pieces[k];
        const std::string   s = p + "\x01";
        if (!p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return (unsigned char) c < 0x80; }) &&
            std::find(stops.begin(), stops.end(), s) == stops.end()) {
            stops.push_back(s);
        }
    }
    return stops;
}

// One request, streamed and not, both with a stop string cut inside a piece (and others that hold text back): the stream's chunks follow the rule
// and their log probabilities join into the response's. Returns the stream (for further checks).
// Without cut_at_stop, the request as given.
sse_reply expect_stream_matches(const client & c, const rest::model & m, const std::string & path, json body,
                                bool chat, double tol, bool cut_at_stop = true) {
    body["return_tokens"] = true;
    body["stream"]        = false;
    std::string stop;
    if (cut_at_stop) {
        const http_reply full = c.post(path, body);
        EXPECT_EQ(full.status, 200) << full.body;
        if (full.status != 200) return {};
        const std::vector<std::string> pieces = text_pieces(m, tokens_of(full.json["rest"]["tokens"]));
        stop = stop_inside_a_piece(pieces);
        EXPECT_NE(stop, "") << "no piece to cut inside: " << full.body;
        body["stop"] = stops_held_back(pieces);
        body["stop"].push_back(stop);
    }

    const http_reply whole = c.post(path, body);
    EXPECT_EQ(whole.status, 200) << whole.body;
    body["stream"]        = true;
    const sse_reply s     = c.stream(path, body);
    EXPECT_TRUE(s.done) << s.raw;
    if (whole.status != 200 || !s.done || s.events.empty()) return s;
    const json & choice = whole.json["choices"][0];
    if (cut_at_stop) {
        EXPECT_EQ(choice["finish_reason"], "stop") << "the stop string '" << stop << "' did not end the text";
    }
    const std::string text = chat ? choice["message"]["content"].get<std::string>() : choice["text"].get<std::string>();
    EXPECT_EQ(joined_text(s, chat), text);
    const auto tokens = tokens_of(whole.json["rest"]["tokens"]);
    EXPECT_EQ(tokens_of(s.events.back()["rest"]["tokens"]), tokens) << "the two runs generated differently";
    const std::vector<std::string> pieces = text_pieces(m, tokens);
    // The token that completed the stop string starts inside the text and ends past it: its log probabilities are
    // included, so the entries cover more than the text.
    const size_t n = n_starting_before(pieces, text.size());
    size_t       covered = 0;
    for (size_t i = 0; i < n; ++i) covered += pieces[i].size();
    if (cut_at_stop) {
        EXPECT_GT(covered, text.size()) << "stop '" << stop << "' did not cut inside a piece";
    }
    EXPECT_EQ(n_logprob_entries(choice["logprobs"], chat), n);
    EXPECT_EQ(check_chunk_rule(s, chat, pieces), "");
    expect_same_logprobs(joined_logprobs(s, chat), choice["logprobs"], chat, tol);
    EXPECT_TRUE(s.events.back()["choices"][0]["logprobs"].is_null());  // the final chunk releases no text
    return s;
}

}  // namespace

// Chat on the fixture (it has a chat template): greedy and sampled with a seed, with top alternatives. Plain
// decoding: near-ties of the random weights could make two speculative runs differ; this way the two runs are the
// same computation and their values must be equal, not close.
TEST_F(ServerApi, StreamedChatLogprobsEqualTheResponse) {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "Tell me a long story."}}})},
                 {"max_tokens", 40}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3},
                 {"speculate", false}};
    expect_stream_matches(api(), *model_, "/v1/chat/completions", body, true, 0);
    body["temperature"] = 0.9;
    body["seed"]        = 1234;
    expect_stream_matches(api(), *model_, "/v1/chat/completions", body, true, 0);
    body["logprobs"] = false;
    body.erase("top_logprobs");
    body["stream"]       = true;
    const sse_reply none = api().stream("/v1/chat/completions", body);
    ASSERT_TRUE(none.done);
    for (const auto & ev : none.events) {
        if (!ev["choices"].empty()) EXPECT_TRUE(ev["choices"][0]["logprobs"].is_null()) << ev.dump();
    }
}

namespace {

// A piece that begins a multi-byte UTF-8 character it does not finish (a byte token splitting a character).
bool splits_a_character(const std::string & piece) {
    for (size_t i = 0; i < piece.size();) {
        const unsigned char c   = (unsigned char) piece[i];
        const size_t        len = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 1;
        if (i + len > piece.size()) {
            return true;
        }
        i += len;
    }
    return false;
}

// Text that ends with a lead byte whose character has not all its bytes yet.
bool ends_inside_a_character(const std::string & t) {
    for (size_t back = 1; back <= 4 && back <= t.size(); ++back) {
        const unsigned char c = (unsigned char) t[t.size() - back];
        if ((c & 0xC0) != 0x80) {
            const size_t len = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 1;
            return len > back;
        }
    }
    return false;
}

}  // namespace

// A character split across byte tokens is held back until its last byte: its tokens' log probabilities wait with
// it. Plain decoding (one token per step) makes each byte its own step, so the stream really sees the split. A
// random-weight fixture with stories260K's tokenizer, where 256 of the 512 tokens are bytes, emits such splits at
// temperature 1.5; the seeds below are searched for an output with a valid character split across pieces (the
// phi-3 fixture's 32,000 tokens hold the same 256 bytes: on one CPU none of 512 seeds gave a valid split, and a
// lone lead byte, which the JSON text carries as U+FFFD, reads the same whether it was held back or not).
class ServerByteVocab : public stories_server_test<ServerByteVocab> {
  public:
    static std::vector<std::string> server_args() { return {"-c", "512", "--np", "1", "-t", "1"}; }
    static const char *             log_name() { return "server-bytes.log"; }
    static std::string              model_path() {
        rest::fixture_params p;
        p.vocab = shared_data() + "/models/stories260K.gguf";
        return fixture_model(p);
    }
};

TEST_F(ServerByteVocab, StreamedLogprobsWaitForASplitCharacter) {
    const client c(srv_->port());
    json body = completion_body("Hello world", 48);
    body["temperature"]   = 1.5;
    body["speculate"]     = false;
    body["logprobs"]      = 1;
    int seed              = -1;
    for (int s = 1; s <= 64 && seed < 0; ++s) {
        body["seed"]       = s;
        const http_reply r = c.post("/v1/completions", body);
        ASSERT_EQ(r.status, 200) << r.body;
        // As a client reads them: a piece that still ends inside a character there ends inside a valid one.
        for (const auto & p : text_pieces(*model_, tokens_of(r.json["rest"]["tokens"]))) {
            if (splits_a_character(p)) {
                seed = s;
                break;
            }
        }
    }
    ASSERT_GE(seed, 0) << "no seed made the fixture split a character";
    body["seed"]      = seed;
    const sse_reply s = expect_stream_matches(c, *model_, "/v1/completions", body, false, 1e-4, false);
    // Every text chunk but the last (which ends the generation, perhaps inside a character) ends on a character
    // boundary: the split bytes were held back, not sent.
    std::vector<std::string> texts;
    for (const auto & ev : s.events) {
        const std::string t = ev["choices"][0]["text"];
        if (!t.empty()) texts.push_back(t);
    }
    for (size_t i = 0; i + 1 < texts.size(); ++i) {
        EXPECT_FALSE(ends_inside_a_character(texts[i])) << "chunk " << i;
    }
}

namespace {

double metric_or_zero(const std::string & text, const std::string & series) {
    return std::max(0.0, metric_value(text, series));
}

double accepted_at(const std::string & text, int pos) {
    return metric_value(text, "rest:spec_decode_num_accepted_tokens_per_pos_total{position=\"" + std::to_string(pos) +
                                  "\"}");
}

}  // namespace

// vLLM's speculative-decoding counters and the prompt figures move by what the responses report.
TEST_F(ServerApi, StandardMetricsAgreeWithTheResponses) {
    ASSERT_TRUE(slots_idle(srv_->port()));
    const std::string before = api().get("/metrics").body;
    std::int64_t      n_drafted = 0, n_accepted = 0, n_steps = 0, n_prompt = 0, n_cached = 0;
    int               n_requests = 0;
    // A prompt repeated: later runs draft from the earlier outputs (the online store), so drafts get accepted.
    for (int i = 0; i < 4; ++i) {
        json body = completion_body("Metrics, metrics, metrics:", 32);
        if (i == 3) body["speculate"] = false;
        const http_reply r = api().post("/v1/completions", body);
        ASSERT_EQ(r.status, 200) << r.body;
        n_drafted += r.json["rest"]["n_drafted"].get<std::int64_t>();
        n_accepted += r.json["rest"]["n_accepted"].get<std::int64_t>();
        n_steps += i == 3 ? 0 : r.json["rest"]["n_steps"].get<std::int64_t>();
        n_prompt += r.json["usage"]["prompt_tokens"].get<std::int64_t>();
        const json & details = r.json["usage"].value("prompt_tokens_details", json::object());
        n_cached += details.value("cached_tokens", 0);
        ++n_requests;
        if (i == 0) {  // the output joins the online store off the engine thread
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    const std::string after = api().get("/metrics").body;
    auto delta = [&](const std::string & series) {
        return metric_or_zero(after, series) - metric_or_zero(before, series);
    };
    ASSERT_GE(metric_value(after, "rest:spec_decode_num_drafts_total"), 0) << after;
    EXPECT_GT(n_accepted, 0);
    EXPECT_EQ(delta("rest:spec_decode_num_draft_tokens_total"), (double) n_drafted);
    EXPECT_EQ(delta("rest:spec_decode_num_accepted_tokens_total"), (double) n_accepted);
    const double drafts = delta("rest:spec_decode_num_drafts_total");
    EXPECT_LE(drafts, (double) n_steps);      // at most one draft per request step, none with speculation off
    EXPECT_GE(drafts * 8, (double) n_drafted);  // --draft-fixed 8: at most 8 draft tokens a draft
    EXPECT_GT(drafts, 0);
    // Position i counts the drafts that accepted more than i tokens: they add up to the accepted tokens, never
    // grow with the position, and position 0 counts drafts.
    double sum = 0, prev = drafts;
    for (int pos = 0; accepted_at(after, pos) >= 0; ++pos) {
        const double d = accepted_at(after, pos) - std::max(0.0, accepted_at(before, pos));
        EXPECT_LE(d, prev) << "position " << pos;
        prev = d;
        sum += d;
    }
    EXPECT_EQ(sum, (double) n_accepted);
    EXPECT_EQ(delta("rest:prompt_tokens_total"), (double) n_prompt);
    EXPECT_EQ(delta("rest:prompt_tokens_cached_total"), (double) n_cached);
    EXPECT_EQ(delta("rest:request_prefill_time_seconds_count"), (double) n_requests);
    EXPECT_EQ(delta("rest:request_prefill_time_seconds_bucket{le=\"+Inf\"}"), (double) n_requests);
    EXPECT_GT(delta("rest:request_prefill_time_seconds_sum"), 0);
    // The same figures under today's names.
    EXPECT_EQ(metric_value(after, "rest:spec_decode_num_draft_tokens_total"),
              metric_value(after, "rest_draft_tokens_total"));
    EXPECT_EQ(metric_value(after, "rest:spec_decode_num_accepted_tokens_total"),
              metric_value(after, "rest_accepted_tokens_total"));
}

// stories260K (a real model, so no near-ties to speak of) with speculation: chunks release several tokens at once.
class ServerStories : public stories_server_test<ServerStories> {
  public:
    static std::vector<std::string> server_args() { return {"-c", "512", "--np", "2", "-t", "1", "--draft-fixed", "8"}; }
    static const char *             log_name() { return "server-stories.log"; }
};

// Plain decoding repeats its computation exactly, so there the values must be equal; speculative runs verify
// different drafts (the online store grows with every run), and batched rounding moves values by up to ~5e-4 here,
// and by 1.0-2.0e-3 in one fresh-clone CI run (2026-12-03; its cause not found, and not seen again in 15 runs, with
// and without a busy core): hence 5e-3, still far below what a wrong token or a misplaced chunk moves. The tokens
// and the text stay exact.
TEST_F(ServerStories, StreamedCompletionLogprobsEqualTheResponse) {
    const client c(srv_->port());
    json body = {{"prompt", "Once upon a time, there was a little"}, {"max_tokens", 64}, {"temperature", 0},
                 {"logprobs", 3}, {"speculate", false}};
    expect_stream_matches(c, *model_, "/v1/completions", body, false, 0);
    body["speculate"] = true;
    for (int run = 0; run < 2; ++run) {  // the second run drafts from the earlier outputs (online store)
        const sse_reply s = expect_stream_matches(c, *model_, "/v1/completions", body, false, 5e-3);
        if (run == 1) {
            int most = 0;  // speculation accepted drafts: some chunk released several tokens
            for (const auto & ev : s.events) {
                if (!ev["choices"].empty() && !ev["choices"][0]["logprobs"].is_null()) {
                    most = std::max(most, (int) ev["choices"][0]["logprobs"]["tokens"].size());
                }
            }
            EXPECT_GT(most, 1);
        }
    }
    body["temperature"] = 0.8;
    body["seed"]        = 42;
    expect_stream_matches(c, *model_, "/v1/completions", body, false, 5e-3);
    body["speculate"] = false;
    expect_stream_matches(c, *model_, "/v1/completions", body, false, 0);
}
