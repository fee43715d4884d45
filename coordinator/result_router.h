// ResultRouter: where the step results that reach the coordinator go. Every transport's
// receiving side (the TCP and MPI data planes through DataPlaneServer, the gRPC data plane
// through the control service's Results stream) hands each result to OnResult, which finds
// the pipeline the result names by its plan id, checks the pipeline's results link key,
// decodes the result and posts it to that pipeline's scheduler. Pipelines are added when
// they are attached to their scheduler and removed when they are detached (the cluster
// controller does both); any number may be routed at once, each with its own scheduler or
// sharing one.
//
// Contract:
// - Thread-safe: results arrive on many transport threads at once, and pipelines are added
//   and removed meanwhile. The lock is held only to look a pipeline up; decoding and
//   posting run outside it.
// - OnResult answers PermissionDenied, and changes nothing, for a result without the key
//   of the pipeline it names or naming no pipeline routed now (a stranger, or a pipeline
//   already detached): the transport then drops the connection. A result with the key but
//   otherwise malformed (a token outside the vocabulary, ...) is posted to the scheduler as
//   a failed step of its batch, and OnResult answers OK.
// - A result may reach a scheduler just after its pipeline was removed; the scheduler
//   ignores results of a plan it no longer runs.
#ifndef CASCADE_COORDINATOR_RESULT_ROUTER_H_
#define CASCADE_COORDINATOR_RESULT_ROUTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/data_plane.pb.h"
#include "serving/scheduler.h"

namespace cascade {

// What the router knows of one pipeline.
struct ResultRoute {
  std::string link_key;                  // the pipeline's results link key
  int64_t vocab_size = 0;                // tokens in results must be below it
  std::shared_ptr<Scheduler> scheduler;  // where the pipeline's results go
};

class ResultRouter {
 public:
  // Routes results of plan `plan_id` by `route`. AlreadyExists when the plan is routed;
  // InvalidArgument without a key or a scheduler.
  absl::Status Add(uint64_t plan_id, ResultRoute route) ABSL_LOCKS_EXCLUDED(mu_);
  // Results of `plan_id` are refused from now on. Removing an unknown plan does nothing.
  void Remove(uint64_t plan_id) ABSL_LOCKS_EXCLUDED(mu_);
  // A step result from a last stage (any transport); `peer` names the sender in logs.
  absl::Status OnResult(const v1::StepResult& wire, const std::string& peer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // How many pipelines are routed now.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::map<uint64_t, std::shared_ptr<const ResultRoute>> routes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_RESULT_ROUTER_H_
