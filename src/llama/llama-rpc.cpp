#include "llama-rpc.h"

#include "ggml-backend.h"
#include "llama-util.h"
#include "rest/types.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <thread>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <set>

namespace rest {

namespace {

constexpr int k_connect_timeout_ms = 5000;

void split_endpoint(const std::string & ep, std::string & host, std::string & port) {
    const size_t colon = ep.rfind(':');
    host = colon == std::string::npos ? "" : ep.substr(0, colon);
    port = colon == std::string::npos ? "" : ep.substr(colon + 1);
    bool digits = !port.empty() && port.size() <= 5;
    for (char c : port) digits = digits && c >= '0' && c <= '9';
    if (host.empty() || !digits || std::stoi(port) < 1 || std::stoi(port) > 65535) {
        throw user_error("--rpc: '" + ep + "' is not HOST:PORT");
    }
    if (host.find(':') != std::string::npos) {  // llama.cpp splits at the first colon: no IPv6 literals
        throw user_error("--rpc: '" + ep + "': IPv6 addresses are not supported by llama.cpp's RPC; use a host name");
    }
}

// Whether a TCP connection to ep opens within the timeout; why says what failed.
bool can_connect(const std::string & ep, std::string & why) {
    std::string host, port;
    split_endpoint(ep, host, port);
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
        why = gai_strerror(rc);
        return false;
    }
    bool ok = false;
    why     = "no address";
    for (addrinfo * a = res; a && !ok; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        fcntl(fd, F_SETFL, O_NONBLOCK);
        int err = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
        if (err == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            socklen_t len = sizeof(err);
            err = poll(&p, 1, k_connect_timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0
                      ? err
                      : ETIMEDOUT;
        }
        ok  = err == 0;
        why = ok ? "" : std::strerror(err);
        close(fd);
    }
    freeaddrinfo(res);
    return ok;
}

// An rpc-server serves one client at a time: a busy one accepts the TCP connection (the kernel's backlog) and then
// never answers llama.cpp's handshake, which waits forever. A watchdog turns that wait into a one-line error.
class handshake_watchdog {
  public:
    explicit handshake_watchdog(const std::string & ep) :
        thread_([this, ep] {
            std::unique_lock<std::mutex> lock(mutex_);
            if (!cv_.wait_for(lock, std::chrono::seconds(k_handshake_timeout_s), [this] { return done_; })) {
                std::fprintf(stderr,
                             "rest: error: --rpc: %s accepted the connection but did not answer in %d s (an rpc-server "
                             "serves one client at a time: is another process using it?)\n",
                             ep.c_str(), k_handshake_timeout_s);
                std::fflush(stderr);
                _exit(1);
            }
        }) {}
    ~handshake_watchdog() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

  private:
    static constexpr int    k_handshake_timeout_s = 20;
    std::mutex              mutex_;
    std::condition_variable cv_;
    bool                    done_ = false;
    std::thread             thread_;
};

}  // namespace

std::vector<std::string> parse_rpc_servers(const std::string & list) {
    std::vector<std::string> out;
    size_t                   start = 0;
    while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        const std::string ep = list.substr(start, comma - start);
        std::string host, port;
        split_endpoint(ep, host, port);
        out.push_back(ep);
        start = comma + 1;
    }
    return out;
}

void llama_add_rpc_servers(const std::vector<std::string> & endpoints) {
    if (endpoints.empty()) return;
    llama_ensure_backend();
    ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
    using add_server_fn    = ggml_backend_reg_t (*)(const char *);
    auto add = rpc ? (add_server_fn) ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server") : nullptr;
    if (!add) {
        throw user_error("--rpc: this build's llama.cpp has no RPC backend (configure with -DGGML_RPC=ON)");
    }
    static std::mutex            mutex;
    static std::set<std::string> added;
    std::lock_guard<std::mutex>  lock(mutex);
    for (const auto & ep : endpoints) {
        if (added.count(ep)) continue;
        std::string why;
        if (!can_connect(ep, why)) {
            throw user_error("--rpc: cannot connect to " + ep + ": " + why + " (is rpc-server running there?)");
        }
        // ggml-rpc writes to its sockets without MSG_NOSIGNAL: a server that went away would kill the process with
        // SIGPIPE, silently. Ignored, the write fails and llama.cpp stops with its reason, which rest reports on
        // one line (set_llama_stop_cleanup()).
        std::signal(SIGPIPE, SIG_IGN);
        ggml_backend_reg_t reg = nullptr;
        {
            handshake_watchdog watchdog(ep);
            reg = add(ep.c_str());
        }
        if (!reg) {
            throw user_error("--rpc: " + ep + " reports no devices");
        }
        ggml_backend_register(reg);
        added.insert(ep);
    }
}

}  // namespace rest
