// Noticing that a client has gone while its request is still being generated.
//
// cpp-httplib 0.11 (Debian 12) gives handlers no access to their socket and no "connection closed" query, and a
// non-streamed response writes nothing until the end, so a vanished client would hold its slot until the
// generation finished. The handler instead finds its own accepted socket (the one whose local and peer
// addresses match the request's) and polls it for a hang-up without reading from it.
#pragma once

#include <string>

// The connected socket the request arrived on, or -1. Cost: one scan of /proc/self/fd.
int find_request_socket(const std::string & remote_addr, int remote_port, int local_port);

// True when the peer closed or reset the connection (POLLRDHUP/POLLHUP/POLLERR). Never blocks; false for fd -1.
// A client that half-closes its side after sending the request counts as gone.
bool peer_closed(int fd);
