#include "coordinator/leader_election.h"

#include "absl/strings/str_cat.h"
#include "util/logging.h"

namespace cascade {

LeaderElection::LeaderElection(std::unique_ptr<EtcdClient> etcd, LeaderElectionOptions options)
    : etcd_(std::move(etcd)), options_(std::move(options)), key_(options_.prefix + "leader") {}

LeaderElection::~LeaderElection() { Stop(); }

void LeaderElection::Start() {
  thread_ = std::thread([this] { Run(); });
}

void LeaderElection::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LeaderElection::Resign() {
  Stop();
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_) return;
    leading_ = false;
    epoch = epoch_;
  }
  absl::Status st = etcd_->DeleteIfCreated(key_, epoch);
  if (st.ok()) st = etcd_->RevokeLease(lease_);
  if (st.ok()) {
    spdlog::info("election: gave up the leadership (epoch {})", epoch);
  } else {
    spdlog::warn("election: could not give the leadership up at once ({}); it lapses with "
                 "the lease in {} s",
                 st.message(), options_.ttl.count());
  }
}

bool LeaderElection::leading() const {
  absl::MutexLock lock(&mu_);
  return leading_;
}

int64_t LeaderElection::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

std::string LeaderElection::leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

int64_t LeaderElection::leader_epoch() const {
  absl::MutexLock lock(&mu_);
  return leader_epoch_;
}

bool LeaderElection::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void LeaderElection::NoteEtcd(const absl::Status& st) {
  const std::string msg = st.ok() ? "" : std::string(st.message());
  if (msg == last_etcd_error_) return;
  if (msg.empty()) {
    spdlog::info("election: etcd answers again");
  } else if (leading()) {
    spdlog::warn("election: {}; leading on (a successor needs etcd too)", msg);
  } else {
    spdlog::warn("election: {}; standing by", msg);
  }
  last_etcd_error_ = msg;
}

void LeaderElection::Run() {
  const auto wait = [this](std::chrono::milliseconds d) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::FromChrono(d));
  };
  while (!Stopping()) {
    if (Campaign()) break;
    if (wait(options_.poll)) return;
  }
  if (Stopping()) return;
  const auto renew_every = std::chrono::duration_cast<std::chrono::milliseconds>(options_.ttl) / 4;
  std::string why;
  while (!wait(std::min(renew_every, options_.poll))) {
    if (!Hold(&why)) {
      {
        absl::MutexLock lock(&mu_);
        leading_ = false;
        stop_ = true;
      }
      spdlog::error("election: this coordinator lost the leadership: {}", why);
      if (options_.on_lost) options_.on_lost(why);
      return;
    }
  }
}

bool LeaderElection::Campaign() {
  if (lease_ == 0) {
    auto lease = etcd_->GrantLease(options_.ttl);
    NoteEtcd(lease.status());
    if (!lease.ok()) return false;
    lease_ = *lease;
  }
  auto created = etcd_->CreateIfAbsent(key_, options_.identity, lease_);
  NoteEtcd(created.status());
  if (!created.ok()) {
    // Our lease lapsed (etcd was away longer than it): a fresh one next round.
    if (!absl::IsUnavailable(created.status())) lease_ = 0;
    return false;
  }
  if (!created->created) {
    // Someone leads; keep our lease alive for the moment we may win (or take a new one).
    if (!etcd_->KeepAlive(lease_).ok()) lease_ = 0;
    absl::MutexLock lock(&mu_);
    if (leader_ != created->kv.value) {
      spdlog::info("election: standing by; {} leads (epoch {})", created->kv.value,
                   created->kv.create_revision);
    }
    leader_ = created->kv.value;
    leader_epoch_ = created->kv.create_revision;
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    leading_ = true;
    epoch_ = created->kv.create_revision;
    leader_ = options_.identity;
    leader_epoch_ = epoch_;
  }
  spdlog::info("election: this coordinator ({}) leads, epoch {}", options_.identity,
               created->kv.create_revision);
  if (options_.on_elected) options_.on_elected(created->kv.create_revision);
  return true;
}

bool LeaderElection::Hold(std::string* why) {
  auto ttl = etcd_->KeepAlive(lease_);
  if (ttl.ok()) {
    NoteEtcd(absl::OkStatus());
  } else if (absl::IsNotFound(ttl.status())) {
    *why = absl::StrCat("its lease expired (", ttl.status().message(), ")");
    return false;
  } else {
    NoteEtcd(ttl.status());
    return true;  // etcd unreachable: lead on
  }
  auto kv = etcd_->Get(key_);
  NoteEtcd(kv.status());
  if (!kv.ok()) return true;
  const int64_t epoch = this->epoch();
  if (!kv->has_value()) {
    *why = "its key in etcd is gone";
    return false;
  }
  if ((*kv)->create_revision != epoch) {
    *why = absl::StrCat((*kv)->value, " leads now (epoch ", (*kv)->create_revision, ")");
    return false;
  }
  WriteOffered();
  return true;
}

absl::Status LeaderElection::Offer(const std::string& name, const std::string& value) {
  absl::MutexLock lock(&mu_);
  if (!leading_) return absl::FailedPreconditionError("only the leader writes the cluster's state");
  offered_[name] = value;
  return absl::OkStatus();
}

void LeaderElection::WriteOffered() {
  std::map<std::string, std::string> writes;
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    writes.swap(offered_);
    epoch = epoch_;
  }
  for (auto& [name, value] : writes) {
    absl::Status st = etcd_->PutIfGuard(options_.prefix + name, value, key_, epoch);
    NoteEtcd(st);
    if (st.ok()) continue;
    absl::MutexLock lock(&mu_);
    offered_.try_emplace(name, std::move(value));  // next round, unless offered anew
  }
}

absl::StatusOr<std::optional<std::string>> LeaderElection::Read(const std::string& name) {
  auto kv = etcd_->Get(options_.prefix + name);
  if (!kv.ok()) return kv.status();
  if (!kv->has_value()) return std::optional<std::string>();
  return std::optional<std::string>((*kv)->value);
}

}  // namespace cascade
