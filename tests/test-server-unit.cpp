// The server's pure parts: OpenAI request validation, the text stream that cuts stop strings and holds back
// partial UTF-8 (checked against a naive reference on seeded random piece sequences), a job's published text and
// log probabilities, stream chunks' shapes, /tokenize and /detokenize bodies over a fake byte tokenizer, and the
// rewriting of llama.cpp's option spellings (apps/llama-args.h).
#include "oai-request.h"
#include "oai-response.h"
#include "job.h"
#include "metrics.h"
#include "text-stream.h"
#include "api-error.h"
#include "llama-args.h"
#include "token-request.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

int status_of(const std::string & body, api_kind kind, std::string * param = nullptr) {
    try {
        parse_completion_request(body, kind);
        return 200;
    } catch (const api_error & e) {
        if (param) {
            *param = e.param;
        }
        return e.status;
    }
}

// Naive reference: the whole text cut at the earliest occurrence of any stop string.
std::string ref_cut(const std::string & text, const std::vector<std::string> & stops, bool * stopped) {
    size_t cut = std::string::npos;
    for (const auto & s : stops) {
        cut = std::min(cut, text.find(s));
    }
    *stopped = cut != std::string::npos;
    return *stopped ? text.substr(0, cut) : text;
}

bool valid_utf8_prefix_end(const std::string & s) {
    // True when s does not end inside a multi-byte character.
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = (unsigned char) s[i];
        const size_t        n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (i + n > s.size()) {
            return false;
        }
        i += n;
    }
    return true;
}

}  // namespace

TEST(ServerRequest, DefaultsAreOpenAIs) {
    const completion_spec s = parse_completion_request(R"({"prompt": "hi"})", api_kind::completion);
    EXPECT_EQ(s.prompt_text, "hi");
    EXPECT_EQ(s.max_tokens, -1);
    EXPECT_FLOAT_EQ(s.sampling.temp, 1.0f);
    EXPECT_FLOAT_EQ(s.sampling.top_p, 1.0f);
    EXPECT_EQ(s.sampling.top_k, 0);
    EXPECT_FLOAT_EQ(s.sampling.min_p, 0.0f);
    EXPECT_EQ(s.sampling.seed, 0xFFFFFFFFu);
    EXPECT_FALSE(s.stream);
    EXPECT_TRUE(s.speculate);
}

TEST(ServerRequest, FieldsAreRead) {
    const completion_spec s = parse_completion_request(
        R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3,
            "seed": 42, "stop": "\n", "n": 1, "stream": true, "stream_options": {"include_usage": true},
            "user": "u", "logit_bias": {}, "logprobs": null, "speculate": false, "draft_max": 4})",
        api_kind::completion);
    EXPECT_TRUE(s.has_prompt_tokens);
    EXPECT_EQ(s.prompt_tokens, (std::vector<rest::token_id>{1, 2, 3}));
    EXPECT_EQ(s.max_tokens, 7);
    EXPECT_TRUE(s.sampling.greedy());
    EXPECT_EQ(s.sampling.top_k, 3);
    EXPECT_EQ(s.sampling.seed, 42u);
    EXPECT_EQ(s.stop, (std::vector<std::string>{"\n"}));
    EXPECT_TRUE(s.stream);
    EXPECT_TRUE(s.include_usage);
    EXPECT_FALSE(s.speculate);
    EXPECT_EQ(s.draft_max, 4);

    const completion_spec c = parse_completion_request(
        R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a"},
            {"type": "text", "text": "b"}]}, {"role": "assistant", "content": null}], "max_completion_tokens": 3})",
        api_kind::chat);
    EXPECT_FALSE(c.has_prediction);
    const completion_spec p = parse_completion_request(
        R"({"messages": [{"role": "user", "content": "x"}], "prediction": {"type": "content", "content":
            [{"type": "text", "text": "def f():"}, {"type": "text", "text": "\n    pass"}]}})",
        api_kind::chat);
    EXPECT_TRUE(p.has_prediction);
    EXPECT_EQ(p.prediction, "def f():\n    pass");
    EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "prediction": {"type": "content", "content": "y"}})",
                                       api_kind::completion).prediction, "y");
    ASSERT_EQ(c.messages.size(), 3u);
    EXPECT_EQ(c.messages[1].content, "ab");
    EXPECT_EQ(c.messages[2].content, "");
    EXPECT_EQ(c.max_tokens, 3);
}

