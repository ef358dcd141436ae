// Helpers for the server's integration tests: start `rest serve` from REST_BIN on a free loopback port, talk to it
// with cpp-httplib's client (plain and Server-Sent Events), and run `rest generate --no-spec` as the reference.
#pragma once

#include "strict-compare.h"
#include "test-util.h"

#include "rest/llama-model.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <poll.h>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <algorithm>
#include <vector>

namespace rest_test {

// A `rest serve` child process. The child dies with the test (PR_SET_PDEATHSIG) if the test crashes.
class server_process {
  public:
    server_process() = default;
    server_process(const server_process &) = delete;
    server_process & operator=(const server_process &) = delete;
    ~server_process() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            int st = 0;
            ::waitpid(pid_, &st, 0);
        }
        if (out_fd_ >= 0) {
            ::close(out_fd_);
        }
    }

    // Starts `rest serve ARGS --port 0` with stderr in log_path and waits (up to timeout_s) for the line that
    // names the port. Returns "" on success, else what went wrong (with the log's tail).
    std::string start(const std::vector<std::string> & args, const std::string & log_path, double timeout_s = 120) {
        log_path_ = log_path;
        int fds[2];
        if (::pipe(fds) != 0) {
            return "pipe failed";
        }
        std::vector<std::string> argv = {rest_bin(), "serve"};
        argv.insert(argv.end(), args.begin(), args.end());
        argv.push_back("--port");
        argv.push_back("0");
        const pid_t parent = ::getpid();
        pid_               = ::fork();
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) {
                ::_exit(127);
            }
            ::dup2(fds[1], 1);
            const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (log >= 0) {
                ::dup2(log, 2);
            }
            ::close(fds[0]);
            std::vector<char *> cargv;
            for (auto & a : argv) {
                cargv.push_back(a.data());
            }
            cargv.push_back(nullptr);
            ::execv(cargv[0], cargv.data());
            ::_exit(127);
        }
        ::close(fds[1]);
        out_fd_ = fds[0];
        std::string line;
        const auto  deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds((long) (timeout_s * 1000));
        while (line.find('\n') == std::string::npos) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                                    std::chrono::steady_clock::now());
            if (left.count() <= 0) {
                return "no port line within " + std::to_string(timeout_s) + " s; log: " + log_tail();
            }
            pollfd p{out_fd_, POLLIN, 0};
            if (::poll(&p, 1, (int) left.count()) <= 0) {
                continue;
            }
            char          buf[256];
            const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
            if (n <= 0) {
                int st = 0;
                ::waitpid(pid_, &st, 0);
                pid_ = -1;
                return "the server exited before listening; log: " + log_tail();
            }
            line.append(buf, (size_t) n);
        }
        const size_t colon = line.rfind(':');
        port_              = colon == std::string::npos ? 0 : std::atoi(line.c_str() + colon + 1);
        first_line_        = line.substr(0, line.find('\n'));
        return port_ > 0 ? "" : "bad port line: " + line;
    }

    int port() const { return port_; }
    pid_t pid() const { return pid_; }
    const std::string & first_line() const { return first_line_; }

    void signal(int sig) const { ::kill(pid_, sig); }

    // Waits up to timeout_s for the process to exit; returns its exit code (128 + signal when killed by one), or
    // -1 on timeout (then it is killed).
    int wait_exit(double timeout_s) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds((long) (timeout_s * 1000));
        while (pid_ > 0) {
            int         st = 0;
            const pid_t r  = ::waitpid(pid_, &st, WNOHANG);
            if (r == pid_) {
                pid_ = -1;
                return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            }
            if (std::chrono::steady_clock::now() > deadline) {
                ::kill(pid_, SIGKILL);
                ::waitpid(pid_, &st, 0);
                pid_ = -1;
                return -1;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return -1;
    }

    std::string log_tail() const {
        FILE * f = std::fopen(log_path_.c_str(), "r");
        if (!f) {
            return "(no log)";
        }
        std::string s;
        char        buf[4096];
        size_t      n;
        while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
            s.append(buf, n);
        }
        std::fclose(f);
        return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
    }

  private:
    pid_t       pid_    = -1;
    int         out_fd_ = -1;
    int         port_   = 0;
    std::string log_path_;
    std::string first_line_;
};

struct http_reply {
    int            status = 0;  // 0: no response (connection failed)
    std::string    body;
    nlohmann::json json;        // parsed body (null when it is not JSON)
    std::string    content_type;
    std::string    allow;       // the Allow header (a 405 names the methods the path takes)
};

