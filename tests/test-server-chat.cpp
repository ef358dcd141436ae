// Chat rendering: what `rest serve` turns a conversation into must be what llama-server renders for it. The reference
// side calls llama.cpp's `common` directly, building its inputs the way llama-server does (tools/server:
// common_chat_templates_init at load, oaicompat_chat_params_parse per request), and compares the text with the
// server's own rendering function (render_chat). Models: stories260K (no template: the ChatML fallback, and the
// built-in names), and fixtures whose GGUFs carry Jinja templates (phi-3's and qwen2's vocabulary files).
// Then `rest serve` itself: the fallback warning, /apply-template, and /tokenize agreeing with a chat's usage.
#include "test-server-util.h"

#include "server-prompt.h"

#include "chat.h"  // llama.cpp's common/chat.h
#include "llama.h"
#include "rest/llama-model.h"

#include <atomic>
#include <fstream>
#include <memory>
#include <thread>

using json = nlohmann::json;
using namespace rest_test;

namespace {

// Conversations in the OpenAI shape; the last one ends with an assistant turn, which llama-server continues.
const std::vector<json> k_conversations = {
    json::array({{{"role", "user"}, {"content", "Hi"}}}),
    json::array({{{"role", "system"}, {"content", "You are terse."}}, {{"role", "user"}, {"content", "Tell me a story."}}}),
    json::array({{{"role", "user"}, {"content", "One"}},
                 {{"role", "assistant"}, {"content", "Two"}},
                 {{"role", "user"}, {"content", "Three\nand a new line"}}}),
    json::array({{{"role", "user"}, {"content", "Finish this:"}}, {{"role", "assistant"}, {"content", "Once upon"}}}),
};

std::vector<rest::chat_message> to_messages(const json & conv) {
    std::vector<rest::chat_message> out;
    for (const auto & m : conv) {
        out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    return out;
}

struct llama_model_deleter {
    void operator()(llama_model * m) const { llama_model_free(m); }
};

// llama-server's rendering of `conv` with --chat-template `override_src` ("" : the model's own), --jinja unless
// `no_jinja`, and every other setting at its default.
std::string llama_server_render(const llama_model * model, const std::string & override_src, bool no_jinja,
                                const json & conv) {
    const common_chat_templates_ptr tmpls = common_chat_templates_init(model, override_src);
    const bool use_jinja = !no_jinja;
    common_chat_templates_inputs in;
    in.messages              = common_chat_msgs_parse_oaicompat(common_json::parse(conv.dump()));
    in.use_jinja             = use_jinja;
    in.add_generation_prompt = true;
    in.reasoning_format      = COMMON_REASONING_FORMAT_DEEPSEEK;
    in.enable_thinking       = use_jinja && common_chat_templates_support_enable_thinking(tmpls.get());
    in.chat_template_kwargs["preserve_reasoning"] = "true";
    if (!in.messages.empty() && in.messages.back().role == "assistant") {  // prefill_assistant
        in.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
        in.add_generation_prompt  = false;
    }
    return common_chat_templates_apply(tmpls.get(), in).prompt;
}

std::unique_ptr<llama_model, llama_model_deleter> load_vocab(const std::string & path) {
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only         = true;
    return std::unique_ptr<llama_model, llama_model_deleter>(llama_model_load_from_file(path.c_str(), mp));
}

std::string fixture_with(const std::string & vocab) {
    rest::fixture_params p;
    p.vocab = vocab;
    return fixture_model(p);
}

std::string stories() {
    const std::string data = shared_data();
    return data.empty() ? "" : data + "/models/stories260K.gguf";
}

// Checks every conversation through the server's render_chat against llama-server's rendering.
void expect_same_as_llama_server(const std::string & path, const rest::chat_template_params & params,
                                 const std::string & override_src, bool no_jinja) {
    rest::llama_log_quiet();
    const auto model = rest::model::load(path);
    const auto chat  = model->new_chat_template(params);
    const auto ref   = load_vocab(path);
    ASSERT_TRUE(ref);
    for (const auto & conv : k_conversations) {
        const std::string want = llama_server_render(ref.get(), override_src, no_jinja, conv);
        EXPECT_EQ(render_chat(*chat, to_messages(conv)), want) << path << " " << conv.dump();
    }
}

TEST(ChatTemplate, ModelWithoutTemplateFallsBackToChatML) {
    if (stories().empty()) GTEST_SKIP() << "no ../shared/data";
    expect_same_as_llama_server(stories(), {}, "", false);
    const auto model = rest::model::load(stories());
    const auto chat  = model->new_chat_template({});
    EXPECT_TRUE(chat->is_fallback());
    // ChatML spelled out, independently of llama.cpp's source for it.
    EXPECT_EQ(chat->apply(to_messages(k_conversations[1])),
              "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nTell me a story.<|im_end|>\n"
              "<|im_start|>assistant\n");
}

TEST(ChatTemplate, BuiltInNamesRenderAsLlamaServer) {
    if (stories().empty()) GTEST_SKIP() << "no ../shared/data";
    rest::chat_template_params p;
    p.name = "chatml";  // through Jinja, as llama-server (common_chat_templates_init substitutes ChatML)
    expect_same_as_llama_server(stories(), p, "chatml", false);
    EXPECT_FALSE(rest::model::load(stories())->new_chat_template(p)->is_fallback());
    for (const char * name : {"llama3", "phi3", "gemma", "mistral-v7"}) {
        p.name = name;  // the built-in renderer: llama-server --no-jinja --chat-template NAME
        expect_same_as_llama_server(stories(), p, name, true);
    }
    p.name = "no-such-template";
    EXPECT_THROW(rest::model::load(stories())->new_chat_template(p), rest::user_error);
}

TEST(ChatTemplate, ModelsOwnJinjaTemplateRendersAsLlamaServer) {
    for (const char * vocab : {"phi-3", "qwen2"}) {
        const std::string path = fixture_with(vocab);
        expect_same_as_llama_server(path, {}, "", false);
        EXPECT_FALSE(rest::model::load(path)->new_chat_template({})->is_fallback()) << vocab;
    }
    // phi-3's template starts with {{ bos_token }}: llama.cpp strips it, since tokenizing adds BOS.
    const auto model = rest::model::load(fixture_with("phi-3"));
    const std::string text = model->new_chat_template({})->apply(to_messages(k_conversations[0]));
    EXPECT_EQ(text, "<|user|>\nHi<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplate, JinjaSourceGivenByTheUser) {
    const std::string src = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                            "{% if add_generation_prompt %}[assistant]{% endif %}";
    rest::chat_template_params p;
    p.source = src;
    expect_same_as_llama_server(fixture_with("phi-3"), p, src, false);
    const auto model = rest::model::load(fixture_with("phi-3"));
    EXPECT_EQ(model->new_chat_template(p)->apply(to_messages(k_conversations[0])), "[user] Hi\n[assistant]");
    // A template that refuses a conversation is a user error (the server's 400), not a crash.
    p.source = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first, please') }}{% endif %}" + src;
    const auto refusing = model->new_chat_template(p);
    EXPECT_EQ(refusing->apply(to_messages(k_conversations[0])), "[user] Hi\n[assistant]");
    EXPECT_THROW(refusing->apply({{{"assistant", "x"}, {"user", "y"}}}), rest::user_error);
    // One that does not parse, or cannot render at all, fails when it is loaded (llama-server does not start).
    for (const char * bad : {"{% for %}", "{{ raise_exception('never') }}"}) {
        p.source = bad;
        EXPECT_THROW(model->new_chat_template(p), rest::user_error) << bad;
    }
}

// `rest serve` itself, on stories260K without a template and with --chat-template-file.
class ChatServer : public ::testing::Test {
  protected:
    void start(const std::vector<std::string> & extra, const std::string & tag) {
        if (stories().empty()) GTEST_SKIP() << "no ../shared/data";
        std::vector<std::string> args = {"-m", stories(), "-c", "512", "-t", "1", "--no-spec"};
        args.insert(args.end(), extra.begin(), extra.end());
        ASSERT_EQ(srv_.start(args, tmp_dir() + "/server-chat-" + tag + ".log"), "");
    }
    server_process srv_;
};

TEST_F(ChatServer, FallbackWarnsOnceAndApplyTemplateMatchesLlamaServer) {
    start({"--np", "1"}, "fallback");
    if (HasFatalFailure() || IsSkipped()) return;
    client c(srv_.port());
    const auto ref = load_vocab(stories());
    for (const auto & conv : k_conversations) {
        const http_reply r = c.post("/apply-template", json{{"messages", conv}});
        ASSERT_EQ(r.status, 200) << r.body;
        EXPECT_EQ(r.json["prompt"], llama_server_render(ref.get(), "", false, conv));
    }
    // A chat's prompt is the rendered text tokenized with BOS and control tokens, as llama-server does: /tokenize
    // with add_special gives the same count.
    const json      conv = k_conversations[1];
    const http_reply chat = c.post("/v1/chat/completions", json{{"messages", conv}, {"max_tokens", 4}, {"temperature", 0}});
    ASSERT_EQ(chat.status, 200) << chat.body;
    const std::string prompt = c.post("/apply-template", json{{"messages", conv}}).json["prompt"];
    const http_reply  tok    = c.post("/tokenize", json{{"content", prompt}, {"add_special", true}});
    ASSERT_EQ(tok.status, 200) << tok.body;
    EXPECT_EQ(chat.json["usage"]["prompt_tokens"], tok.json["tokens"].size());
    // Renders run unlocked on the HTTP threads, as llama-server's do: many at once still give the same text.
    std::vector<std::thread> threads;
    std::atomic<int>         n_wrong{0};
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            const json & conv = k_conversations[t % k_conversations.size()];
            const std::string want = llama_server_render(ref.get(), "", false, conv);
            for (int i = 0; i < 20; ++i) {
                const http_reply r = client(srv_.port()).post("/apply-template", json{{"messages", conv}});
                n_wrong += r.status != 200 || r.json["prompt"] != want;
            }
        });
    }
    for (auto & th : threads) th.join();
    EXPECT_EQ(n_wrong.load(), 0);
    // Two assistant turns at the end: llama-server's 400.
    const http_reply two = c.post("/apply-template", json{{"messages", json::array({{{"role", "assistant"}, {"content", "a"}},
                                                                                      {{"role", "assistant"}, {"content", "b"}}})}});
    EXPECT_EQ(two.status, 400) << two.body;
    EXPECT_EQ(two.json["error"]["param"], "messages");

