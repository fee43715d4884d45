// ClusterConfig: every setting of a coordinator, as one tree whose parts are the very
// structs their users take (the planner's PlanLimits, the scheduler's SchedulerConfig,
// the stages' StageConfig), so nothing is copied by hand from struct to struct. Each
// default is written once, in the member's initializer.
//
// One table (ClusterOptions) lists every setting with its flag, its YAML key (the flag
// without dashes, '-' as '_'), its help text and its parser; both the command line
// (AddClusterFlags) and cluster files (LoadClusterFile) are driven by it, so they accept
// the same settings with the same checks.
//
// Contract:
// - A bad value, from either source, is an error naming the setting and the value. A
//   cluster file is a YAML mapping of scalars; an unknown key or a non-scalar value is an
//   error naming the file and the key.
// - Flags given on the command line override the file (read the file first).
// - Plain data; thread-compatible.
#ifndef CASCADE_COORDINATOR_CLUSTER_CONFIG_H_
#define CASCADE_COORDINATOR_CLUSTER_CONFIG_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "coordinator/http_server.h"
#include "coordinator/planner.h"
#include "engine/draft_model.h"
#include "serving/router.h"
#include "serving/scheduler_config.h"
#include "tensor/device.h"

namespace cascade {

// How activation frames and results travel between the processes of a cluster.
enum class DataPlane {
  kTcp,   // length-prefixed frames on plain TCP (transport/tcp_link.h)
  kGrpc,  // gRPC streams (transport/grpc_link.h)
  kMpi,   // MPI point-to-point between the ranks of one job (transport/mpi_link.h):
          // only in binaries that register it (cascade-mpi)
};
const char* DataPlaneName(DataPlane d);

struct ServerConfig {
  std::string listen = "0.0.0.0:50051";          // public gRPC API (Inference, health)
  std::string control_listen = "0.0.0.0:50053";  // the workers' control plane
  std::string advertise;  // the control address workers reach us at ("" = control_listen's)
  HttpServerOptions http;   // the OpenAI-compatible HTTP API (http.listen "" = off)
  std::string cors_origin = "*";  // its Access-Control-Allow-Origin ("" = no CORS)
};

// Who may talk to the cluster (docs/architecture.md, "Security").
struct SecurityConfig {
  std::string join_token_file;  // workers must present this token to register
  std::string api_key_file;     // clients of the public APIs must present this bearer token
  // mTLS: this process's certificate and key, and the cluster's CA. With them every control
  // and data link is TLS with client certificates from the CA; the public APIs are TLS.
  std::string tls_cert, tls_key, tls_ca;
  bool tls() const { return !tls_cert.empty(); }
};

struct DataPlaneConfig {
  DataPlane kind = DataPlane::kTcp;
  std::string listen;  // where results arrive over TCP ("" = listen host, a free port)
};

struct BringUpConfig {
  int workers = 1;           // plan once this many workers have registered
  int worker_wait_s = 600;   // give up waiting for them after this long
  double heartbeat_interval_s = 1.0;
  double drain_timeout_s = 30;  // in-flight requests get this long to finish on shutdown
};

// Replicas (coordinator/replica_set.h): how many pipelines serve, and which gets a request.
struct ReplicaConfig {
  int count = 0;  // 0: auto, as many as the workers hold after the model's minimum stages
  Router::Policy routing = Router::Policy::kCacheAware;
};

// A standby coordinator (coordinator/leader_election.h): coordinators given the same etcd
// and cluster name elect one leader; the others stand by and take over when it is lost.
struct HaConfig {
  std::string etcd;                 // etcd endpoints, comma-separated ("" = run alone)
  std::string etcd_cacert, etcd_cert, etcd_key;  // TLS to etcd (PEM files; "" = plain)
  std::string cluster_name = "default";  // the cluster's keys: /cascade/<name>/
  int lease_ttl_s = 2;              // the leader's lease: a standby takes over this long after
};

// The draft model of `--speculative draft` (engine/draft_model.h), run by the coordinator.
struct DraftConfig {
  std::string model;  // GGUF file or Hugging Face folder sharing the model's vocabulary
  int threads = DraftModelOptions().threads;  // its compute threads (per replica)
};

struct StageConfig {
  int threads = 0;                    // compute threads per stage (0: each worker's own)
  std::optional<DeviceSpec> device;   // none: each worker's own
  bool quantized_activations = true;  // 8-bit activations for quantized weights (CPU)
};

struct ClusterConfig {
  std::string model;  // GGUF file or Hugging Face folder
  std::string served_model_name;  // the id clients use ("" = the model's name)
  // The chat prompt format: a family name (serving/chat_template.h, KnownChatFormats())
  // or a file holding a Jinja chat template of one of them ("" = the model's own).
  std::string chat_template;
  ServerConfig server;
  SecurityConfig security;
  DataPlaneConfig data_plane;
  BringUpConfig bring_up;
  PlanLimits plan;
  ReplicaConfig replicas;
  HaConfig ha;
  SchedulerConfig scheduler;
  DraftConfig draft;
  StageConfig stage;
};

// One setting: where it lives in the tree and how to read and show it.
struct ClusterOption {
  std::string flag;  // "--max-running"
  std::string key;   // "max_running"
  std::string help;
  std::function<absl::Status(const std::string&)> set;  // parses and stores a value
  std::function<std::string()> show;                    // the current value, as text
  std::string type = "TEXT";  // what --help calls the value: INT, FLOAT, BOOL, TEXT
};

// The launchers that start every worker themselves (cascade serve: local workers;
// cascade-mpi: one per rank group) make them one pipeline, or R with --replicas R, unless
// --min-stages says otherwise: min_stages becomes workers / R.
void StageEveryWorker(int workers, ClusterConfig* c);

// The table, bound to *c.
std::vector<ClusterOption> ClusterOptions(ClusterConfig* c);

// Registers every setting as a flag on `app` (with its current value as the default shown
// by --help), bound to *c.
void AddClusterFlags(CLI::App& app, ClusterConfig* c);
absl::Status LoadClusterFile(const std::string& path, ClusterConfig* c);
// Finds "--config PATH" (or --config=PATH) in argv; "" if absent.
std::string FindConfigFlag(int argc, char** argv);

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_CLUSTER_CONFIG_H_