TEST(ServerRequest, BadFieldsAreRefusedWithTheirName) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"prompt": "x", "max_tokens": -2})", "max_tokens"},
        {R"({"prompt": "x", "max_tokens": 1e3})", "max_tokens"},
        {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
        {R"({"prompt": "x", "min_p": -0.1})", "min_p"},
        {R"({"prompt": "x", "presence_penalty": 9})", "presence_penalty"},
        {R"({"prompt": "x", "stream_options": {"x": 1}})", "stream_options.x"},
        {R"({"prompt": "x", "logit_bias": {"1": 2}})", "logit_bias"},
        {R"({"prompt": "x", "best_of": 2})", "best_of"},
        {R"({"prompt": "x", "suffix": "y"})", "suffix"},
        {R"({"prompt": "x", "user": 3})", "user"},
        {R"({"prompt": "x", "draft_max": 1000})", "draft_max"},
        {R"({"prompt": "x", "logprobs": -1})", "logprobs"},
        {R"({"prompt": "x", "logprobs": true})", "logprobs"},
        {R"({"prompt": [[1], [2]]})", "prompt"},
        {R"({"prompt": "x", "prediction": "text"})", "prediction"},
        {R"({"prompt": "x", "prediction": {"type": "text", "content": "y"}})", "prediction.type"},
        {R"({"prompt": "x", "prediction": {"content": "y"}})", "prediction.type"},
        {R"({"prompt": "x", "prediction": {"type": "content"}})", "prediction.content"},
        {R"({"prompt": "x", "prediction": {"type": "content", "content": 3}})", "prediction.content"},
        {R"({"prompt": "x", "prediction": {"type": "content", "content": [{"type": "image_url"}]}})", "prediction.content"},
        {R"({"prompt": "x", "prediction": {"type": "content", "content": "y", "extra": 1}})", "prediction.extra"},
    };
    for (const auto & [body, field] : cases) {
        std::string param;
        EXPECT_EQ(status_of(body, api_kind::completion, &param), 400) << body;
        EXPECT_EQ(param, field) << body;
    }
    std::string param;
    EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", api_kind::chat, &param),
              400);
    EXPECT_EQ(param, "messages[0].tool_calls");
    EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})",
                        api_kind::chat, &param),
              400);
    EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"},
                           "parallel_tool_calls": true, "tool_choice": "none", "tools": []})",
                        api_kind::chat),
              200);
}

