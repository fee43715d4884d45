#include "coordinator/prometheus.h"

#include <charconv>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cascade {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string Num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string LabelText(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", labels[i].first, "=\"", Escape(labels[i].second), "\"");
  }
  return out + "}";
}

// Writes one metric family at a time: HELP and TYPE once, then its samples.
class Writer {
 public:
  // `common`: labels every sample carries first (model_name).
  explicit Writer(Labels common) : common_(std::move(common)) {}
  void Family(const std::string& name, const char* type, const std::string& help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(const std::string& name, const Labels& labels, double v) {
    Labels all = common_;
    all.insert(all.end(), labels.begin(), labels.end());
    absl::StrAppend(&out_, name, LabelText(all), " ", Num(v), "\n");
  }
  void Histo(const std::string& name, const Labels& labels, const Histogram& h) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      cumulative += h.counts()[i];
      Labels l = labels;
      l.emplace_back("le", Num(h.bounds()[i]));
      Sample(name + "_bucket", l, static_cast<double>(cumulative));
    }
    Labels inf = labels;
    inf.emplace_back("le", "+Inf");
    Sample(name + "_bucket", inf, static_cast<double>(h.count()));
    Sample(name + "_sum", labels, h.sum());
    Sample(name + "_count", labels, static_cast<double>(h.count()));
  }
  std::string Take() { return std::move(out_); }

 private:
  const Labels common_;
  std::string out_;
};

// A stage's hop histogram off the wire; an empty one (other bounds than ours) when it does
// not fit.
Histogram FromProto(const v1::Histogram& p) {
  Histogram h(LatencyBounds());
  Histogram parsed;
  if (Histogram::FromParts({p.bounds().begin(), p.bounds().end()},
                           {p.counts().begin(), p.counts().end()}, p.sum(), &parsed)) {
    h.Merge(parsed);
  }
  return h;
}

}  // namespace

double KvUsageRatio(const v1::SchedulerStatus& q) {
  return KvUsageRatio(q.kv_blocks_reserved(), q.kv_blocks_total());
}