    srv_.signal(SIGTERM);
    EXPECT_EQ(srv_.wait_exit(60), 0);
    const std::string log = srv_.log_tail();
    const size_t      at  = log.find("warning: the model has no chat template");
    EXPECT_NE(at, std::string::npos) << log;
    EXPECT_EQ(log.find("warning: the model has no chat template", at + 1), std::string::npos) << log;
}

TEST_F(ChatServer, TemplateFileAndLlamaSpellingsOfFlags) {
    const std::string file = tmp_dir() + "/server-chat-template.jinja";
    std::ofstream(file) << "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>";
    // -np, -fa, -ctk and -ctv as llama.cpp users type them (apps/llama-args.h).
    start({"--chat-template-file", file, "-np", "1", "-fa", "off", "-ctk", "f16", "-ctv", "f16", "-ngl", "0"}, "file");
    if (HasFatalFailure() || IsSkipped()) return;
    client           c(srv_.port());
    const http_reply r = c.post("/apply-template", json{{"messages", k_conversations[1]}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["prompt"], "<system>You are terse.<user>Tell me a story.<assistant>");
    EXPECT_EQ(srv_.log_tail().find("warning"), std::string::npos) << srv_.log_tail();
    // llama-server's README example: 'á' on stories260K is two byte tokens, each piece given as its byte (after the
    // space SentencePiece puts in front of the text, which the README's example leaves out).
    const http_reply t = c.post("/tokenize", json{{"content", "á"}, {"with_pieces", true}});
    ASSERT_EQ(t.status, 200) << t.body;
    EXPECT_EQ(t.json["tokens"],
              json::parse(R"([{"id": 410, "piece": " "}, {"id": 198, "piece": [195]}, {"id": 164, "piece": [161]}])"));
    const http_reply d = c.post("/detokenize", json{{"tokens", {198, 164}}});
    EXPECT_EQ(d.json["content"], "á");
}

TEST_F(ChatServer, BadTemplatesStopTheServerWithOneLine) {
    if (stories().empty()) GTEST_SKIP() << "no ../shared/data";
    for (const std::vector<std::string> & args : std::vector<std::vector<std::string>>{
             {"--chat-template", "no-such-template"},
             {"--chat-template-file", "/nonexistent/template.jinja"},
             {"--chat-template", "chatml", "--chat-template-file", "/dev/null"},
             {"--chat-template", "'{% for %}'"}}) {
        std::string cmd = rest_bin() + " serve -m " + stories() + " --port 0 --no-spec";
        for (const auto & a : args) cmd += " " + a;
        const auto [out, rc] = run_command(cmd, true);
        EXPECT_EQ(rc, 1) << cmd << "\n" << out;
        EXPECT_EQ(out.rfind("rest: error: ", 0), 0u) << out;  // nothing before it (common's log is quiet)
        EXPECT_EQ(out.find('\n'), out.size() - 1) << out;
    }
}

// --flash-attn and the KV cache types reach serve's context: llama.cpp refuses a quantized V cache without flash
// attention, so `-fa off -ctv q8_0` cannot start and `-fa on -ctv q8_0` can (head size 32: q8_0 blocks fit).
TEST(ServeFlags, FlashAttentionAndCacheTypesReachTheContext) {
    rest::fixture_params p;
    p.n_embd = 128;
    p.n_head = 4;
    const std::string model = fixture_model(p);
    const std::string base  = rest_bin() + " serve -m " + model + " --port 0 --no-spec --np 1 -c 256 -t 1 ";
    const auto [out, rc]    = run_command(base + "-fa off -ctk q8_0 -ctv q8_0", true);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("flash_attn"), std::string::npos) << out;

    server_process srv;
    ASSERT_EQ(srv.start({"-m", model, "--np", "1", "-c", "256", "-t", "1", "--no-spec", "--flash-attn", "on",
                         "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"},
                        tmp_dir() + "/server-chat-fa.log"),
              "");
    const http_reply r = client(srv.port()).post("/v1/completions", json{{"prompt", "hi"}, {"max_tokens", 4}});
    EXPECT_EQ(r.status, 200) << r.body;
    srv.signal(SIGTERM);
    EXPECT_EQ(srv.wait_exit(60), 0);
}

}  // namespace