// Fields of OpenAI's API and llama-server's that the server does not implement (apps/server/foreign-fields.h): a
// client's bookkeeping and llama.cpp web UI's sampler settings at their defaults pass, anything that would change
// the output is refused naming the field, and a field neither API has stays unrecognized.
TEST(ServerRequest, ForeignFieldsPassOnlyWhereTheyChangeNothing) {
    const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
    const std::string done = "}";
    EXPECT_EQ(status_of(chat + R"("store": false, "metadata": {"k": "v"}, "service_tier": "auto",
                                  "prompt_cache_key": "a", "safety_identifier": "b", "reasoning_effort": null,
                                  "verbosity": "low", "modalities": ["text"], "audio": null)" + done,
                        api_kind::chat),
              200);
    // llama.cpp's web UI sends these on every request.
    const std::string webui = R"("samplers": "edskypmxt", "dynatemp_range": 0, "dynatemp_exponent": 1,
        "typical_p": 1, "xtc_probability": 0, "xtc_threshold": 0.1, "dry_multiplier": 0, "dry_base": 1.75,
        "dry_allowed_length": 2, "dry_penalty_last_n": -1, "timings_per_token": false, "id_slot": -1,
        "n_probs": 0, "min_keep": 0, "mirostat": 0, "mirostat_tau": 5, "mirostat_eta": 0.1, "top_n_sigma": -1,
        "ignore_eos": false, "grammar": "", "json_schema": {}, "lora": [], "n_keep": 0)";
    std::string why;
    EXPECT_EQ(status_of(chat + webui + done, api_kind::chat, &why), 200) << why;
    EXPECT_EQ(status_of(R"({"prompt": "x", )" + webui + R"(, "response_format": {"type": "text"}})", api_kind::completion),
              200);
    EXPECT_EQ(status_of(chat + R"("samplers": ["penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "temperature"]})",
                        api_kind::chat),
              200);
    // And these, from its chat service: reasoning settings that a template without thinking tags ignores, its
    // typical-p under a name llama-server does not read, unlimited max_tokens, stream keep-alives.
    EXPECT_EQ(status_of(chat + R"("reasoning_format": "auto", "reasoning_control": true, "backend_sampling": false,
                                  "typ_p": 0.5, "max_tokens": -1, "sse_ping_interval": 1, "return_progress": true,
                                  "thinking_budget_tokens": -1, "continue_final_message": false,
                                  "add_generation_prompt": true, "stream": true})",
                        api_kind::chat, &why),
              200)
        << why;
    const std::vector<std::pair<std::string, std::string>> refused = {
        {R"("mirostat": 2)", "mirostat"},
        {R"("typical_p": 0.5)", "typical_p"},
        {R"("dry_multiplier": 0.8)", "dry_multiplier"},
        {R"("xtc_probability": 0.5)", "xtc_probability"},
        {R"("top_n_sigma": 1)", "top_n_sigma"},
        {R"("ignore_eos": true)", "ignore_eos"},
        {R"("grammar": "root ::= [a]")", "grammar"},
        {R"("json_schema": {"type": "object"})", "json_schema"},
        {R"("n_probs": 3)", "n_probs"},
        {R"("samplers": "tkpm")", "samplers"},          // temperature first: another order than this server's
        {R"("samplers": ["top_k", "top_p"])", "samplers"},  // leaves out samplers this server runs
        {R"("modalities": ["text", "audio"])", "modalities"},
        {R"("chat_template_kwargs": {"enable_thinking": false})", "chat_template_kwargs"},
        {R"("web_search_options": {})", "web_search_options"},
        {R"("reasoning_effort": "low")", "reasoning_effort"},  // llama-server renders it into the chat template
        {R"("json_schema": {})", "json_schema"},            // without a grammar beside it, llama-server makes one
        {R"("samplers": "ekpmti")", "samplers"},            // infill changes the candidates
        {R"("backend_sampling": true)", "backend_sampling"},
        {R"("reasoning_format": "deepseek")", "reasoning_format"},  // splits the thinking out of the content
        {R"("thinking_budget_tokens": 64)", "thinking_budget_tokens"},
        {R"("continue_final_message": true)", "continue_final_message"},
        {R"("add_generation_prompt": false)", "add_generation_prompt"},
    };
    for (const auto & [field, name] : refused) {
        std::string param;
        EXPECT_EQ(status_of(chat + field + done, api_kind::chat, &param), 400) << field;
        EXPECT_EQ(param, name) << field;
    }
    std::string param;
    EXPECT_EQ(status_of(chat + R"("frobnicate": 1})", api_kind::chat, &param), 400);
    EXPECT_EQ(param, "frobnicate");
    EXPECT_EQ(status_of(R"({"prompt": "x", "chat_template_kwargs": {}})", api_kind::completion, &param), 400)
        << "a chat-only field on /v1/completions";
}

// Nesting deeper than any request of these APIs has is refused before it is parsed (an 8 MB body of nested arrays
// took 300 MB to parse); strings are not counted. `metadata` takes any value, so only the depth can refuse these.
TEST(ServerRequest, DeepNestingIsRefusedBeforeParsing) {
    EXPECT_EQ(json_depth(R"({"a": "[[[[\"{{", "b": [[1], {"c": {}}]})", 100), 4);
    auto nested = [](int n) {
        return R"({"prompt": "x", "metadata": )" + std::string(n, '[') + std::string(n, ']') + "}";
    };
    EXPECT_EQ(status_of(nested(60), api_kind::completion), 200);
    EXPECT_EQ(status_of(nested(65), api_kind::completion), 400);
    EXPECT_EQ(status_of(nested(4000000), api_kind::completion), 400);
}

// llama-server's n_predict is max_tokens (read first, as llama-server does; -1: no limit), and a user or system
// message needs its content where an assistant's may go without.
TEST(ServerRequest, NPredictAndMessageContent) {
    EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "n_predict": 7})", api_kind::completion).max_tokens, 7);
    EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "max_tokens": 3, "n_predict": 9})", api_kind::completion)
                  .max_tokens,
              9);
    EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "n_predict": -1})", api_kind::completion).max_tokens, -1);
    EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "max_tokens": -1, "n_predict": 3})", api_kind::completion)
                  .max_tokens,
              3);
    EXPECT_EQ(parse_completion_request(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})",
                                       api_kind::chat)
                  .max_tokens,
              -1);
    std::string param;
    EXPECT_EQ(status_of(R"({"prompt": "x", "n_predict": 0})", api_kind::completion, &param), 400);
    EXPECT_EQ(param, "n_predict");
    EXPECT_EQ(status_of(R"({"messages": [{"role": "user"}]})", api_kind::chat, &param), 400);
    EXPECT_EQ(param, "messages[0].content");
    EXPECT_EQ(status_of(R"({"messages": [{"role": "system", "content": null}]})", api_kind::chat, &param), 400);
    EXPECT_EQ(param, "messages[0].content");
    EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": null},
                                         {"role": "user", "content": "b"}]})",
                        api_kind::chat),
              200);
}

