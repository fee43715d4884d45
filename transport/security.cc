#include "transport/security.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "util/mapped_file.h"

namespace cascade {
namespace {

using Clock = std::chrono::steady_clock;

std::string OpenSslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "unknown TLS error" : out;
}

struct SslCtxDeleter {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using SslCtx = std::unique_ptr<SSL_CTX, SslCtxDeleter>;

// The process's security, set once at start-up.
struct State {
  TlsFiles files;
  std::string cert_pem, key_pem, ca_pem;
  SslCtx client, server;
};

absl::Mutex g_mu;
State* g_state ABSL_GUARDED_BY(g_mu) = nullptr;  // null: plaintext

const State* Current() {
  absl::MutexLock lock(&g_mu);
  return g_state;
}

absl::StatusOr<SslCtx> MakeCtx(const TlsFiles& f, bool server) {
  SslCtx ctx(SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()));
  if (!ctx) return absl::InternalError(OpenSslError());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), f.cert.c_str()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(f.cert, ": not a usable certificate: ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), f.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(f.key, ": not a usable private key: ", OpenSslError()));
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.key, " is not the private key of ", f.cert));
  }
  if (SSL_CTX_load_verify_locations(ctx.get(), f.ca.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(f.ca, ": not a usable CA certificate: ", OpenSslError()));
  }
  SSL_CTX_set_verify(ctx.get(),
                     server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER,
                     nullptr);
  return ctx;
}

// Mutual TLS over a non-blocking socket. Reads and writes may run at once from two threads:
// each SSL call is made under the mutex, and waiting for the socket happens outside it.
class TlsStream : public ByteStream {
 public:
  TlsStream(Fd fd, SSL* ssl) : fd_(std::move(fd)), ssl_(ssl) {}
  ~TlsStream() override { SSL_free(ssl_); }

