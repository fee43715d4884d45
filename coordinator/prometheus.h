// The coordinator's /metrics: Prometheus text exposition format 0.0.4, from the
// scheduler's ServingMetrics and the cluster's status (stages' heartbeats, workers' GPUs
// and prices). Names follow Prometheus conventions: a cascade_ prefix, base units in the
// name (_seconds, _bytes, _celsius, _ratio, _dollars), _total on counters. Every sample
// carries model_name (the served model's id, as the OpenAI API's /v1/models reports it),
// as vLLM's do.
//
//   requests    cascade_requests_total{outcome} (the counts `cascade status` shows, from
//               the same ClusterStatusResponse), cascade_requests_running,
//               cascade_requests_waiting, cascade_prompt_tokens_total,
//               cascade_generation_tokens_total, histograms
//               cascade_time_to_first_token_seconds, cascade_inter_token_latency_seconds,
//               cascade_request_duration_seconds, cascade_request_queue_seconds
//   KV cache    cascade_kv_blocks_reserved, cascade_kv_blocks_capacity (the scheduler's
//               books) and their ratio cascade_kv_cache_usage_ratio (0..1);
//               cascade_stage_kv_blocks_used / _free {stage, worker} (the stages')
//   prefix      cascade_prefix_cache_queried_tokens_total,
//               cascade_prefix_cache_hit_tokens_total {replica},
//               cascade_prefix_cache_blocks {replica, state: in_use or idle}
//   stages      cascade_stage_busy_seconds_total, cascade_stage_frames_total,
//               cascade_stage_tokens_total, cascade_stage_rejected_frames_total {stage,
//               worker}
//   hops        cascade_hop_latency_seconds{hop} (histogram), and
//               cascade_hop_activation_bytes_total{hop}; hops are named "coordinator->0",
//               "0->1", ..., "N->coordinator"
//   workers     cascade_worker_up{worker}, cascade_gpu_utilization_ratio,
//               cascade_gpu_memory_used_bytes, cascade_gpu_memory_total_bytes,
//               cascade_gpu_temperature_celsius {worker, gpu, model};
//               cascade_worker_cpu_seconds_total, cascade_worker_cpu_utilization_ratio,
//               cascade_worker_resident_memory_bytes {worker} (its process, heartbeats)
//   cost        cascade_cost_per_hour_dollars{worker} (each live worker's --cost-per-hour),
//               cascade_generation_tokens_per_second (the last minute's rate) and
//               cascade_generation_tokens_per_dollar (that rate over the live workers'
//               price; absent while no price is set)
//
// Contract: a pure function; label values are escaped as the format requires.
#ifndef CASCADE_COORDINATOR_PROMETHEUS_H_
#define CASCADE_COORDINATOR_PROMETHEUS_H_

#include <string>

#include "cascade/v1/control_plane.pb.h"
#include "serving/serving_metrics.h"

namespace cascade {

// `serving` gives the histograms and rates; every count and gauge comes from `cluster`.
std::string RenderPrometheus(const ServingMetrics::Snapshot& serving,
                             const v1::ClusterStatusResponse& cluster);

// The scheduler's reserved KV blocks over its capacity (0 without a pipeline): the
// figure /metrics and `cascade status` show.
double KvUsageRatio(const v1::SchedulerStatus& q);

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_PROMETHEUS_H_