TEST(ServerTextStream, StopStringsAndUtf8MatchTheNaiveReference) {
    // Pieces from a small alphabet, with multi-byte characters sometimes split across pieces (byte tokens).
    const std::vector<std::string> atoms = {"a", "b", "ab", "ba", " ", "\n", "é", "\xE2\x82\xAC" /* € */, "\xF0\x9F\x98\x80"};
    std::mt19937 rng(1234);
    for (int iter = 0; iter < 3000; ++iter) {
        std::vector<std::string> stops;
        const int                n_stops = (int) (rng() % 3);
        for (int k = 0; k < n_stops; ++k) {
            std::string s;
            const int   len = 1 + (int) (rng() % 4);
            while ((int) s.size() < len) {
                s += atoms[rng() % atoms.size()];
            }
            stops.push_back(s);
        }
        std::string all;
        std::vector<std::string> pieces;
        const int n_pieces = (int) (rng() % 20);
        for (int k = 0; k < n_pieces; ++k) {
            std::string a = atoms[rng() % atoms.size()];
            if (a.size() > 1 && rng() % 2) {  // split a character into single bytes
                for (char c : a) {
                    pieces.push_back(std::string(1, c));
                }
            } else {
                pieces.push_back(a);
            }
        }
        text_stream ts(stops);
        std::string released;
        bool        running = true;
        size_t      n_fed   = 0;
        for (const auto & p : pieces) {
            if (!running) {
                break;
            }
            all += p;
            ++n_fed;
            running = ts.add(p);
            released += ts.take();
            bool dummy;
            // Nothing released may contain a stop, nor end inside a character while more may come.
            ASSERT_EQ(ref_cut(released, stops, &dummy), released) << "iteration " << iter;
            if (running) {
                ASSERT_TRUE(valid_utf8_prefix_end(released)) << "iteration " << iter;
            }
        }
        released += ts.finish();
        bool        stopped = false;
        std::string want    = ref_cut(all, stops, &stopped);
        ASSERT_EQ(released, want) << "iteration " << iter << ": first difference at byte "
                                  << std::mismatch(released.begin(), released.end(), want.begin(), want.end()).first -
                                         released.begin();
        ASSERT_EQ(ts.stopped(), stopped) << "iteration " << iter;
        if (stopped) {
            // Generation stops at the piece that completed the stop string.
            bool s2 = false;
            std::string prefix;
            for (size_t k = 0; k + 1 < n_fed; ++k) {
                prefix += pieces[k];
            }
            ref_cut(prefix, stops, &s2);
            ASSERT_FALSE(s2) << "iteration " << iter << ": stopped too late";
        }
    }
}

TEST(ServerTextStream, HoldsBackOnlyWhatCanStillChange) {
    text_stream ts({"STOP"});
    EXPECT_TRUE(ts.add("hello ST"));
    EXPECT_EQ(ts.take(), "hello ");  // "ST" may become "STOP"
    EXPECT_TRUE(ts.add("ART"));
    EXPECT_EQ(ts.take(), "START");
    EXPECT_TRUE(ts.add("\xE2\x82"));  // first two bytes of €
    EXPECT_EQ(ts.take(), "");
    EXPECT_TRUE(ts.add("\xAC!"));
    EXPECT_EQ(ts.take(), "\xE2\x82\xAC!");
    EXPECT_FALSE(ts.add("xxSTOPyy"));
    EXPECT_EQ(ts.take(), "xx");
    EXPECT_EQ(ts.finish(), "");
    EXPECT_EQ(ts.text(), "hello START\xE2\x82\xAC!xx");
}

