// `rest serve` start-up and shutdown: SIGTERM drains in-flight requests and saves the online store (which the
// next start loads), the default (cost-model) budget stays lossless, a model without a chat template answers
// chat requests with a clear 400, and start-up errors exit 1 with one line.
#include "test-server-util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <chrono>
#include <atomic>
#include <thread>

using json = nlohmann::json;
using namespace rest_test;

namespace {

rest::fixture_params phi3() {
    rest::fixture_params p;
    p.vocab = "phi-3";
    return p;
}

rest::fixture_params spm() {
    rest::fixture_params p;  // llama-spm: no chat template
    p.n_ctx = 512;
    return p;
}

}  // namespace

TEST(ServerLifecycle, SigtermDrainsInFlightRequestsAndSavesTheOnlineStore) {
    const std::string model   = fixture_model(phi3());
    const std::string history = tmp_dir() + "/server-history.bin";
    std::filesystem::remove(history);
    int n_stored = 0;  // tokens the online store must hold after shutdown
    {
        server_process srv;
        ASSERT_EQ(srv.start({"-m", model, "-c", "1024", "--np", "2", "-t", "1", "--draft-fixed", "4",
                             "--history-file", history},
                            tmp_dir() + "/server-lifecycle-1.log"),
                  "");
        const client c(srv.port());
        // A finished request puts its output in the online store.
        const http_reply first = c.post("/v1/completions", json{{"prompt", "first"}, {"max_tokens", 16}});
        ASSERT_EQ(first.status, 200) << first.body;
        n_stored = first.json["usage"]["completion_tokens"].get<int>();

        // A long stream is in flight when SIGTERM arrives: it must still complete.
        sse_reply   streamed;
        std::thread t([&] {
            streamed = c.stream("/v1/completions",
                                json{{"prompt", "in flight"}, {"max_tokens", 200}, {"temperature", 0}, {"stream", true}});
        });
        for (int i = 0; i < 500; ++i) {  // until the stream has a slot
            const http_reply h = c.get("/health");
            if (h.status == 200 && h.json["slots_busy"] == 1) {
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        srv.signal(SIGTERM);
        // Until the server has seen the signal (/health turns 503, or the port closes): a fixed 20 ms wait let a
        // loaded CI machine serve the next request before the signal was handled.
        for (int i = 0; i < 2000; ++i) {
            if (c.get("/health").status != 200) {
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        // New work is refused while draining (or the port is already closed).
        const http_reply late = c.post("/v1/completions", json{{"prompt", "late"}, {"max_tokens", 4}});
        EXPECT_TRUE(late.status == 503 || late.status == 0) << late.status << " " << late.body;
        if (late.status == 503) {
            EXPECT_EQ(late.json["error"]["code"], "shutting_down");
        }
        t.join();
        EXPECT_EQ(srv.wait_exit(60), 0) << srv.log_tail();
        ASSERT_TRUE(streamed.done) << streamed.raw.substr(0, 500);
        ASSERT_FALSE(streamed.events.empty());
        EXPECT_EQ(streamed.events.back()["choices"][0]["finish_reason"], "length");
        EXPECT_EQ(streamed.events.back()["usage"]["completion_tokens"], 200);
        n_stored += 200;
    }
    ASSERT_TRUE(std::filesystem::exists(history));

    // The next start loads the saved store.
    server_process srv;
    ASSERT_EQ(srv.start({"-m", model, "-c", "512", "--np", "1", "-t", "1", "--no-spec", "--history-file", history},
                        tmp_dir() + "/server-lifecycle-2.log"),
              "");
    const http_reply corpus = client(srv.port()).get("/v1/corpus");
    ASSERT_EQ(corpus.status, 200) << corpus.body;
    EXPECT_EQ(corpus.json["history"]["n_documents"], 2) << corpus.body;  // "first" and the drained stream
    EXPECT_EQ(corpus.json["history"]["n_tokens"], n_stored) << corpus.body;
    srv.signal(SIGINT);
    EXPECT_EQ(srv.wait_exit(60), 0) << srv.log_tail();
}

TEST(ServerLifecycle, DefaultBudgetIsLosslessAndChatFallsBackToChatML) {
    const std::string model = fixture_model(spm());
    const std::string prompt = "Plain vocabulary, default budget:";
    const auto        ref    = generate_no_spec(model, {prompt}, 32, "lifecycle-default");
    ASSERT_EQ(ref.size(), 1u);

    server_process srv;  // no --draft-*: the measured cost model picks each step's budget
    ASSERT_EQ(srv.start({"-m", model, "-c", "1024", "--np", "2", "-t", "1"}, tmp_dir() + "/server-lifecycle-3.log"),
              "");
    const client     c(srv.port());
    const http_reply r = c.post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 32}, {"temperature", 0},
                                                        {"return_tokens", true}});
    ASSERT_EQ(r.status, 200) << r.body;
    const auto m = rest::model::load(model);
    EXPECT_EQ(check_greedy(*m, prompt, r.json["rest"]["tokens"].get<std::vector<int>>(),
                           ref[0]["tokens"].get<std::vector<int>>()),
              "");

    // llama-spm's vocabulary file has no chat template: chats render as ChatML, as llama-server's do, and the
    // server said so once at start-up.
    const http_reply chat = c.post("/v1/chat/completions",
                                   json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}});
    EXPECT_EQ(chat.status, 200) << chat.body;
    const http_reply shown = c.post("/apply-template", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
    EXPECT_EQ(shown.json["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") << shown.body;
    srv.signal(SIGTERM);
    EXPECT_EQ(srv.wait_exit(60), 0) << srv.log_tail();
    EXPECT_NE(srv.log_tail().find("warning: the model has no chat template"), std::string::npos) << srv.log_tail();
}

// A second server on the port of a running one refuses to start: with cpp-httplib's default SO_REUSEPORT it
// listened on the same port and the two split the requests. Servers that share a --corpus-dir (replicas) write a
// corpus in turn, each onto the file as the other left it (NAME.idx.lock): two appends at once each renamed their
// file over the other's and lost documents both had acknowledged.
TEST(ServerLifecycle, ServersShareACorpusDirInTurnAndNotAPort) {
    const std::string dir = tmp_dir() + "/lifecycle-corpora";
    std::filesystem::remove_all(dir);
    const std::string              model = fixture_model(spm());
    const std::vector<std::string> args  = {"-m", model, "--no-spec", "-t", "1", "--np", "1", "--corpus-dir", dir};
    server_process                 first, second;
    ASSERT_EQ(first.start(args, tmp_dir() + "/lifecycle-first.log"), "");
    // Under `timeout`: before the fix the second server ran (the test must fail, not hang).
    const auto [out1, rc1] = run_command("timeout 30 " + rest_bin() + " serve --no-spec -t 1 -m " + model + " --port " +
                                         std::to_string(first.port()), true);
    EXPECT_EQ(rc1, 1);
    EXPECT_NE(out1.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())), std::string::npos) << out1;

    ASSERT_EQ(second.start(args, tmp_dir() + "/lifecycle-second.log"), "");
    const client a(first.port()), b(second.port());
    ASSERT_EQ(a.post("/v1/corpora", nlohmann::json{{"name", "k"}, {"text", "one"}}).status, 200);
    // While another writer holds the corpus file's lock, a POST waits for it.
    const int fd = ::open((dir + "/k.idx.lock").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    std::atomic<int> status{0};
    std::thread      post([&] { status = b.post("/v1/corpora", nlohmann::json{{"name", "k"}, {"text", "two"}}).status; });
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_EQ(status.load(), 0) << "the POST did not wait for the lock";
    ::close(fd);
    post.join();
    EXPECT_EQ(status.load(), 200);
    // The second server appended onto the first's file: both documents are there.
    const http_reply g = b.get("/v1/corpora");
    ASSERT_EQ(g.status, 200);
    ASSERT_EQ(g.json["data"].size(), 1u) << g.body;
    EXPECT_EQ(g.json["data"][0]["n_documents"], 2) << g.body;
    first.signal(SIGTERM);
    second.signal(SIGTERM);
    EXPECT_EQ(first.wait_exit(60), 0) << first.log_tail();
    EXPECT_EQ(second.wait_exit(60), 0) << second.log_tail();
}

