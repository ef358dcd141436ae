// `rest generate --rpc ... -ngl 99` on two llama.cpp rpc-server processes over loopback: the layers run remotely,
// and greedy output is the local run's token for token, with and without speculation, in both layouts, with the
// same tokens per forward (M) at a fixed draft size. Bad endpoints and a server that dies mid-run are one-line
// errors, never a crash.
#include "cli-util.h"
#include "test-util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

extern char ** environ;

namespace {

using rest_test::shell_quote;

// A port the kernel says is free now (bound to port 0, then closed): the server binds it a moment later.
int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len     = sizeof(a);
    if (fd < 0 || bind(fd, (sockaddr *) &a, sizeof(a)) != 0 || getsockname(fd, (sockaddr *) &a, &len) != 0) return -1;
    close(fd);
    return ntohs(a.sin_port);
}

bool port_open(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port        = htons(port);
    const bool ok     = fd >= 0 && connect(fd, (sockaddr *) &a, sizeof(a)) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

// One rpc-server child on a loopback port, killed when it goes out of scope.
class rpc_server {
  public:
    rpc_server(const std::string & bin, const std::string & log) : port_(free_port()) {
        const std::string        p = std::to_string(port_);
        std::vector<std::string> args{bin, "-H", "127.0.0.1", "-p", p, "-t", "1"};
        std::vector<char *>      argv;
        for (auto & a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        if (port_ <= 0 || posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
        posix_spawn_file_actions_destroy(&fa);
        for (int i = 0; i < 200 && pid_ > 0 && !port_open(port_); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    ~rpc_server() { kill(); }
    rpc_server(const rpc_server &)             = delete;
    rpc_server & operator=(const rpc_server &) = delete;

    // Alive (not some other process on the port) and listening.
    bool up() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0 && port_open(port_); }
    std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
    void        kill() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
            pid_ = -1;
        }
    }

  private:
    int   port_ = -1;
    pid_t pid_  = -1;
};

class rpc_cli : public rest_test::cli_test {
  protected:
    void SetUp() override {
        open("cli-rpc-");
        if (HasFatalFailure()) return;
        server_bin_ = std::filesystem::path(bin_).parent_path() / "rpc-server";
        ASSERT_TRUE(std::filesystem::exists(server_bin_)) << "rpc-server not built at " << server_bin_;
        a_ = std::make_unique<rpc_server>(server_bin_, dir_ + "/server-a.log");
        b_ = std::make_unique<rpc_server>(server_bin_, dir_ + "/server-b.log");
        ASSERT_TRUE(a_->up() && b_->up()) << "rpc-server did not start: " << rest_test::slurp(dir_ + "/server-a.log");
        rpc_ = " --rpc " + a_->endpoint() + "," + b_->endpoint() + " -ngl 99";
    }

    nlohmann::json generate(const std::string & model, const std::string & args) {
        const auto r = run("generate -m " + shell_quote(model) + " -p " + shell_quote(prompt_) + " -n 48 -t 1 --json " +
                           "--no-warm-start " + args);
        EXPECT_EQ(r.code, 0) << args << ": " << r.err;
        return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{{"tokens", nullptr}, {"n_forward", -1}};
    }

    std::string                 prompt_ = "Once upon a time";
    std::string                 server_bin_, rpc_;
    std::unique_ptr<rpc_server> a_, b_;
};

TEST_F(rpc_cli, remote_layers_give_the_local_output_and_the_local_M) {
    // Where the local CPU backend repacks a type's weights (Q4_0 on x86; Q8_0 too on ARM with dotprod) and an
    // rpc-server does not, the two sum in another order and greedy tokens may drift: only these types compare.
#if defined(__x86_64__)
    for (const char * type : {"f32", "q8_0"}) {
#else
    for (const char * type : {"f32"}) {
#endif
        rest::fixture_params p;
        p.type             = type;
        p.n_layer          = 4;  // two layers on each server
        const auto  model  = rest_test::fixture_model(p);
        const auto  plain  = generate(model, "--no-spec");
        const auto  remote = generate(model, "--no-spec" + rpc_);
        EXPECT_EQ(remote["tokens"], plain["tokens"]) << type << ": plain decoding over RPC";

        // A datastore holding the first two thirds of the output: drafts are accepted there and fail after.
        const std::string text   = plain["text"].get<std::string>();
        const std::string corpus = dir_ + "/corpus-" + type + ".txt";
        std::ofstream(corpus) << prompt_ << text.substr(0, text.size() * 2 / 3) << "\n";
        const std::string idx = dir_ + "/" + type + ".idx";
        ASSERT_EQ(run("index build -m " + shell_quote(model) + " -o " + shell_quote(idx) + " " + shell_quote(corpus)).code, 0);
        for (const char * layout : {"chain", "tree"}) {
            const std::string spec  = std::string("--draft-fixed 8 --draft-layout ") + layout + " --index " + shell_quote(idx);
            const auto        local = generate(model, spec);
            const auto        rpc   = generate(model, spec + rpc_);
            EXPECT_EQ(local["tokens"], plain["tokens"]) << type << " " << layout;
            EXPECT_EQ(rpc["tokens"], plain["tokens"]) << type << " " << layout << ": speculation over RPC";
            EXPECT_EQ(rpc["n_forward"], local["n_forward"]) << type << " " << layout << ": M over RPC";
            EXPECT_LT(local["n_forward"].get<int>(), plain["n_forward"].get<int>() * 3 / 4)
                << type << " " << layout << ": the datastore must make drafts pay, or M proves nothing";
        }
    }
}

TEST_F(rpc_cli, bad_or_unreachable_servers_are_one_line_errors) {
    const auto model = rest_test::fixture_model(rest::fixture_params{});
    a_->kill();  // its port is now closed
    for (const std::string list : {a_->endpoint(), std::string("nohost"), std::string("127.0.0.1:notaport"),
                                   b_->endpoint() + ",", std::string("127.0.0.1:70000")}) {
        const auto r = run("generate -m " + shell_quote(model) + " -p hi -n 4 -ngl 99 --rpc " + shell_quote(list));
        EXPECT_TRUE(r.one_line_error()) << list << ": code " << r.code << " stderr: " << r.err;
    }
}

// llama.cpp aborts when a server it holds layers on goes away; rest turns that into one line and exit 1.
TEST_F(rpc_cli, a_server_lost_mid_run_ends_with_one_line) {
    const auto        model = rest_test::fixture_model(rest::fixture_params{});
    const std::string many  = dir_ + "/prompts.jsonl";  // minutes of work: the kill lands mid-run
    {
        std::ofstream out(many);
        for (int i = 0; i < 2000; ++i) out << nlohmann::json{{"prompt", "story " + std::to_string(i)}}.dump() << "\n";
    }
    // Killed once the run is surely under way: rest's probe and its real connection both accepted.
    std::thread killer([this] {
        for (int i = 0; i < 1200; ++i) {
            const std::string log = rest_test::slurp(dir_ + "/server-b.log");
            size_t n = 0;
            for (size_t at = log.find("Accepted client"); at != std::string::npos; at = log.find("Accepted client", at + 1)) ++n;
            if (n >= 2) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        b_->kill();
    });
    const auto r = run("generate -m " + shell_quote(model) + " -f " + shell_quote(many) + " -n 64 -t 1 --no-spec" + rpc_);
    killer.join();
    EXPECT_TRUE(r.one_line_error()) << "code " << r.code << " stderr: " << r.err;
    EXPECT_NE(r.err.find("RPC server"), std::string::npos) << r.err;  // llama.cpp's message, not the probe's
}

}  // namespace