TEST(ServerRequest, LogprobsMayBeStreamed) {
    const completion_spec c =
        parse_completion_request(R"({"prompt": "x", "logprobs": 2, "stream": true})", api_kind::completion);
    EXPECT_TRUE(c.stream);
    EXPECT_EQ(c.logprobs, 2);
    const completion_spec h = parse_completion_request(
        R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 3, "stream": true})",
        api_kind::chat);
    EXPECT_TRUE(h.stream);
    EXPECT_EQ(h.logprobs, 3);
}

// released() is where a stream chunk's text ends: the bound that picks the chunk's log probabilities.
TEST(ServerTextStream, ReleasedCountsTheBytesTaken) {
    text_stream ts({"STOP"});
    ts.add("ab\xE2\x82");  // "ab" and half of €
    EXPECT_EQ(ts.take(), "ab");
    EXPECT_EQ(ts.released(), 2u);
    ts.add("\xAC ST");  // € done, " ST" may begin STOP
    EXPECT_EQ(ts.take(), "\xE2\x82\xAC ");
    EXPECT_EQ(ts.released(), 6u);
    EXPECT_FALSE(ts.add("OP!"));
    EXPECT_EQ(ts.finish(), "");
    EXPECT_EQ(ts.released(), 6u);
}

// What the engine publishes piles up until the HTTP side takes it, text and log probabilities in order.
TEST(ServerJob, PublishedLogprobsArriveInOrderWithTheirText) {
    job j(job_input{});
    j.publish({"ab", {{{"a", -0.5f}, {}}, {{"b", -1.0f}, {}}}});
    j.publish({"", {}});  // nothing: no news
    j.publish({"c", {{{"c", -2.0f}, {}}}});
    text_release got;
    EXPECT_FALSE(j.wait(std::chrono::milliseconds(0), got));
    EXPECT_EQ(got.text, "abc");
    ASSERT_EQ(got.logprobs.size(), 3u);
    EXPECT_EQ(got.logprobs[2].chosen.piece, "c");
    j.finish(job_output{});
    text_release after;
    EXPECT_TRUE(j.wait(std::chrono::milliseconds(0), after));
    EXPECT_TRUE(after.empty());
}

// A chunk's completions-shape log probabilities count text_offset from the completion's start.
TEST(ServerResponse, ChunkLogprobsContinueTheTextOffsets) {
    response_meta m;
    m.kind     = api_kind::completion;
    m.logprobs = 1;
    const std::vector<position_logprobs> lps = {{{"lo", -0.25f}, {{"lo", -0.25f}}}, {{"w", -1.5f}, {{"w", -1.5f}}}};
    const nlohmann::json c = chunk_json(m, "low", nullptr, false, logprobs_json(m.kind, lps, 5));
    const nlohmann::json & lp = c["choices"][0]["logprobs"];
    EXPECT_EQ(lp["tokens"], nlohmann::json::array({"lo", "w"}));
    EXPECT_EQ(lp["text_offset"], nlohmann::json::array({5, 7}));
    EXPECT_EQ(lp["top_logprobs"][1]["w"], -1.5);
    m.kind = api_kind::chat;
    const nlohmann::json h = chunk_json(m, "low", nullptr, false, logprobs_json(m.kind, lps));
    EXPECT_EQ(h["choices"][0]["delta"]["content"], "low");
    EXPECT_EQ(h["choices"][0]["logprobs"]["content"][1]["token"], "w");
    EXPECT_TRUE(chunk_json(m, "x", nullptr)["choices"][0]["logprobs"].is_null());
}

namespace {

// The value of one series in Prometheus text, or -1 when absent.
double series_value(const std::string & text, const std::string & series) {
    const size_t pos = text.find("\n" + series + " ");
    return pos == std::string::npos ? -1 : std::atof(text.c_str() + pos + 1 + series.size() + 1);
}

}  // namespace

