#include "transport/factory.h"

#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "transport/grpc_link.h"
#include "transport/inproc.h"
#include "transport/tcp_link.h"

namespace cascade {
namespace {

class Registry {
 public:
  static Registry& Get() {
    static Registry* r = new Registry();  // never destroyed: used until exit
    return *r;
  }
  void Set(Scheme s, TransportFactory f) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    map_[s] = std::move(f);
  }
  void Erase(Scheme s) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    map_.erase(s);
  }
  std::optional<TransportFactory> Find(Scheme s) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = map_.find(s);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }

 private:
  absl::Mutex mu_;
  std::map<Scheme, TransportFactory> map_ ABSL_GUARDED_BY(mu_);
};

absl::Status NotRegistered(const Address& a) {
  const char* provider = a.scheme == Scheme::kMpi    ? "cascade-mpi (built with MPI)"
                         : a.scheme == Scheme::kNccl ? "a CUDA build with NCCL, under cascade-mpi"
                                                     : "this build";
  return absl::UnimplementedError(absl::StrCat("address ", FormatAddress(a), ": the ",
                                               SchemeName(a.scheme),
                                               " transport is not available here (it comes with ",
                                               provider, ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ActivationSender>> MakeActivationSender(
    const std::string& address, const SenderOptions& options) {
  auto a = ParseAddress(address);
  if (!a.ok()) return a.status();
  switch (a->scheme) {
    case Scheme::kTcp:
      return MakeTcpActivationSender(a->host_port, options);
    case Scheme::kGrpc:
      return MakeGrpcActivationSender(a->host_port, options);
    case Scheme::kInproc:
      return MakeInProcActivationSender(a->name, options.link_key);
    case Scheme::kMpi:
    case Scheme::kNccl:
      break;
  }
  auto f = Registry::Get().Find(a->scheme);
  if (!f || !f->activation) return NotRegistered(*a);
  return f->activation(*a, options);
}

absl::StatusOr<std::unique_ptr<ResultSender>> MakeResultSender(const std::string& address,
                                                              const SenderOptions& options) {
  auto a = ParseAddress(address);
  if (!a.ok()) return a.status();
  switch (a->scheme) {
    case Scheme::kTcp:
      return MakeTcpResultSender(a->host_port, options);
    case Scheme::kGrpc:
      return MakeGrpcResultSender(a->host_port, options);
    case Scheme::kInproc:
      return MakeInProcResultSender(a->name, options.link_key);
    case Scheme::kMpi:
    case Scheme::kNccl:
      break;
  }
  auto f = Registry::Get().Find(a->scheme);
  if (!f || !f->result) return NotRegistered(*a);
  return f->result(*a, options);
}

void RegisterTransport(Scheme scheme, TransportFactory factory) {
  Registry::Get().Set(scheme, std::move(factory));
}

void UnregisterTransport(Scheme scheme) { Registry::Get().Erase(scheme); }

absl::StatusOr<std::unique_ptr<DataPlaneListener>> ListenOnTransport(Scheme scheme,
                                                                     DataPlaneHandlers handlers) {
  auto f = Registry::Get().Find(scheme);
  if (!f || !f->listen) {
    Address a;
    a.scheme = scheme;
    a.rank = 0;
    return NotRegistered(a);
  }
  return f->listen(std::move(handlers));
}

}  // namespace cascade
