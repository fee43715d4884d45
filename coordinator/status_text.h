// `cascade status`'s text: a ClusterStatusResponse as the tables an operator reads, the
// same message /metrics renders (coordinator/prometheus.h), with the same words.
//
//   - the model, whether it serves, the controller's state (and why not serving);
//   - one row per stage of the plan: worker, layers, state, frames, tokens, KV blocks
//     used/total, busy and CPU seconds, where its frames arrive ("(no heartbeat)" when
//     its worker stopped answering);
//   - one row per registered worker with its role: "stage N" (it holds stage N), "spare"
//     (alive, in no stage) or "lost" (no heartbeat within the liveness timeout, e.g. after
//     a failover), its resources, its process's CPU use and resident memory, and the age
//     of its last heartbeat;
//   - requests by outcome (completed, failed, cancelled, rejected: /metrics'
//     cascade_requests_total{outcome}), tokens, and the KV cache's use.
//
// Contract: a pure function; thread-safe.
#ifndef CASCADE_COORDINATOR_STATUS_TEXT_H_
#define CASCADE_COORDINATOR_STATUS_TEXT_H_

#include <string>

#include "cascade/v1/control_plane.pb.h"

namespace cascade {

std::string RenderClusterStatus(const v1::ClusterStatusResponse& s);

// A worker's role in `s`: "stage N[,M]", "spare" or "lost".
std::string WorkerRole(const v1::ClusterStatusResponse& s, const v1::WorkerInfo& w);

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_STATUS_TEXT_H_