struct sse_reply {
    int                         status = 0;
    std::string                 content_type;
    std::vector<nlohmann::json> events;     // parsed "data:" payloads, in order
    bool                        done = false;  // "data: [DONE]" arrived
    std::string                 raw;
};

class client {
  public:
    explicit client(int port, std::string key = "") : port_(port), key_(std::move(key)) {}

    http_reply get(const std::string & path) const { return call("GET", path, ""); }
    http_reply del(const std::string & path) const { return call("DELETE", path, ""); }
    http_reply post(const std::string & path, const std::string & body) const { return call("POST", path, body); }
    http_reply put(const std::string & path, const std::string & body) const { return call("PUT", path, body); }
    http_reply post(const std::string & path, const nlohmann::json & body) const { return post(path, body.dump()); }

    // POSTs and reads Server-Sent Events. With max_events >= 0, closes the connection after that many events (a
    // client that disconnects mid-stream).
    sse_reply stream(const std::string & path, const nlohmann::json & body, int max_events = -1) const {
        httplib::Client cli("127.0.0.1", port_);
        cli.set_read_timeout(120, 0);
        sse_reply       out;
        std::string     pending;
        httplib::Request req;
        req.method  = "POST";
        req.path    = path;
        req.body    = body.dump();
        req.headers = headers();
        req.set_header("Content-Type", "application/json");
        req.content_receiver = [&](const char * data, size_t len, uint64_t, uint64_t) {
            out.raw.append(data, len);
            pending.append(data, len);
            size_t pos;
            while ((pos = pending.find("\n\n")) != std::string::npos) {
                const std::string ev = pending.substr(0, pos);
                pending.erase(0, pos + 2);
                if (ev.rfind("data: ", 0) != 0) {
                    continue;
                }
                const std::string payload = ev.substr(6);
                if (payload == "[DONE]") {
                    out.done = true;
                } else {
                    out.events.push_back(nlohmann::json::parse(payload, nullptr, false));
                }
            }
            return max_events < 0 || (int) out.events.size() < max_events;
        };
        httplib::Response res;
        httplib::Error    err = httplib::Error::Success;
        cli.send(req, res, err);
        out.status       = res.status > 0 ? res.status : 0;
        out.content_type = res.get_header_value("Content-Type");
        if (max_events < 0 && !res.body.empty()) {  // an error reply (not a stream) lands in the body
            out.raw = res.body;
        }
        return out;
    }

  private:
    httplib::Headers headers() const {
        httplib::Headers h;
        if (!key_.empty()) {
            h.emplace("Authorization", "Bearer " + key_);
        }
        return h;
    }

    http_reply call(const std::string & method, const std::string & path, const std::string & body) const {
        httplib::Client cli("127.0.0.1", port_);
        cli.set_read_timeout(120, 0);
        httplib::Result r = method == "GET"      ? cli.Get(path.c_str(), headers())
                            : method == "DELETE" ? cli.Delete(path.c_str(), headers())
                            : method == "PUT"    ? cli.Put(path.c_str(), headers(), body, "application/json")
                                                 : cli.Post(path.c_str(), headers(), body, "application/json");
        http_reply out;
        if (!r) {
            return out;
        }
        out.status       = r->status;
        out.body         = r->body;
        out.content_type = r->get_header_value("Content-Type");
        out.allow        = r->get_header_value("Allow");
        out.json         = nlohmann::json::parse(out.body, nullptr, false);
        if (out.json.is_discarded()) {
            out.json = nullptr;
        }
        return out;
    }

    int         port_;
    std::string key_;
};

// stories260K's path in ../shared/data, or "" without the data.
inline std::string stories_model() {
    const std::string data = shared_data();
    return data.empty() ? "" : data + "/models/stories260K.gguf";
}

// A suite's one `rest serve` on stories260K (../shared/data), started once for the suite with Suite::server_args()
// after `-m MODEL`; its tests skip visibly (Skipped in CTest) without the data.
template <class Suite> class stories_server_test : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (shared_data().empty()) return;
        const std::string path = Suite::model_path();
        model_                 = rest::model::load(path).release();
        srv_                   = new server_process();
        std::vector<std::string> args = {"-m", path};
        for (const auto & a : Suite::server_args()) args.push_back(a);
        start_error_ = srv_->start(args, tmp_dir() + "/" + Suite::log_name());
    }
    static void TearDownTestSuite() {
        delete srv_;
        delete model_;
        srv_   = nullptr;
        model_ = nullptr;
    }
    void SetUp() override {
        if (!srv_) GTEST_SKIP() << "no shared data (stories260K)";
        ASSERT_EQ(start_error_, "") << "server did not start: " << start_error_;
    }

    // The model served; a suite may declare its own (a fixture that uses stories260K's tokenizer, say).
    static std::string model_path() { return shared_data() + "/models/stories260K.gguf"; }

    static inline rest::model *    model_ = nullptr;
    static inline server_process * srv_   = nullptr;
    static inline std::string      start_error_;
};