// A damaged file in --corpus-dir is not served, with a warning, and the server starts with the others; a POST to
// its name fails on it instead of replacing it.
TEST(ServerLifecycle, ADamagedCorpusFileIsLeftAsItIsAndTheServerStarts) {
    const std::string dir = tmp_dir() + "/lifecycle-damaged";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/bad.idx") << "not an index";
    server_process srv;
    ASSERT_EQ(srv.start({"-m", fixture_model(spm()), "--no-spec", "-t", "1", "--np", "1", "--corpus-dir", dir},
                        tmp_dir() + "/lifecycle-damaged.log"),
              "");
    const client c(srv.port());
    ASSERT_EQ(c.post("/v1/corpora", nlohmann::json{{"name", "good"}, {"text", "one"}}).status, 200);
    EXPECT_EQ(c.post("/v1/corpora", nlohmann::json{{"name", "bad"}, {"text", "two"}}).status, 500);
    std::ifstream in(dir + "/bad.idx");
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "not an index");
    const http_reply g = c.get("/v1/corpora");
    ASSERT_EQ(g.json["data"].size(), 1u) << g.body;
    srv.signal(SIGTERM);
    EXPECT_EQ(srv.wait_exit(60), 0) << srv.log_tail();
    EXPECT_NE(srv.log_tail().find("corpus file '" + dir + "/bad.idx' not served"), std::string::npos) << srv.log_tail();
}

TEST(ServerLifecycle, StartupErrorsExitOneWithOneLine) {
    const auto [out1, rc1] = run_command(rest_bin() + " serve -m " + tmp_dir() + "/no-such-model.gguf --port 0");
    EXPECT_EQ(rc1, 1);
    EXPECT_EQ(out1, "");  // nothing on stdout: no "listening" line

    // A port someone else holds.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
    ASSERT_EQ(::listen(fd, 1), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
    const int port = ntohs(a.sin_port);
    const auto [out2, rc2] = run_command(rest_bin() + " serve --no-spec -t 1 -m " + fixture_model(spm()) + " --port " +
                                         std::to_string(port), true);
    ::close(fd);
    EXPECT_EQ(rc2, 1);
    EXPECT_NE(out2.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos) << out2;

    const auto [out3, rc3] = run_command(rest_bin() + " serve -m x.gguf --np 0");
    EXPECT_EQ(rc3, 1);
}