  // Runs the handshake to its end or the deadline.
  absl::Status Handshake(bool server, Clock::time_point deadline) {
    auto o = Drive([&] { return server ? SSL_accept(ssl_) : SSL_connect(ssl_); }, &deadline);
    if (!o.ok()) return absl::DeadlineExceededError("TLS handshake timed out");
    if (o->result != 1) {
      return absl::UnavailableError(absl::StrCat("TLS handshake failed: ", OpenSslError()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Read(char* buf, size_t n, const Clock::time_point* deadline) override {
    auto o = Drive([&] { return SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(n, 1 << 30))); },
                   deadline);
    if (!o.ok()) return o.status();
    if (o->result > 0) return static_cast<size_t>(o->result);
    if (o->error == SSL_ERROR_ZERO_RETURN) return size_t{0};
    if (o->error == SSL_ERROR_SYSCALL && o->sys_errno == 0) return size_t{0};  // EOF, no close_notify
    return absl::UnavailableError(absl::StrCat("connection broke: ", OpenSslError()));
  }

  absl::Status Write(const char* buf, size_t n) override {
    size_t done = 0;
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
    while (done < n) {
      auto o = Drive(
          [&] { return SSL_write(ssl_, buf + done, static_cast<int>(std::min<size_t>(n - done, 1 << 30))); },
          &deadline);
      if (!o.ok()) return absl::UnavailableError("send: the peer stopped reading");
      if (o->result <= 0) return absl::UnavailableError(absl::StrCat("send: ", OpenSslError()));
      done += static_cast<size_t>(o->result);
    }
    return absl::OkStatus();
  }

  void Shutdown(int how) override { ::shutdown(fd_.get(), how); }
  int fd() const override { return fd_.get(); }

 private:
  // An SSL call's end: result > 0 (or 1 for a handshake), or the SSL error it stopped on
  // (not WANT_READ / WANT_WRITE) with errno as the call left it.
  struct Outcome {
    int result = 0;
    int error = SSL_ERROR_NONE;
    int sys_errno = 0;
  };
  // Makes `call` (an SSL call on ssl_) under the mutex until it succeeds or fails for good,
  // waiting outside the mutex for the socket to be ready as SSL asks; the wait's error
  // when *deadline passes.
  template <class F>
  absl::StatusOr<Outcome> Drive(F&& call, const Clock::time_point* deadline) {
    for (;;) {
      Outcome o;
      {
        absl::MutexLock lock(&mu_);
        errno = 0;
        o.result = call();
        if (o.result > 0) return o;
        o.error = SSL_get_error(ssl_, o.result);
        o.sys_errno = errno;
      }
      if (o.error != SSL_ERROR_WANT_READ && o.error != SSL_ERROR_WANT_WRITE) return o;
      if (absl::Status st = WaitReady(fd_.get(), o.error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
                                      deadline);
          !st.ok()) {
        return st;
      }
    }
  }

  Fd fd_;
  absl::Mutex mu_;
  SSL* ssl_;  // calls on it are made under mu_
};

absl::StatusOr<std::unique_ptr<ByteStream>> Wrap(Fd fd, bool server, const std::string& host,
                                                 std::chrono::milliseconds timeout) {
  const State* s = Current();
  if (s == nullptr) return std::unique_ptr<ByteStream>(new SocketStream(std::move(fd)));
  SSL* ssl = SSL_new(server ? s->server.get() : s->client.get());
  if (ssl == nullptr) return absl::InternalError(OpenSslError());
  const int flags = ::fcntl(fd.get(), F_GETFL, 0);
  ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
  SSL_set_fd(ssl, fd.get());
  if (!server) {
    in6_addr ip6;
    in_addr ip4;
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    if (inet_pton(AF_INET, host.c_str(), &ip4) == 1 || inet_pton(AF_INET6, host.c_str(), &ip6) == 1) {
      X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    } else {
      SSL_set1_host(ssl, host.c_str());
      SSL_set_tlsext_host_name(ssl, host.c_str());
    }
  }
  auto stream = std::make_unique<TlsStream>(std::move(fd), ssl);
  if (absl::Status st = stream->Handshake(server, Clock::now() + timeout); !st.ok()) return st;
  return std::unique_ptr<ByteStream>(std::move(stream));
}

}  // namespace

absl::Status SetTransportSecurity(const TlsFiles& files) {
  if (!files.enabled()) return absl::OkStatus();
  if (files.key.empty() || files.ca.empty()) {
    return absl::InvalidArgumentError("TLS needs a certificate, its key and the cluster's CA");
  }
  auto state = std::make_unique<State>();
  state->files = files;
  for (auto [path, out] : {std::pair{&files.cert, &state->cert_pem},
                           std::pair{&files.key, &state->key_pem}, std::pair{&files.ca, &state->ca_pem}}) {
    auto text = ReadFileToString(*path, 1 << 20);
    if (!text.ok()) return text.status();
    *out = std::move(*text);
  }
  auto client = MakeCtx(files, false);
  if (!client.ok()) return client.status();
  auto server = MakeCtx(files, true);
  if (!server.ok()) return server.status();
  state->client = std::move(*client);
  state->server = std::move(*server);
  absl::MutexLock lock(&g_mu);
  delete g_state;
  g_state = state.release();  // lives until exit: links made from it may outlive main
  return absl::OkStatus();
}

bool TlsEnabled() { return Current() != nullptr; }

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(ServerRole role) {
  const State* s = Current();
  if (s == nullptr) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(role == ServerRole::kCluster
                                          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  o.pem_root_certs = s->ca_pem;
  o.pem_key_cert_pairs.push_back({s->key_pem, s->cert_pem});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() {
  const State* s = Current();
  if (s == nullptr) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = s->ca_pem;
  o.pem_private_key = s->key_pem;
  o.pem_cert_chain = s->cert_pem;
  return grpc::SslCredentials(o);
}

absl::StatusOr<std::unique_ptr<ByteStream>> ClientStream(Fd fd, const std::string& host,
                                                         std::chrono::milliseconds timeout) {
  return Wrap(std::move(fd), false, host, timeout);
}

absl::StatusOr<std::unique_ptr<ByteStream>> ServerStream(Fd fd, std::chrono::milliseconds timeout) {
  return Wrap(std::move(fd), true, "", timeout);
}

}  // namespace cascade
