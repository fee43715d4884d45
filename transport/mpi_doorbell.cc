#include "transport/mpi_doorbell.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "parallel/mpi_util.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

constexpr int kHostBytes = 256;

}  // namespace

absl::StatusOr<std::unique_ptr<MpiDoorbell>> MpiDoorbell::Create(MPI_Comm world) {
  std::unique_ptr<MpiDoorbell> d(new MpiDoorbell());
  int size = 0;
  MPI_Comm_rank(world, &d->rank_);
  MPI_Comm_size(world, &size);
  // Every rank reaches the collective below, whatever happens to its socket: a failure is
  // reported as port 0 (never rung).
  int port = 0;
  d->fd_ = ::socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (d->fd_ >= 0) {
    int off = 0;  // IPv4 too
    ::setsockopt(d->fd_, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    socklen_t len = sizeof(a);
    if (::bind(d->fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        ::getsockname(d->fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin6_port);
    }
  }
  char host[kHostBytes] = {};
  ::gethostname(host, kHostBytes - 1);
  std::vector<char> hosts(static_cast<size_t>(kHostBytes) * size);
  std::vector<int> ports(size);
  CASCADE_RETURN_IF_ERROR(MpiError(MPI_Allgather(host, kHostBytes, MPI_CHAR, hosts.data(),
                                                 kHostBytes, MPI_CHAR, world),
                                   "doorbell: exchanging host names"));
  CASCADE_RETURN_IF_ERROR(MpiError(
      MPI_Allgather(&port, 1, MPI_INT, ports.data(), 1, MPI_INT, world), "doorbell: ports"));
  d->peers_.resize(size);
  for (int r = 0; r < size; ++r) {
    if (ports[r] <= 0 || ports[r] > 65535) continue;
    std::string h(hosts.data() + static_cast<size_t>(kHostBytes) * r,
                  strnlen(hosts.data() + static_cast<size_t>(kHostBytes) * r, kHostBytes));
    if (h == host) h = "127.0.0.1";
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(h.c_str(), std::to_string(ports[r]).c_str(), &hints, &res) != 0 || !res) {
      continue;
    }
    // Our socket is IPv6 with IPv4 mapped: map an IPv4 address.
    Peer& p = d->peers_[r];
    if (res->ai_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(res->ai_addr);
      sockaddr_in6 v6{};
      v6.sin6_family = AF_INET6;
      v6.sin6_port = v4->sin_port;
      v6.sin6_addr.s6_addr[10] = 0xff;
      v6.sin6_addr.s6_addr[11] = 0xff;
      std::memcpy(&v6.sin6_addr.s6_addr[12], &v4->sin_addr, 4);
      std::memcpy(&p.addr, &v6, sizeof(v6));
      p.len = sizeof(v6);
    } else if (res->ai_family == AF_INET6) {
      std::memcpy(&p.addr, res->ai_addr, res->ai_addrlen);
      p.len = res->ai_addrlen;
    }
    ::freeaddrinfo(res);
  }
  return d;
}

MpiDoorbell::~MpiDoorbell() {
  if (fd_ >= 0) ::close(fd_);
}

void MpiDoorbell::Ring(int rank) const {
  if (fd_ < 0 || rank < 0 || rank >= static_cast<int>(peers_.size())) return;
  const Peer& p = peers_[rank];
  if (p.len == 0) return;
  const char ring = 1;
  // Non-blocking; a full socket buffer or a lost datagram only delays the receiver.
  (void)::sendto(fd_, &ring, 1, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&p.addr), p.len);
}

void MpiDoorbell::Wake() const { Ring(rank_); }

bool MpiDoorbell::Wait(std::chrono::milliseconds timeout) {
  if (fd_ < 0) {
    ::usleep(static_cast<useconds_t>(std::chrono::microseconds(timeout).count()));
    return false;
  }
  pollfd p{fd_, POLLIN, 0};
  const int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (n <= 0) return false;
  char buf[64];
  while (::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
  return true;
}

}  // namespace cascade
