#include "conn-probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace {

bool addr_matches(const sockaddr_storage & a, const std::string & addr, int port) {
    char host[INET6_ADDRSTRLEN] = {};
    int  p = -1;
    if (a.ss_family == AF_INET) {
        const auto * in = reinterpret_cast<const sockaddr_in *>(&a);
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        p = ntohs(in->sin_port);
    } else if (a.ss_family == AF_INET6) {
        const auto * in = reinterpret_cast<const sockaddr_in6 *>(&a);
        inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
        p = ntohs(in->sin6_port);
    } else {
        return false;
    }
    return p == port && (addr.empty() || addr == host);
}

}  // namespace

int find_request_socket(const std::string & remote_addr, int remote_port, int local_port) {
    DIR * dir = opendir("/proc/self/fd");
    if (!dir) {
        return -1;
    }
    int found = -1;
    while (const dirent * e = readdir(dir)) {
        char *     end = nullptr;
        const long fd  = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) {
            continue;
        }
        struct stat st;
        if (fstat((int) fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
            continue;
        }
        sockaddr_storage peer{}, self{};
        socklen_t        lp = sizeof(peer), ls = sizeof(self);
        if (getpeername((int) fd, reinterpret_cast<sockaddr *>(&peer), &lp) != 0 ||
            getsockname((int) fd, reinterpret_cast<sockaddr *>(&self), &ls) != 0) {
            continue;
        }
        if (addr_matches(peer, remote_addr, remote_port) && addr_matches(self, "", local_port)) {
            found = (int) fd;
            break;
        }
    }
    closedir(dir);
    return found;
}

bool peer_closed(int fd) {
    if (fd < 0) {
        return false;
    }
    pollfd p{};
    p.fd     = fd;
    p.events = POLLRDHUP;
    if (poll(&p, 1, 0) <= 0) {
        return false;
    }
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}
