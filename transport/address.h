// Data-plane addresses: where a stage's frames or the coordinator's results are sent,
// written with a scheme that names the transport.
//
//   tcp://host:port      length-prefixed frames on plain TCP (transport/tcp_link.h)
//   grpc://host:port     gRPC streams (transport/grpc_link.h); a bare host:port means this
//   inproc://name        an endpoint of this process (transport/inproc.h)
//   mpi://RANK           MPI point-to-point to a rank of MPI_COMM_WORLD (transport/mpi_link.h)
//   nccl://RANK          NCCL send/recv between GPUs of one node (transport/nccl_link.h)
//
// Contract: ParseAddress accepts exactly these forms (hosts may be names, IPv4 or
// bracketed IPv6; ports 0-65535; ranks 0-2^20; names of letters, digits, '-', '_', '.')
// and otherwise names the address and what is wrong. FormatAddress(ParseAddress(a)) == a
// for every accepted a except a bare host:port, which is written grpc://host:port. Pure.
#ifndef CASCADE_TRANSPORT_ADDRESS_H_
#define CASCADE_TRANSPORT_ADDRESS_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace cascade {

enum class Scheme { kTcp, kGrpc, kInproc, kMpi, kNccl };
const char* SchemeName(Scheme s);  // "tcp", "grpc", ...

struct HostPort {
  std::string host;  // name or numeric address, without brackets
  int port = 0;
  std::string ToString() const;  // host:port, IPv6 hosts in brackets
};

struct Address {
  Scheme scheme = Scheme::kGrpc;
  HostPort host_port;  // tcp, grpc
  std::string name;    // inproc
  int rank = -1;       // mpi, nccl
};

absl::StatusOr<Address> ParseAddress(absl::string_view text);
std::string FormatAddress(const Address& a);

// "host:port" or "[v6]:port" (no scheme).
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text);

// The address other machines use for a server listening on `listen` (host:port) whose
// bound port is `port`: a wildcard host (0.0.0.0, [::], "") becomes 127.0.0.1, since a
// wildcard is not an address anyone can connect to; set --advertise for other machines.
std::string AdvertisedHostPort(absl::string_view listen, int port);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_ADDRESS_H_