std::string RenderPrometheus(const ServingMetrics::Snapshot& m,
                             const v1::ClusterStatusResponse& c) {
  Writer w({{"model_name", c.model()}});
  const v1::SchedulerStatus& q = c.scheduler();

  // The counts `cascade status` shows, from the same status message.
  w.Family("cascade_requests_total", "counter", "Requests that ended, by outcome.");
  for (const auto& [outcome, count] :
       {std::pair{RequestOutcome::kCompleted, q.completed()},
        std::pair{RequestOutcome::kFailed, q.failed()},
        std::pair{RequestOutcome::kCancelled, q.cancelled()},
        std::pair{RequestOutcome::kRejected, q.rejected()}}) {
    w.Sample("cascade_requests_total", {{"outcome", RequestOutcomeName(outcome)}},
             static_cast<double>(count));
  }
  w.Family("cascade_requests_running", "gauge", "Sequences admitted and generating.");
  w.Sample("cascade_requests_running", {}, static_cast<double>(q.running()));
  w.Family("cascade_requests_waiting", "gauge", "Requests queued for admission.");
  w.Sample("cascade_requests_waiting", {}, static_cast<double>(q.waiting()));
  w.Family("cascade_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  w.Sample("cascade_prompt_tokens_total", {}, static_cast<double>(q.prompt_tokens()));
  w.Family("cascade_generation_tokens_total", "counter", "Tokens generated.");
  w.Sample("cascade_generation_tokens_total", {}, static_cast<double>(q.generated_tokens()));
  struct H {
    const char* name;
    const char* help;
    const Histogram* h;
  };
  for (const H& h :
       {H{"cascade_time_to_first_token_seconds", "From submission to the first token.",
          &m.time_to_first_token},
        H{"cascade_inter_token_latency_seconds", "Between a sequence's consecutive tokens.",
          &m.inter_token},
        H{"cascade_request_duration_seconds", "From submission to the last token (end to end).",
          &m.end_to_end},
        H{"cascade_request_queue_seconds", "From submission to admission.", &m.queue}}) {
    w.Family(h.name, "histogram", h.help);
    w.Histo(h.name, {}, *h.h);
  }

  w.Family("cascade_kv_blocks_reserved", "gauge", "KV blocks the scheduler has reserved.");
  w.Sample("cascade_kv_blocks_reserved", {}, static_cast<double>(q.kv_blocks_reserved()));
  w.Family("cascade_kv_blocks_capacity", "gauge", "KV blocks of the pipeline (per stage).");
  w.Sample("cascade_kv_blocks_capacity", {}, static_cast<double>(q.kv_blocks_total()));
  w.Family("cascade_kv_cache_usage_ratio", "gauge",
           "Fraction of the pipeline's KV blocks reserved (0..1; 0 without a pipeline).");
  w.Sample("cascade_kv_cache_usage_ratio", {}, KvUsageRatio(q));
  // Each replica's (one unless --replicas): its requests, tokens and prefix cache.
  struct ReplicaCounts {
    std::string index;
    const v1::SchedulerStatus* q;
    bool serving;
  };
  std::vector<ReplicaCounts> replicas;
  for (const v1::ReplicaStatus& r : c.replicas()) {
    replicas.push_back({absl::StrCat(r.index()), &r.scheduler(), r.state() == "serving"});
  }
  if (replicas.empty()) replicas.push_back({"0", &q, c.serving()});  // none yet: the sums
  if (c.has_leadership()) {
    w.Family("cascade_coordinator_leader", "gauge",
             "1 while this coordinator leads its cluster, 0 while it stands by (--etcd).");
    w.Sample("cascade_coordinator_leader", {{"cluster", c.leadership().cluster()}},
             c.leadership().role() == "leader" ? 1.0 : 0.0);
  }
  w.Family("cascade_replica_up", "gauge", "1 while the replica serves, else 0.");
  for (const ReplicaCounts& r : replicas) {
    w.Sample("cascade_replica_up", {{"replica", r.index}}, r.serving ? 1.0 : 0.0);
  }
  w.Family("cascade_replica_requests_running", "gauge", "Sequences generating on the replica.");
  for (const ReplicaCounts& r : replicas) {
    w.Sample("cascade_replica_requests_running", {{"replica", r.index}},
             static_cast<double>(r.q->running()));
  }
  w.Family("cascade_replica_requests_waiting", "gauge", "Requests queued on the replica.");
  for (const ReplicaCounts& r : replicas) {
    w.Sample("cascade_replica_requests_waiting", {{"replica", r.index}},
             static_cast<double>(r.q->waiting()));
  }
  w.Family("cascade_replica_generation_tokens_total", "counter",
           "Tokens the replica generated (its tokens/s: rate() of this).");
  for (const ReplicaCounts& r : replicas) {
    w.Sample("cascade_replica_generation_tokens_total", {{"replica", r.index}},
             static_cast<double>(r.q->generated_tokens()));
  }
  w.Family("cascade_spec_draft_tokens_total", "counter",
           "Drafted tokens verified by speculative decoding.");
  for (const ReplicaCounts& r : replicas) {
    w.Sample("cascade_spec_draft_tokens_total", {{"replica", r.index}},
             static_cast<double>(r.q->spec_draft_tokens()));
  }
  w.Family("cascade_spec_accepted_tokens_total", "counter",
           "Drafted tokens accepted (each one a token without a trip of its own).");
  for (const ReplicaCounts& r : replicas) {
    w.Sample("cascade_spec_accepted_tokens_total", {{"replica", r.index}},
             static_cast<double>(r.q->spec_accepted_tokens()));
  }
  w.Family("cascade_spec_acceptance_ratio", "gauge",
           "Accepted over drafted tokens since start (0 before any draft).");
  for (const ReplicaCounts& r : replicas) {
    const double drafted = static_cast<double>(r.q->spec_draft_tokens());
    w.Sample("cascade_spec_acceptance_ratio", {{"replica", r.index}},
             drafted > 0 ? static_cast<double>(r.q->spec_accepted_tokens()) / drafted : 0.0);
  }
  w.Family("cascade_prefix_cache_queried_tokens_total", "counter",
           "Prompt tokens looked up in the prefix cache.");
  for (const ReplicaCounts& r : replicas) {
    w.Sample("cascade_prefix_cache_queried_tokens_total", {{"replica", r.index}},
             static_cast<double>(r.q->prefix_queried_tokens()));
  }
  w.Family("cascade_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens found in the prefix cache (their prefill skipped).");
  for (const ReplicaCounts& r : replicas) {
    w.Sample("cascade_prefix_cache_hit_tokens_total", {{"replica", r.index}},
             static_cast<double>(r.q->prefix_hit_tokens()));
  }
  w.Family("cascade_prefix_cache_blocks", "gauge",
           "KV blocks the prefix cache holds (state: in_use by running sequences, or idle).");
  for (const ReplicaCounts& r : replicas) {
    w.Sample("cascade_prefix_cache_blocks", {{"replica", r.index}, {"state", "in_use"}},
             static_cast<double>(r.q->prefix_blocks_in_use()));
    w.Sample("cascade_prefix_cache_blocks", {{"replica", r.index}, {"state", "idle"}},
             static_cast<double>(r.q->prefix_blocks_cached() - r.q->prefix_blocks_in_use()));
  }

  // Stages, and the hops between them.
  auto stage_labels = [](const v1::StageStatus& s) {
    return Labels{{"replica", absl::StrCat(s.replica())},
                  {"stage", absl::StrCat(s.index())},
                  {"worker", s.worker_id()}};
  };
  struct StageMetric {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const v1::StageStats&);
  };
  const StageMetric stage_metrics[] = {
      {"cascade_stage_kv_blocks_used", "gauge", "KV blocks in use on a stage.",
       [](const v1::StageStats& s) { return static_cast<double>(s.kv_blocks_used()); }},
      {"cascade_stage_kv_blocks_free", "gauge", "KV blocks free on a stage.",
       [](const v1::StageStats& s) {
         return static_cast<double>(s.kv_blocks_total() - s.kv_blocks_used());
       }},
      {"cascade_stage_busy_seconds_total", "counter", "Wall time a stage spent on frames.",
       [](const v1::StageStats& s) { return s.busy_s(); }},
      {"cascade_stage_frames_total", "counter", "Frames a stage processed.",
       [](const v1::StageStats& s) { return static_cast<double>(s.frames()); }},
      {"cascade_stage_tokens_total", "counter", "Token positions a stage processed.",
       [](const v1::StageStats& s) { return static_cast<double>(s.tokens()); }},
      {"cascade_stage_rejected_frames_total", "counter",
       "Frames a stage refused (wrong link key or malformed).",
       [](const v1::StageStats& s) { return static_cast<double>(s.rejected_frames()); }},
  };
  for (const StageMetric& sm : stage_metrics) {
    w.Family(sm.name, sm.type, sm.help);
    for (const v1::StageStatus& s : c.stages()) w.Sample(sm.name, stage_labels(s), sm.value(s.stats()));
  }
  auto hop_into = [](const v1::StageStatus& s) {
    return Labels{{"replica", absl::StrCat(s.replica())},
                  {"hop", s.index() == 0 ? std::string("coordinator->0")
                                         : absl::StrCat(s.index() - 1, "->", s.index())}};
  };
  w.Family("cascade_hop_latency_seconds", "histogram",
           "From a hop's send to its receive, by the two ends' clocks (across nodes this "
           "includes their offset).");
  int last = -1;  // the last stage's index (of the replica with the most stages)
  for (const v1::StageStatus& s : c.stages()) {
    w.Histo("cascade_hop_latency_seconds", hop_into(s), FromProto(s.stats().hop_in_seconds()));
    last = std::max(last, s.index());
  }
  if (last >= 0) {  // the results' hop, over every replica
    w.Histo("cascade_hop_latency_seconds",
            {{"replica", c.replicas_size() > 1 ? std::string("all") : std::string("0")},
             {"hop", absl::StrCat(last, "->coordinator")}},
            m.result_hop);
  }
  w.Family("cascade_hop_activation_bytes_total", "counter",
           "Activation payload that crossed a hop between stages.");
  for (const v1::StageStatus& s : c.stages()) {
    if (s.index() == 0) continue;
    w.Sample("cascade_hop_activation_bytes_total", hop_into(s),
             static_cast<double>(s.stats().activation_bytes_in()));
  }

  // Workers: liveness, GPUs, price.
  w.Family("cascade_worker_up", "gauge", "1 while a worker's heartbeats arrive.");
  for (const v1::WorkerInfo& wi : c.workers()) {
    w.Sample("cascade_worker_up", {{"worker", wi.worker_id()}}, wi.alive() ? 1 : 0);
  }
  struct ProcessMetric {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const v1::ProcessStats&);
  };
  const ProcessMetric process_metrics[] = {
      {"cascade_worker_cpu_seconds_total", "counter",
       "User + system CPU time of a worker's process.",
       [](const v1::ProcessStats& p) { return p.cpu_seconds(); }},
      {"cascade_worker_cpu_utilization_ratio", "gauge",
       "A worker process's CPU time over its last heartbeat period, over the machine's cores.",
       [](const v1::ProcessStats& p) { return p.cpu_utilization(); }},
      {"cascade_worker_resident_memory_bytes", "gauge", "A worker process's resident memory.",
       [](const v1::ProcessStats& p) { return static_cast<double>(p.resident_memory_bytes()); }},
  };
  for (const ProcessMetric& pm : process_metrics) {
    w.Family(pm.name, pm.type, pm.help);
    for (const v1::WorkerInfo& wi : c.workers()) {
      if (wi.has_process()) w.Sample(pm.name, {{"worker", wi.worker_id()}}, pm.value(wi.process()));
    }
  }
  struct GpuMetric {
    const char* name;
    const char* help;
    double (*value)(const v1::GpuStats&);
  };
  const GpuMetric gpu_metrics[] = {
      {"cascade_gpu_utilization_ratio", "Fraction of NVML's last period a kernel ran.",
       [](const v1::GpuStats& g) { return g.utilization(); }},
      {"cascade_gpu_memory_used_bytes", "GPU memory in use.",
       [](const v1::GpuStats& g) { return static_cast<double>(g.memory_used_bytes()); }},
      {"cascade_gpu_memory_total_bytes", "GPU memory in all.",
       [](const v1::GpuStats& g) { return static_cast<double>(g.memory_total_bytes()); }},
      {"cascade_gpu_temperature_celsius", "GPU temperature.",
       [](const v1::GpuStats& g) { return g.temperature_celsius(); }},
  };
  for (const GpuMetric& gm : gpu_metrics) {
    w.Family(gm.name, "gauge", gm.help);
    for (const v1::WorkerInfo& wi : c.workers()) {
      for (const v1::GpuStats& g : wi.gpus()) {
        w.Sample(gm.name,
                 {{"worker", wi.worker_id()}, {"gpu", absl::StrCat(g.index())}, {"model", g.name()}},
                 gm.value(g));
      }
    }
  }
  double dollars_per_hour = 0;
  w.Family("cascade_cost_per_hour_dollars", "gauge", "A live worker's configured price per hour.");
  for (const v1::WorkerInfo& wi : c.workers()) {
    if (!wi.alive()) continue;
    const double price = wi.resources().cost_per_hour();
    dollars_per_hour += price;
    w.Sample("cascade_cost_per_hour_dollars", {{"worker", wi.worker_id()}}, price);
  }
  w.Family("cascade_generation_tokens_per_second", "gauge",
           "Tokens generated per second over the last minute.");
  w.Sample("cascade_generation_tokens_per_second", {}, m.recent_tokens_per_s);
  w.Family("cascade_generation_tokens_per_dollar", "gauge",
           "The last minute's generation rate over the live workers' price.");
  if (dollars_per_hour > 0) {
    w.Sample("cascade_generation_tokens_per_dollar", {},
             m.recent_tokens_per_s * 3600.0 / dollars_per_hour);
  }
  w.Family("cascade_uptime_seconds", "gauge", "Seconds since the coordinator started.");
  w.Sample("cascade_uptime_seconds", {}, q.uptime_s());
  return w.Take();
}

}  // namespace cascade
