#include "coordinator/etcd_client.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "util/mapped_file.h"

namespace cascade {
namespace {

absl::StatusCode FromGrpc(grpc::StatusCode c) { return static_cast<absl::StatusCode>(c); }

bool Unanswered(const grpc::Status& st) {
  return st.error_code() == grpc::StatusCode::UNAVAILABLE ||
         st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

EtcdKeyValue FromProto(const etcdserverpb::KeyValue& kv) {
  return {kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.lease()};
}

// A transaction's guard: `key` was created at `revision` (0: it does not exist).
void RequireCreatedAt(etcdserverpb::TxnRequest* req, const std::string& key, int64_t revision) {
  etcdserverpb::Compare* c = req->add_compare();
  c->set_key(key);
  c->set_target(etcdserverpb::Compare::CREATE);
  c->set_result(etcdserverpb::Compare::EQUAL);
  c->set_create_revision(revision);
}

}  // namespace

namespace {

// The channel credentials `tls` asks for (see the contract in etcd_client.h).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> EtcdCredentials(const EtcdTls& tls) {
  if (tls.ca.empty()) {
    if (!tls.cert.empty() || !tls.key.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate for etcd (--etcd-cert, --etcd-key) needs its CA (--etcd-cacert)");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError("--etcd-cert and --etcd-key go together");
  }
  grpc::SslCredentialsOptions o;
  for (auto [path, out] : {std::pair{&tls.ca, &o.pem_root_certs},
                           std::pair{&tls.cert, &o.pem_cert_chain},
                           std::pair{&tls.key, &o.pem_private_key}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> pem = ReadFileToString(*path, 1 << 20);
    if (!pem.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd TLS file ", *path, ": ", pem.status().message()));
    }
    *out = *std::move(pem);
  }
  return grpc::SslCredentials(o);
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    const std::string& endpoints, std::chrono::milliseconds deadline, const EtcdTls& tls) {
  std::vector<std::string> list;
  for (absl::string_view e : absl::StrSplit(endpoints, ',', absl::SkipWhitespace())) {
    std::string s(absl::StripAsciiWhitespace(e));
    if (absl::StartsWith(s, "https://")) {
      if (tls.ca.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "etcd endpoint '", s, "' is https: give the CA that signed its certificate "
            "(--etcd-cacert)"));
      }
      s = s.substr(8);
    }
    if (absl::StartsWith(s, "http://")) {
      if (!tls.ca.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "etcd endpoint '", s, "' is plain http, but --etcd-cacert asks for TLS: give "
            "https://host:port (or host:port)"));
      }
      s = s.substr(7);
    }
    while (!s.empty() && s.back() == '/') s.pop_back();
    const size_t colon = s.rfind(':');
    if (s.empty() || colon == std::string::npos || colon == 0 || colon + 1 == s.size() ||
        s.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", e, "' is not host:port or http://host:port"));
    }
    list.push_back(std::move(s));
  }
  if (list.empty()) return absl::InvalidArgumentError("no etcd endpoint given");
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = EtcdCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(std::move(list), deadline, *std::move(credentials)));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds deadline,
                       std::shared_ptr<grpc::ChannelCredentials> credentials)
    : endpoints_(std::move(endpoints)), deadline_(deadline), credentials_(std::move(credentials)) {
  for (const std::string& address : endpoints_) {
    auto m = std::make_unique<Member>();
    m->address = address;
    members_.push_back(std::move(m));
  }
}

std::shared_ptr<EtcdClient::Stubs> EtcdClient::StubsOf(Member& m, bool stale) {
  absl::MutexLock lock(&m.mu);
  const auto now = std::chrono::steady_clock::now();
  if (m.stubs != nullptr && !(stale && now - m.made > std::chrono::seconds(1))) return m.stubs;
  grpc::ChannelArguments args;
  // A member that went away is tried again soon after it is back.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);  // also the least a connect may take
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = grpc::CreateCustomChannel(m.address, credentials_, args);
  auto stubs = std::make_shared<Stubs>();
  stubs->kv = etcdserverpb::KV::NewStub(channel);
  stubs->lease = etcdserverpb::Lease::NewStub(channel);
  m.stubs = std::move(stubs);
  m.made = now;
  return m.stubs;
}

template <typename Call>
absl::Status EtcdClient::OnAnyMember(const char* what, Call call) {
  const size_t first = preferred_.load();
  std::vector<std::string> failures;
  for (size_t i = 0; i < members_.size(); ++i) {
    const size_t m = (first + i) % members_.size();
    Member& member = *members_[m];
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline_);
    const grpc::Status st = call(*StubsOf(member, /*stale=*/false), ctx);
    if (st.ok()) {
      preferred_.store(m);
      return absl::OkStatus();
    }
    if (!Unanswered(st)) {
      return absl::Status(FromGrpc(st.error_code()),
                          absl::StrCat("etcd at ", member.address, ": ", what, ": ",
                                       st.error_message()));
    }
    StubsOf(member, /*stale=*/true);  // the next call connects afresh
    failures.push_back(absl::StrCat(member.address, " (", st.error_message(), ")"));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd does not answer ", what, ": ", absl::StrJoin(failures, "; ")));
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(std::chrono::seconds ttl) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(ttl.count());
  etcdserverpb::LeaseGrantResponse resp;
  absl::Status st = OnAnyMember("lease grant", [&](Stubs& m, grpc::ClientContext& ctx) {
    return m.lease->LeaseGrant(&ctx, req, &resp);
  });
  if (!st.ok()) return st;
  if (!resp.error().empty()) {
    return absl::UnavailableError(absl::StrCat("etcd refused a lease: ", resp.error()));
  }
  return resp.id();
}

