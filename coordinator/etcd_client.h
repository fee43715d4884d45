// EtcdClient: the few calls of etcd's v3 gRPC API the coordinators need (proto/etcd/rpc.proto):
// leases (grant, keep alive, revoke), reading and writing keys, and the two transactions
// leader election is made of: create a key unless it exists, and write a key only while
// another (the leader's key) is still the one we created.
//
// Contract:
// - Endpoints are "host:port", "http://host:port" or "https://host:port", comma-separated
//   (one per etcd member). With EtcdTls (a CA, and optionally a client certificate and key
//   for etcd's --client-cert-auth) every member is reached over TLS, verified against the
//   CA; an https:// endpoint without a CA, an http:// one with a CA, a certificate without
//   its key, or an unreadable file is InvalidArgument naming it.
//   A call goes to the member that answered last and, when it does not answer
//   (UNAVAILABLE or the deadline), to the next; it fails only when none answers, with
//   Unavailable naming every member it tried. Each call waits at most `deadline`.
// - Errors name etcd and the member: "etcd at 127.0.0.1:2379: ...". A lease that expired
//   is NotFound; a guarded write whose guard no longer holds is FailedPrecondition.
// - Thread-safe (gRPC stubs are); holds no state but the endpoints and the member to try first.
#ifndef CASCADE_COORDINATOR_ETCD_CLIENT_H_
#define CASCADE_COORDINATOR_ETCD_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "etcd/rpc.grpc.pb.h"
#include "grpcpp/security/credentials.h"

namespace cascade {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // the store's revision when the key was created
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

// PEM files for TLS to etcd (etcdctl's --cacert, --cert, --key); empty: plain connections.
struct EtcdTls {
  std::string ca, cert, key;
};

class EtcdClient {
 public:
  // InvalidArgument for an empty or malformed endpoint list or TLS files (see the
  // contract). Connects lazily.
  static constexpr std::chrono::milliseconds kDefaultDeadline{2000};
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      const std::string& endpoints, std::chrono::milliseconds deadline = kDefaultDeadline,
      const EtcdTls& tls = {});

  const std::vector<std::string>& endpoints() const { return endpoints_; }

  // A lease of `ttl` (etcd may grant more): its id.
  absl::StatusOr<int64_t> GrantLease(std::chrono::seconds ttl);
  // Renews the lease: its remaining time to live. NotFound when it has expired.
  absl::StatusOr<std::chrono::seconds> KeepAlive(int64_t lease);
  absl::Status RevokeLease(int64_t lease);

  // The key, or nullopt when it does not exist.
  absl::StatusOr<std::optional<EtcdKeyValue>> Get(const std::string& key);
  // The store's revision after the write. `lease` 0: the key outlives every lease.
  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value,
                              int64_t lease = 0);

  // Creates `key` = `value` (attached to `lease`) unless the key exists. `created` says
  // which happened; `kv` is the key as it is now (ours, or whoever holds it).
  struct CreateResult {
    bool created = false;
    EtcdKeyValue kv;
  };
  absl::StatusOr<CreateResult> CreateIfAbsent(const std::string& key, const std::string& value,
                                              int64_t lease);
  // Writes `key` = `value` only while `guard` exists with create revision `guard_revision`
  // (the leader writes only while it is the leader); FailedPrecondition otherwise.
  absl::Status PutIfGuard(const std::string& key, const std::string& value,
                          const std::string& guard, int64_t guard_revision);
  // Deletes `key` only while it has create revision `revision`.
  absl::Status DeleteIfCreated(const std::string& key, int64_t revision);

 private:
  struct Stubs {
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };
  struct Member {
    std::string address;
    std::shared_ptr<Stubs> stubs ABSL_GUARDED_BY(mu);
    std::chrono::steady_clock::time_point made ABSL_GUARDED_BY(mu);
    absl::Mutex mu;
  };
  // A member's stubs; remade (a new connection) when `stale` and the last are over a
  // second old: a connection made while etcd restarts may never be served.
  std::shared_ptr<Stubs> StubsOf(Member& m, bool stale);
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds deadline,
             std::shared_ptr<grpc::ChannelCredentials> credentials);
  // Calls `call(member, context)` on the members in turn until one answers.
  template <typename Call>
  absl::Status OnAnyMember(const char* what, Call call);

  const std::vector<std::string> endpoints_;
  const std::chrono::milliseconds deadline_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;  // TLS, or insecure
  std::vector<std::unique_ptr<Member>> members_;
  std::atomic<size_t> preferred_{0};
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_ETCD_CLIENT_H_
