// Transport security: this process's identity on every link. With TLS files set, every
// gRPC server and channel uses TLS (the control and data servers require a client
// certificate from the cluster's CA; the public API server does not), and every TCP
// data-plane connection is mutual TLS 1.3 (OpenSSL) checked against the same CA. Without
// them everything is plaintext, as on loopback or a trusted network.
//
// Contract: SetTransportSecurity is called once at start-up, before any server or link is
// made; it loads and checks the files (a key that is not the certificate's, a certificate
// the CA did not sign, an unreadable file: an error naming it). The other functions are
// thread-safe. A TLS handshake that fails (wrong CA, no client certificate, a peer that
// does not speak TLS) fails the connection with the reason; nothing passes in plaintext.
#ifndef CASCADE_TRANSPORT_SECURITY_H_
#define CASCADE_TRANSPORT_SECURITY_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "transport/byte_stream.h"

namespace cascade {

struct TlsFiles {
  std::string cert;  // PEM certificate of this process (its SANs name the addresses it serves)
  std::string key;   // PEM private key
  std::string ca;    // PEM certificate of the cluster's CA
  bool enabled() const { return !cert.empty(); }
};

absl::Status SetTransportSecurity(const TlsFiles& files);
bool TlsEnabled();

// gRPC: the public API (server authentication only), and the control and data services
// (client certificates from the CA required).
enum class ServerRole { kPublic, kCluster };
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(ServerRole role);
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials();

// TCP data plane: wraps a connected socket. The client checks that the server's
// certificate comes from the CA and names `host`; the server requires a client certificate
// from the CA. Without TLS, a plain SocketStream.
absl::StatusOr<std::unique_ptr<ByteStream>> ClientStream(Fd fd, const std::string& host,
                                                         std::chrono::milliseconds timeout);
absl::StatusOr<std::unique_ptr<ByteStream>> ServerStream(Fd fd, std::chrono::milliseconds timeout);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_SECURITY_H_
