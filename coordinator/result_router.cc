#include "coordinator/result_router.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/frame.h"
#include "util/logging.h"

namespace cascade {

absl::Status ResultRouter::Add(uint64_t plan_id, ResultRoute route) {
  if (route.link_key.empty() || route.scheduler == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan ", plan_id, ": a results route needs a link key and a scheduler"));
  }
  absl::MutexLock lock(&mu_);
  if (!routes_.emplace(plan_id, std::make_shared<const ResultRoute>(std::move(route))).second) {
    return absl::AlreadyExistsError(absl::StrCat("plan ", plan_id, " is routed already"));
  }
  return absl::OkStatus();
}

void ResultRouter::Remove(uint64_t plan_id) {
  absl::MutexLock lock(&mu_);
  routes_.erase(plan_id);
}

size_t ResultRouter::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return routes_.size();
}

absl::Status ResultRouter::OnResult(const v1::StepResult& wire, const std::string& peer) {
  std::shared_ptr<const ResultRoute> route;  // a reference: no copy of the key per result
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = routes_.find(wire.plan_id());
    if (it != routes_.end()) route = it->second;
  }
  if (!route) {
    // A stranger, or the last stage of a pipeline already detached: it touches nothing.
    spdlog::warn("result from {} refused: plan {} is not served here", peer, wire.plan_id());
    return absl::PermissionDeniedError("step result: its plan is not served here");
  }
  auto r = DecodeResult(wire, route->link_key, wire.plan_id(), route->vocab_size);
  if (!r.ok() && r.status().code() == absl::StatusCode::kPermissionDenied) {
    spdlog::warn("result from {} refused: {}", peer, r.status().message());
    return r.status();
  }
  if (!r.ok()) {
    // From the pipeline's last stage but malformed: its batch failed.
    spdlog::warn("result from {} rejected: {}", peer, r.status().message());
    StepResult failed;
    failed.plan_id = wire.plan_id();
    failed.batch_id = wire.batch_id();
    failed.error = std::string(r.status().message());
    route->scheduler->OnResult(std::move(failed));
    return absl::OkStatus();
  }
  route->scheduler->OnResult(std::move(*r));
  return absl::OkStatus();
}

}  // namespace cascade