// vLLM's semantics: a draft is one request step that verified draft tokens; position i counts the drafts whose
// accepted run reached i. Steps without drafts count nowhere.
TEST(ServerMetrics, SpecDecodeCountsFollowVllm) {
    server_metrics m;
    step_sample    a;
    a.add_draft(8, 3);  // a tree of 8 nodes, a path of 3 accepted
    a.add_draft(0, 0);  // another slot decoding plainly
    a.n_forward = 1;
    m.on_step(a);
    step_sample b;
    b.add_draft(4, 0);
    b.add_draft(2, 1);
    b.n_forward = 1;
    m.on_step(b);
    const std::string t = m.prometheus(metrics_gauges{});
    EXPECT_EQ(series_value(t, "rest:spec_decode_num_drafts_total"), 3);
    EXPECT_EQ(series_value(t, "rest:spec_decode_num_draft_tokens_total"), 14);
    EXPECT_EQ(series_value(t, "rest:spec_decode_num_accepted_tokens_total"), 4);
    EXPECT_EQ(series_value(t, "rest:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"}"), 2);
    EXPECT_EQ(series_value(t, "rest:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"}"), 1);
    EXPECT_EQ(series_value(t, "rest:spec_decode_num_accepted_tokens_per_pos_total{position=\"2\"}"), 1);
    EXPECT_EQ(series_value(t, "rest:spec_decode_num_accepted_tokens_per_pos_total{position=\"3\"}"), -1);
    EXPECT_EQ(series_value(t, "rest_draft_tokens_total"), 14);  // today's name, same figure
}

// Cached prompt tokens add up beside all prompt tokens; each prefill lands in the first bucket that holds it, and
// buckets are cumulative.
TEST(ServerMetrics, PromptCacheAndPrefillHistogram) {
    server_metrics m;
    EXPECT_EQ(series_value(m.prometheus(metrics_gauges{}), "rest:request_prefill_time_seconds_count"), 0);
    m.on_prefill(100, 60, 1, 2000);     // 2 ms
    m.on_prefill(10, 0, 1, 2'000'000);  // 2 s
    const std::string t = m.prometheus(metrics_gauges{});
    EXPECT_EQ(series_value(t, "rest:prompt_tokens_total"), 110);
    EXPECT_EQ(series_value(t, "rest:prompt_tokens_cached_total"), 60);
    EXPECT_EQ(series_value(t, "rest:request_prefill_time_seconds_bucket{le=\"0.001\"}"), 0);
    EXPECT_EQ(series_value(t, "rest:request_prefill_time_seconds_bucket{le=\"0.0025\"}"), 1);
    EXPECT_EQ(series_value(t, "rest:request_prefill_time_seconds_bucket{le=\"1.5\"}"), 1);
    EXPECT_EQ(series_value(t, "rest:request_prefill_time_seconds_bucket{le=\"2\"}"), 2);
    EXPECT_EQ(series_value(t, "rest:request_prefill_time_seconds_bucket{le=\"+Inf\"}"), 2);
    EXPECT_EQ(series_value(t, "rest:request_prefill_time_seconds_count"), 2);
    EXPECT_NEAR(series_value(t, "rest:request_prefill_time_seconds_sum"), 2.002, 1e-9);
}

namespace {

// One token per byte (ids 0-255), BOS = 256; "<s>" parses to BOS when parse_special is set.
class byte_tokenizer final : public rest::tokenizer {
  public:
    std::vector<rest::token_id> tokenize(std::string_view text, bool add_special, bool parse_special) const override {
        std::vector<rest::token_id> out;
        if (add_special) out.push_back(256);
        for (size_t i = 0; i < text.size(); ++i) {
            if (parse_special && text.substr(i, 3) == "<s>") {
                out.push_back(256);
                i += 2;
            } else {
                out.push_back((unsigned char) text[i]);
            }
        }
        return out;
    }
    std::string detokenize(std::span<const rest::token_id> t) const override {
        std::string s;
        for (auto x : t) s += piece(x);
        return s;
    }
    std::string piece(rest::token_id t) const override { return t == 256 ? "<s>" : std::string(1, (char) t); }
    int32_t n_vocab() const override { return 257; }
    std::uint64_t fingerprint() const override { return 1; }
    std::string description() const override { return "bytes"; }
    std::string apply_chat_template(std::span<const rest::chat_message>, bool) const override { return ""; }
};

std::string bad_param(const std::function<void()> & f) {
    try {
        f();
    } catch (const api_error & e) {
        return e.status == 400 ? e.param.empty() ? "(none)" : e.param : "status " + std::to_string(e.status);
    }
    return "(accepted)";
}

std::vector<std::string> rewrite(const std::vector<std::string> & args) {
    return rewrite_llama_args(args);
}

}  // namespace

TEST(ServerTokenize, ShapesAreLlamaServers) {
    const byte_tokenizer tok;
    using json = nlohmann::json;
    EXPECT_EQ(tokenize_reply(tok, parse_tokenize_request(R"({"content": "ab"})")), json::parse(R"({"tokens": [97, 98]})"));
    // add_special is off by default and parse_special on, as llama-server's.
    EXPECT_EQ(tokenize_reply(tok, parse_tokenize_request(R"({"content": "a<s>", "add_special": true})"))["tokens"],
              json::parse("[256, 97, 256]"));
    EXPECT_EQ(tokenize_reply(tok, parse_tokenize_request(R"({"content": "<s>", "parse_special": false})"))["tokens"],
              json::parse("[60, 115, 62]"));
    // Mixed content: strings and ids in order, BOS only before a leading string.
    EXPECT_EQ(tokenize_reply(tok, parse_tokenize_request(R"({"content": ["a", 5, "b"], "add_special": true})"))["tokens"],
              json::parse("[256, 97, 5, 98]"));
    EXPECT_EQ(tokenize_reply(tok, parse_tokenize_request(R"({"content": [5, "b"], "add_special": true})"))["tokens"],
              json::parse("[5, 98]"));
    // with_pieces: valid UTF-8 pieces as strings, a lone byte of a split character as its byte values.
    EXPECT_EQ(tokenize_reply(tok, parse_tokenize_request(R"({"content": "a\u00e1", "with_pieces": true})")),
              json::parse(R"({"tokens": [{"id": 97, "piece": "a"}, {"id": 195, "piece": [195]}, {"id": 161, "piece": [161]}]})"));

    const std::vector<rest::token_id> ids = parse_detokenize_request(R"({"tokens": [256, 195, 161, 33]})", tok.n_vocab());
    EXPECT_EQ(ids, (std::vector<rest::token_id>{256, 195, 161, 33}));
    EXPECT_EQ(detokenize_reply(tok, ids), json::parse(R"({"content": "<s>\u00e1!"})"));
    EXPECT_EQ(detokenize_reply(tok, {}), json::parse(R"({"content": ""})"));
}

TEST(ServerTokenize, BadBodiesAreRefusedWithTheirField) {
    const byte_tokenizer tok;
    const std::vector<std::pair<std::string, std::string>> tokenize_cases = {
        {"{not json", "(none)"},
        {"[1]", "(none)"},
        {"{}", "content"},
        {R"({"content": 5})", "content"},
        {R"({"content": null})", "content"},
        {R"({"content": ["a", {"x": 1}]})", "content"},
        {R"({"content": ["a", 1.5]})", "content"},
        {R"({"content": [300]})", "content"},  // outside the vocabulary: found while tokenizing
        {R"({"content": [-1]})", "content"},
        {R"({"content": "a", "add_special": "yes"})", "add_special"},
        {R"({"content": "a", "parse_special": 1})", "parse_special"},
        {R"({"content": "a", "with_pieces": "true"})", "with_pieces"},
        {R"({"content": "a", "prompt": "b"})", "prompt"},
    };
    for (const auto & [body, field] : tokenize_cases) {
        EXPECT_EQ(bad_param([&] { tokenize_reply(tok, parse_tokenize_request(body)); }), field) << body;
    }
    const std::vector<std::pair<std::string, std::string>> detokenize_cases = {
        {"nope", "(none)"},
        {"{}", "tokens"},
        {R"({"tokens": "abc"})", "tokens"},
        {R"({"tokens": [1, "2"]})", "tokens"},
        {R"({"tokens": [1, 2.0]})", "tokens"},
        {R"({"tokens": [-1]})", "tokens"},
        {R"({"tokens": [257]})", "tokens"},
        {R"({"tokens": [18446744073709551615]})", "tokens"},
        {R"({"tokens": [1], "content": "x"})", "content"},
    };
    for (const auto & [body, field] : detokenize_cases) {
        EXPECT_EQ(bad_param([&] { parse_detokenize_request(body, tok.n_vocab()); }), field) << body;
    }
}

TEST(LlamaArgs, MultiLetterNamesBecomeLongOnes) {
    using v = std::vector<std::string>;
    EXPECT_EQ(rewrite({"generate", "-ngl", "0", "-m", "x"}), (v{"generate", "--n-gpu-layers", "0", "-m", "x"}));
    EXPECT_EQ(rewrite({"serve", "-np", "4", "-ctk", "q8_0", "-ctv", "bf16"}),
              (v{"serve", "--parallel", "4", "--cache-type-k", "q8_0", "--cache-type-v", "bf16"}));
    // -fa takes a value in today's llama.cpp; older ones had it as a flag (last, or before another option).
    EXPECT_EQ(rewrite({"serve", "-fa", "off", "-m", "x"}), (v{"serve", "--flash-attn", "off", "-m", "x"}));
    EXPECT_EQ(rewrite({"serve", "-fa", "-1"}), (v{"serve", "--flash-attn", "-1"}));
    EXPECT_EQ(rewrite({"serve", "-fa", "-m", "x"}), (v{"serve", "--flash-attn=on", "-m", "x"}));
    EXPECT_EQ(rewrite({"serve", "-m", "x", "-fa"}), (v{"serve", "-m", "x", "--flash-attn=on"}));
    // Only whole arguments, and nothing after "--".
    EXPECT_EQ(rewrite({"generate", "-p", "x-ngl", "-ngl5", "--ngl", "1"}), (v{"generate", "-p", "x-ngl", "-ngl5", "--ngl", "1"}));
    EXPECT_EQ(rewrite({"index", "build", "--", "-ngl"}), (v{"index", "build", "--", "-ngl"}));
    EXPECT_EQ(rewrite({}), v{});
    // llama.cpp's names that rest has no option for are refused by name (CLI11 read -tb 1 as -t b).
    for (const char * n : {"-tb", "-cnv", "-no-cnv", "-ub"}) {
        try {
            rewrite({"generate", n, "1"});
            ADD_FAILURE() << n << " was not refused";
        } catch (const rest::user_error & e) {
            EXPECT_NE(std::string(e.what()).find(std::string(n) + " is llama.cpp's --"), std::string::npos) << e.what();
        }
    }
    // Every alias names a long option (the CLI test checks each exists on its commands).
    for (const auto & a : llama_arg_aliases()) {
        EXPECT_TRUE(std::string(a.llama).starts_with("-") && !std::string(a.llama).starts_with("--")) << a.llama;
        EXPECT_TRUE(std::string(a.rest).starts_with("--")) << a.rest;
        EXPECT_FALSE(a.commands.empty()) << a.llama;
    }
}

// Inter-token gaps land in 20%-wide buckets from 1 ms, so a p99 can be read off them (bench/prefill-stall.py does).
TEST(ServerMetrics, InterTokenLatencyBucketsAreFine) {
    server_metrics m;
    for (int i = 0; i < 99; ++i) m.on_token_gap(0.100);
    m.on_token_gap(0.250);
    const std::string t = m.prometheus(metrics_gauges{});
    EXPECT_EQ(series_value(t, "rest:inter_token_latency_seconds_count"), 100);
    EXPECT_NEAR(series_value(t, "rest:inter_token_latency_seconds_sum"), 10.15, 1e-9);
    // The 0.1 s gaps sit in one bucket whose bounds are within 20%; the 0.25 s one lies above 0.2 s.
    int below_01 = 0, first_all = -1;
    for (double le = 1e-3; le < 60; le *= 1.2) {
        char b[64];
        std::snprintf(b, sizeof(b), "rest:inter_token_latency_seconds_bucket{le=\"%g\"}", le);
        const double v = series_value(t, b);
        ASSERT_GE(v, 0) << b;
        if (le < 0.1 / 1.2) below_01 += (int) v;
        if (first_all < 0 && v == 100) first_all = (int) std::lround(le * 1000);
    }
    EXPECT_EQ(below_01, 0);
    EXPECT_GT(first_all, 250);
    EXPECT_LT(first_all, 300);
}
