#include "coordinator/status_text.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/planner.h"
#include "coordinator/prometheus.h"
#include "util/units.h"

namespace cascade {
namespace {

const char* StateName(v1::WorkerState s) {
  switch (s) {
    case v1::WORKER_STATE_IDLE:
      return "idle";
    case v1::WORKER_STATE_LOADING:
      return "loading";
    case v1::WORKER_STATE_SERVING:
      return "serving";
    case v1::WORKER_STATE_DRAINING:
      return "draining";
    case v1::WORKER_STATE_FAILED:
      return "failed";
    default:
      return "?";
  }
}

// Generated tokens per second since start, and the share of prompt tokens found cached.
double TokensPerSecond(const v1::SchedulerStatus& q) {
  return q.uptime_s() > 0 ? q.generated_tokens() / q.uptime_s() : 0;
}
double PrefixHitPercent(const v1::SchedulerStatus& q) {
  return q.prefix_queried_tokens() > 0 ? 100.0 * q.prefix_hit_tokens() / q.prefix_queried_tokens()
                                       : 0.0;
}

void AppendStages(const v1::ClusterStatusResponse& s, std::string* out) {
  absl::StrAppendFormat(out, "\n%-5s %-22s %-9s %-9s %10s %12s %14s %9s %9s  %s\n", "stage",
                        "worker", "layers", "state", "frames", "tokens", "kv blocks", "busy s",
                        "cpu s", "frames arrive at");
  const bool several = s.replicas_size() > 1;
  for (const v1::StageStatus& st : s.stages()) {
    const std::string index =
        several ? absl::StrCat(st.replica(), ".", st.index()) : absl::StrCat(st.index());
    const std::string layers = absl::StrCat("[", st.first_layer(), ",", st.last_layer(), ")");
    const std::string kv =
        absl::StrCat(st.stats().kv_blocks_used(), "/", st.stats().kv_blocks_total());
    absl::StrAppendFormat(out, "%-5s %-22s %-9s %-9s %10d %12d %14s %9.1f %9.1f  %s%s\n",
                          index, st.worker_id(), layers, StateName(st.state()),
                          st.stats().frames(), st.stats().tokens(), kv, st.stats().busy_s(),
                          st.stats().cpu_s(), st.data_address(),
                          st.alive() ? "" : "  (no heartbeat)");
  }
}

void AppendWorkers(const v1::ClusterStatusResponse& s, std::string* out) {
  absl::StrAppendFormat(out, "\n%-22s %-10s %-12s %-22s %6s %11s %6s %11s %10s\n", "worker",
                        "role", "node", "address", "cores", "memory", "cpu", "resident",
                        "heartbeat");
  for (const v1::WorkerInfo& w : s.workers()) {
    const std::string cpu =
        w.has_process() ? absl::StrFormat("%.0f%%", 100 * w.process().cpu_utilization()) : "-";
    const std::string rss =
        w.has_process() ? HumanBytes(w.process().resident_memory_bytes()) : std::string("-");
    absl::StrAppendFormat(out, "%-22s %-10s %-12s %-22s %6d %11s %6s %11s %9.1fs\n",
                          w.worker_id(), WorkerRole(s, w), w.node(), w.address(),
                          w.resources().cores(), HumanBytes(w.resources().memory_bytes()), cpu,
                          rss, w.seconds_since_heartbeat());
  }
  // Workers that each report one machine's whole memory: the plan divides it.
  std::vector<WorkerSpec> specs;
  for (const v1::WorkerInfo& w : s.workers()) {
    WorkerSpec spec;
    spec.id = w.worker_id();
    spec.node = w.node();
    spec.node_id = w.resources().node_id();
    spec.node_memory = w.resources().node_memory();
    spec.memory_bytes = w.resources().memory_bytes();
    spec.tp = std::max(1, w.resources().tensor_parallel());
    specs.push_back(spec);
  }
  absl::StrAppend(out, SharedNodesNote(specs));
}

}  // namespace

std::string WorkerRole(const v1::ClusterStatusResponse& s, const v1::WorkerInfo& w) {
  if (!w.alive()) return "lost";
  const bool several = s.replicas_size() > 1;
  std::vector<std::string> stages;
  for (const v1::StageStatus& st : s.stages()) {
    if (st.worker_id() != w.worker_id()) continue;
    stages.push_back(several ? absl::StrCat(st.replica(), ".", st.index())
                             : absl::StrCat(st.index()));
  }
  if (!stages.empty()) return absl::StrCat("stage ", absl::StrJoin(stages, ","));
  for (const v1::ReplicaStatus& r : s.replicas()) {
    for (const std::string& id : r.workers()) {
      if (several && id == w.worker_id()) return absl::StrCat("spare ", r.index());
    }
  }
  return "spare";
}

std::string RenderClusterStatus(const v1::ClusterStatusResponse& s) {
  std::string out = absl::StrFormat("model    %s\nserving  %s\nstate    %s\n", s.model(),
                                    s.serving() ? "yes" : "no", s.state());
  if (!s.error().empty()) absl::StrAppend(&out, "error    ", s.error(), "\n");
  if (s.has_leadership()) {
    const v1::Leadership& l = s.leadership();
    absl::StrAppend(&out, "role     ", l.role(), " of cluster '", l.cluster(), "'",
                    l.role() == "leader"
                        ? absl::StrCat(" (epoch ", l.epoch(), ")")
                        : absl::StrCat("; the leader is ", l.leader().empty() ? "not known" : l.leader()),
                    "\n");
  }
  AppendStages(s, &out);
  AppendWorkers(s, &out);
  const v1::SchedulerStatus& q = s.scheduler();
  const double tps = TokensPerSecond(q);
  absl::StrAppendFormat(&out,
                        "\nrequests: %d running, %d waiting; ended: %d completed, %d failed, "
                        "%d cancelled, %d rejected\n",
                        q.running(), q.waiting(), q.completed(), q.failed(), q.cancelled(),
                        q.rejected());
  absl::StrAppendFormat(&out,
                        "tokens:   %d generated, %d prompt; %.1f generated tokens/s since start\n",
                        q.generated_tokens(), q.prompt_tokens(), tps);
  absl::StrAppendFormat(&out, "kv cache: %d of %d blocks reserved (%.0f%%); %d batches in flight\n",
                        q.kv_blocks_reserved(), q.kv_blocks_total(), 100 * KvUsageRatio(q),
                        q.in_flight_batches());
  const double hit = PrefixHitPercent(q);
  absl::StrAppendFormat(&out,
                        "prefix cache: %d of %d prompt tokens cached (%.0f%%); %d blocks cached, "
                        "%d in use\n",
                        q.prefix_hit_tokens(), q.prefix_queried_tokens(), hit,
                        q.prefix_blocks_cached(), q.prefix_blocks_in_use());
  if (q.spec_draft_tokens() > 0) {
    absl::StrAppendFormat(&out, "speculative: %d of %d drafted tokens accepted (%.0f%%)\n",
                          q.spec_accepted_tokens(), q.spec_draft_tokens(),
                          100.0 * q.spec_accepted_tokens() / q.spec_draft_tokens());
  }
  if (s.replicas_size() > 1) {
    for (const v1::ReplicaStatus& r : s.replicas()) {
      const v1::SchedulerStatus& rq = r.scheduler();
      const double rtps = TokensPerSecond(rq);
      const double rhit = PrefixHitPercent(rq);
      absl::StrAppendFormat(&out,
                            "replica %d: %s, %d stage(s); %d running, %d waiting; %.1f generated "
                            "tokens/s; prefix cache %.0f%% of %d prompt tokens%s%s\n",
                            r.index(), r.state(), r.stages_size(), rq.running(), rq.waiting(),
                            rtps, rhit, rq.prefix_queried_tokens(), r.error().empty() ? "" : ": ",
                            r.error());
    }
  }
  return out;
}

}  // namespace cascade