absl::StatusOr<std::chrono::seconds> EtcdClient::KeepAlive(int64_t lease) {
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse resp;
  bool answered = false;
  absl::Status st = OnAnyMember("lease keep-alive", [&](Stubs& m, grpc::ClientContext& ctx) {
    auto stream = m.lease->LeaseKeepAlive(&ctx);
    answered = stream->Write(req) && stream->WritesDone() && stream->Read(&resp);
    grpc::Status done = stream->Finish();
    if (answered) return grpc::Status::OK;
    return done.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "no keep-alive answer") : done;
  });
  if (!st.ok()) return st;
  if (resp.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
  }
  return std::chrono::seconds(resp.ttl());
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseRevokeResponse resp;
  return OnAnyMember("lease revoke", [&](Stubs& m, grpc::ClientContext& ctx) {
    return m.lease->LeaseRevoke(&ctx, req, &resp);
  });
}

absl::StatusOr<std::optional<EtcdKeyValue>> EtcdClient::Get(const std::string& key) {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  etcdserverpb::RangeResponse resp;
  absl::Status st = OnAnyMember("get", [&](Stubs& m, grpc::ClientContext& ctx) {
    return m.kv->Range(&ctx, req, &resp);
  });
  if (!st.ok()) return st;
  if (resp.kvs_size() == 0) return std::optional<EtcdKeyValue>();
  return std::optional<EtcdKeyValue>(FromProto(resp.kvs(0)));
}

absl::StatusOr<int64_t> EtcdClient::Put(const std::string& key, const std::string& value,
                                        int64_t lease) {
  etcdserverpb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  etcdserverpb::PutResponse resp;
  absl::Status st = OnAnyMember("put", [&](Stubs& m, grpc::ClientContext& ctx) {
    return m.kv->Put(&ctx, req, &resp);
  });
  if (!st.ok()) return st;
  return resp.header().revision();
}

absl::StatusOr<EtcdClient::CreateResult> EtcdClient::CreateIfAbsent(const std::string& key,
                                                                    const std::string& value,
                                                                    int64_t lease) {
  etcdserverpb::TxnRequest req;
  RequireCreatedAt(&req, key, 0);
  etcdserverpb::PutRequest* put = req.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  req.add_failure()->mutable_request_range()->set_key(key);
  etcdserverpb::TxnResponse resp;
  absl::Status st = OnAnyMember("create", [&](Stubs& m, grpc::ClientContext& ctx) {
    return m.kv->Txn(&ctx, req, &resp);
  });
  if (!st.ok()) return st;
  CreateResult out;
  out.created = resp.succeeded();
  if (out.created) {
    const int64_t revision = resp.header().revision();
    out.kv = {key, value, revision, revision, lease};
    return out;
  }
  if (resp.responses_size() == 0 || resp.responses(0).response_range().kvs_size() == 0) {
    // Gone between the compare and the read: the caller tries again.
    return absl::UnavailableError(absl::StrCat("etcd key ", key, " changed while read"));
  }
  out.kv = FromProto(resp.responses(0).response_range().kvs(0));
  return out;
}

absl::Status EtcdClient::PutIfGuard(const std::string& key, const std::string& value,
                                    const std::string& guard, int64_t guard_revision) {
  etcdserverpb::TxnRequest req;
  RequireCreatedAt(&req, guard, guard_revision);
  etcdserverpb::PutRequest* put = req.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  etcdserverpb::TxnResponse resp;
  absl::Status st = OnAnyMember("guarded put", [&](Stubs& m, grpc::ClientContext& ctx) {
    return m.kv->Txn(&ctx, req, &resp);
  });
  if (!st.ok()) return st;
  if (!resp.succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd key ", guard, " is no longer the one created at revision ", guard_revision));
  }
  return absl::OkStatus();
}

absl::Status EtcdClient::DeleteIfCreated(const std::string& key, int64_t revision) {
  etcdserverpb::TxnRequest req;
  RequireCreatedAt(&req, key, revision);
  req.add_success()->mutable_request_delete_range()->set_key(key);
  etcdserverpb::TxnResponse resp;
  return OnAnyMember("guarded delete", [&](Stubs& m, grpc::ClientContext& ctx) {
    return m.kv->Txn(&ctx, req, &resp);
  });
}

}  // namespace cascade