// Runs a shell command, returns its stdout (and stderr when merge_stderr; else it is discarded) and exit code.
inline std::pair<std::string, int> run_command(const std::string & cmd, bool merge_stderr = false) {
    std::string out;
    FILE *      p = ::popen((cmd + (merge_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
    if (!p) {
        return {"", -1};
    }
    char   buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) {
        out.append(buf, n);
    }
    const int st = ::pclose(p);
    return {out, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
}

// `rest generate --no-spec --json` over prompts (one process, one JSON object per prompt).
inline std::vector<nlohmann::json> generate_no_spec(const std::string & model, const std::vector<std::string> & prompts,
                                                    int n_predict, const std::string & tag) {
    const std::string file = tmp_dir() + "/server-prompts-" + tag + ".jsonl";
    {
        FILE * f = std::fopen(file.c_str(), "w");
        for (const auto & p : prompts) {
            std::fprintf(f, "%s\n", nlohmann::json{{"prompt", p}}.dump().c_str());
        }
        std::fclose(f);
    }
    // --draft-fixed 0: no cost calibration, which --no-spec does not need.
    const auto [out, rc] = run_command(rest_bin() + " generate --no-spec --draft-fixed 0 --json -t 1 -c 1024 -m " +
                                       model + " -f " + file + " -n " + std::to_string(n_predict));
    std::vector<nlohmann::json> res;
    if (rc != 0) {
        ADD_FAILURE() << "rest generate failed (exit " << rc << ")";
        return res;
    }
    size_t pos = 0;
    while (pos < out.size()) {
        const size_t nl = out.find('\n', pos);
        const std::string line = out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        pos = nl == std::string::npos ? out.size() : nl + 1;
        if (!line.empty()) {
            res.push_back(nlohmann::json::parse(line));
        }
    }
    EXPECT_EQ(res.size(), prompts.size());
    return res;
}

// Lossless greedy check through the strict comparison (strict-compare.h): got may leave want only at a near-tie of
// plain decoding to its runner-up, after which it is compared with plain decoding resumed from got's prefix. want is
// the server's own plain output; it is regenerated here on a fresh single-slot context to get its top-2 record.
// (A request that stopped on max_tokens and one that stopped on EOG are told apart by the lengths alone.)
// Returns "" when got is acceptable (counting such near-ties), else what differs.
inline std::string check_greedy(const rest::model & m, const std::string & prompt_text, const std::vector<int> & got,
                                const std::vector<int> & want, int * n_near_ties = nullptr, float eps = k_tie_eps) {
    if (got == want) {
        return "";
    }
    const std::vector<int> prompt = m.vocab().tokenize(prompt_text, true, true);
    rest::context_params   cp;
    cp.n_ctx     = (std::int32_t) std::max<size_t>(256, prompt.size() + want.size() + 8);
    cp.n_threads = 1;
    auto       ctx   = m.new_context(cp);
    const int  n     = (int) want.size();
    const auto plain = generate_greedy(m, *ctx, prompt, n, nullptr, 0, nullptr);
    if (plain.tokens != want) {
        return "the server's plain output is not what plain decoding gives here (" + std::to_string(want.size()) +
               " vs " + std::to_string(plain.tokens.size()) + " tokens)";
    }
    // The request's own limit is not known here: resumed runs may go as far as the longer output.
    const int n_resume = (int) std::max(want.size(), got.size());
    const rest::exactness_verdict v =
        rest::compare_to_plain(plain.trace(), got, eps, resume_plain(m, *ctx, prompt, n_resume));
    if (!v.ok) {
        return v.why;
    }
    if (n_near_ties) {
        *n_near_ties += v.near_ties;
    }
    std::fprintf(stderr, "note: %d near-tie divergence(s), the first at token %d (top-2 logit gap %.5f)\n", v.near_ties,
                 v.first_divergence, v.gap_at_first);
    return "";
}

}  // namespace rest_test
