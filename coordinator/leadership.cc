#include "coordinator/leadership.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "util/logging.h"

namespace cascade {

absl::StatusOr<std::unique_ptr<Leadership>> Leadership::Create(const HaConfig& config,
                                                               std::string identity, Hooks hooks) {
  auto etcd = EtcdClient::Create(config.etcd, EtcdClient::kDefaultDeadline,
                                 {config.etcd_cacert, config.etcd_cert, config.etcd_key});
  if (!etcd.ok()) return etcd.status();
  std::unique_ptr<Leadership> l(new Leadership(config, std::move(hooks)));
  LeaderElectionOptions o;
  o.prefix = absl::StrCat("/cascade/", config.cluster_name, "/");
  o.identity = std::move(identity);
  o.ttl = std::chrono::seconds(config.lease_ttl_s);
  o.on_elected = [p = l.get()](int64_t epoch) { p->Elected(epoch); };
  o.on_lost = [p = l.get()](const std::string& why) { p->Lost(why); };
  l->election_ = std::make_unique<LeaderElection>(std::move(*etcd), std::move(o));
  return l;
}

Leadership::~Leadership() { election_->Stop(); }

void Leadership::Start() {
  spdlog::info("coordinator: standing by for the leadership of cluster '{}' (etcd {})",
               config_.cluster_name, config_.etcd);
  election_->Start();
}

void Leadership::Resign() { election_->Resign(); }

void Leadership::Elected(int64_t epoch) {
  std::vector<std::string> order;
  if (auto plan = election_->Read(kPlanKey); plan.ok() && plan->has_value()) {
    order = absl::StrSplit(**plan, ',', absl::SkipEmpty());
  }
  {
    absl::MutexLock lock(&mu_);
    role_ = Role::kLeader;
  }
  if (hooks_.on_elected) hooks_.on_elected(epoch, order);
}

void Leadership::Lost(const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    role_ = Role::kDeposed;
    lost_reason_ = why;
  }
  if (hooks_.on_lost) hooks_.on_lost(why);
}

absl::Status Leadership::MayServe() const {
  absl::MutexLock lock(&mu_);
  switch (role_) {
    case Role::kLeader:
      return absl::OkStatus();
    case Role::kStandby: {
      const std::string leader = election_->leader();
      return absl::UnavailableError(absl::StrCat(
          "this coordinator is a standby",
          leader.empty() ? std::string(" (no leader yet)")
                         : absl::StrCat("; the leader's control address is ", leader),
          ": send requests to the leader"));
    }
    case Role::kDeposed:
      return absl::UnavailableError(absl::StrCat("this coordinator lost the leadership (",
                                                 lost_reason_, "); resume on the new leader"));
  }
  return absl::InternalError("unknown role");
}

void Leadership::Fill(v1::Leadership* out) const {
  {
    absl::MutexLock lock(&mu_);
    out->set_role(role_ == Role::kLeader    ? "leader"
                  : role_ == Role::kStandby ? "standby"
                                            : "deposed");
  }
  out->set_epoch(static_cast<uint64_t>(election_->leader_epoch()));
  out->set_leader(election_->leader());
  out->set_cluster(config_.cluster_name);
}

void Leadership::OfferPlan(const std::vector<std::string>& worker_ids) {
  if (worker_ids.empty()) return;
  election_->Offer(kPlanKey, absl::StrJoin(worker_ids, ",")).IgnoreError();  // not leading
}

void Leadership::OfferAddresses(const std::string& addresses) {
  election_->Offer(kAddressesKey, addresses).IgnoreError();
}

}  // namespace cascade
