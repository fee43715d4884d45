#include "coordinator/registrar.h"

#include "absl/strings/str_cat.h"
#include "transport/frame.h"
#include "util/logging.h"
#include "util/secret.h"
#include "util/units.h"

namespace cascade {

void Registrar::StandBy(std::function<std::string()> leader) {
  absl::MutexLock lock(&mu_);
  standby_ = true;
  leader_ = std::move(leader);
}

void Registrar::Lead(uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  standby_ = false;
  leader_ = nullptr;
  epoch_ = epoch;
}

absl::StatusOr<v1::RegisterResponse> Registrar::Register(const v1::RegisterRequest& req,
                                                         const std::string& presented_token) {
  uint64_t epoch = 0;
  std::function<std::string()> leader;
  bool standby = false;
  {
    absl::MutexLock lock(&mu_);
    standby = standby_;
    leader = leader_;
    epoch = epoch_;
  }
  if (standby) {
    const std::string who = leader ? leader() : "";
    return absl::UnavailableError(absl::StrCat(
        "this coordinator is a standby; register with the leader",
        who.empty() ? std::string(" (not known yet)") : absl::StrCat(" at ", who)));
  }
  if (!join_token_.empty() && !SecretsEqual(presented_token, join_token_)) {
    const bool none = presented_token.empty();
    const std::string why =
        none ? "no join token was sent (start the worker with --join-token-file)"
             : "the join token sent does not match the cluster's";
    if (ShouldLogRefusal(absl::StrCat(req.worker_id(), "\n", req.listen_address(), "\n", none))) {
      spdlog::warn("refused a registration as '{}' from {}: {} (logged again in {} s at most)",
                   req.worker_id(), req.listen_address(), why, kRefusalLogInterval.count());
    }
    return absl::PermissionDeniedError(why);
  }
  if (req.worker_id().empty() || req.listen_address().empty()) {
    return absl::InvalidArgumentError("worker_id and listen_address are required");
  }
  if (req.protocol_version() != kFrameVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "protocol version ", req.protocol_version(), " is not supported (", kFrameVersion, ")"));
  }
  spdlog::info("worker {} registered from {} ({} cores, {} memory)", req.worker_id(),
               req.listen_address(), req.resources().cores(),
               HumanBytes(req.resources().memory_bytes()));
  v1::RegisterResponse resp = registry_->Register(req);
  resp.set_coordinator_secret(coordinator_secret_);
  resp.set_epoch(epoch);
  return resp;
}

bool Registrar::ShouldLogRefusal(const std::string& key) {
  const auto now = Clock::now();
  absl::MutexLock lock(&mu_);
  // Forget what is old enough to be logged again, so that many names cannot grow the map.
  if (refusals_logged_.size() > 1024) {
    std::erase_if(refusals_logged_,
                  [&](const auto& e) { return now - e.second >= kRefusalLogInterval; });
  }
  auto [it, first] = refusals_logged_.try_emplace(key, now);
  if (!first && now - it->second < kRefusalLogInterval) return false;
  it->second = now;
  return true;
}

bool Registrar::MayQuery(const std::string& presented) const {
  return join_token_.empty() || SecretsEqual(presented, join_token_);
}

}  // namespace cascade
