// ServingTarget: what the API adapters (the public gRPC service, the OpenAI-compatible
// HTTP API) need from the process that serves: the served model (tokenizer, chat template,
// id), the serving core's scheduler while it serves, and the model's description. The
// adapters translate requests into the serving core's model (serving/generate_spec.h) and
// submit them here; they own no state of their own.
//
// Contract: implementations are thread-safe (both servers call them concurrently).
#ifndef CASCADE_COORDINATOR_SERVING_TARGET_H_
#define CASCADE_COORDINATOR_SERVING_TARGET_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "cascade/v1/inference.pb.h"
#include "coordinator/served_model.h"
#include "serving/scheduler.h"

namespace cascade {

class ServingTarget {
 public:
  virtual ~ServingTarget() = default;
  // The served model: tokenizer, chat template, id.
  virtual const ServedModel& model() const = 0;
  // The scheduler of the replica that serves a request with `prompt` (its first prompt's
  // tokens: routing looks for the replica that holds its beginning), or Unavailable with
  // the reason no replica serves.
  virtual absl::StatusOr<std::shared_ptr<Scheduler>> SchedulerFor(
      std::span<const int32_t> prompt) const = 0;
  // Any scheduler that serves (health, availability): SchedulerFor an empty prompt, which
  // routes nothing.
  absl::StatusOr<std::shared_ptr<Scheduler>> scheduler() const { return SchedulerFor({}); }
  // The model's description with the cluster's stages and readiness.
  virtual v1::ModelInfo model_info() const = 0;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_SERVING_TARGET_H_
