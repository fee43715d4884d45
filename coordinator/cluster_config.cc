#include "coordinator/cluster_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "serving/chat_template.h"
#include "yaml-cpp/yaml.h"

namespace cascade {
namespace {

absl::Status Bad(const std::string& name, const std::string& value, const std::string& want) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, ": '", value, "' is not ", want));
}

// A flag name (without dashes) and its YAML key.
ClusterOption Option(const std::string& name, std::string help,
                     std::function<absl::Status(const std::string&)> set,
                     std::function<std::string()> show, std::string type = "TEXT") {
  return {"--" + name, absl::StrReplaceAll(name, {{"-", "_"}}), std::move(help), std::move(set),
          std::move(show), std::move(type)};
}

template <typename T>
ClusterOption Integer(const std::string& name, T* v, T lo, T hi, std::string help) {
  return Option(
      name, std::move(help),
      [=](const std::string& s) -> absl::Status {
        int64_t x = 0;
        if (!absl::SimpleAtoi(s, &x) || x < lo || x > hi) {
          return Bad(name, s, absl::StrCat("an integer in [", lo, ", ", hi, "]"));
        }
        *v = static_cast<T>(x);
        return absl::OkStatus();
      },
      [=] { return absl::StrCat(*v); }, "INT");
}

ClusterOption Real(const std::string& name, double* v, double lo, double hi, std::string help) {
  return Option(
      name, std::move(help),
      [=](const std::string& s) -> absl::Status {
        double x = 0;
        if (!absl::SimpleAtod(s, &x) || !std::isfinite(x) || x < lo || x > hi) {
          return Bad(name, s, absl::StrCat("a number in [", lo, ", ", hi, "]"));
        }
        *v = x;
        return absl::OkStatus();
      },
      [=] { return absl::StrCat(*v); }, "FLOAT");
}

ClusterOption Text(const std::string& name, std::string* v, std::string help) {
  return Option(
      name, std::move(help),
      [=](const std::string& s) {
        *v = s;
        return absl::OkStatus();
      },
      [=] { return *v; });
}

// A yes-or-no option: true/false, 1/0 and on/off all work; it shows itself (default,
// type) in `words`, "true"/"false" or "on"/"off".
struct BoolWords {
  const char* yes;
  const char* no;
};
ClusterOption Boolean(const std::string& name, bool* v, std::string help,
                      BoolWords words = {"true", "false"}) {
  const bool on_off = std::string(words.yes) == "on";
  return Option(
      name, std::move(help),
      [=](const std::string& s) -> absl::Status {
        if (s == "true" || s == "1" || s == "on") {
          *v = true;
        } else if (s == "false" || s == "0" || s == "off") {
          *v = false;
        } else {
          return Bad(name, s, absl::StrCat(words.yes, " or ", words.no));
        }
        return absl::OkStatus();
      },
      [=] { return std::string(*v ? words.yes : words.no); }, on_off ? "on|off" : "BOOL");
}

}  // namespace

void StageEveryWorker(int workers, ClusterConfig* c) {
  if (c->plan.min_stages != 1 || workers <= 1) return;
  c->plan.min_stages = std::max(1, workers / std::max(1, c->replicas.count));
}

const char* DataPlaneName(DataPlane d) {
  switch (d) {
    case DataPlane::kTcp:
      return "tcp";
    case DataPlane::kGrpc:
      return "grpc";
    case DataPlane::kMpi:
      return "mpi";
  }
  return "?";
}

namespace {

// The options of bring-up, the plan, the scheduler and the stages (ClusterOptions' second
// half).
void AppendPlanningOptions(ClusterConfig* c, std::vector<ClusterOption>* out) {
  constexpr int kMaxCount = 1 << 20;
  std::vector<ClusterOption>& t = *out;
  // Bring-up.
  t.push_back(Integer("workers", &c->bring_up.workers, 1, 4096,
                      "Plan once this many workers have registered"));
  t.push_back(Integer("worker-wait-s", &c->bring_up.worker_wait_s, 1, 86400 * 7,
                      "Seconds to wait for the workers before giving up"));
  t.push_back(Real("heartbeat-interval-s", &c->bring_up.heartbeat_interval_s, 0.05, 60,
                   "Seconds between worker heartbeats"));
  t.push_back(Real("drain-timeout-s", &c->bring_up.drain_timeout_s, 0, 3600,
                   "On shutdown, seconds in-flight requests get to finish"));
  // Plan.
  t.push_back(Integer("min-stages", &c->plan.min_stages, 1, 4096,
                      "Pipeline over at least this many workers"));
  t.push_back(Integer("kv-sequences", &c->plan.kv_sequences, 0, kMaxCount,
                      "Size the KV cache for this many full-context sequences (0 and no "
                      "kv-tokens: fill what the weights leave of memory-fraction, at most "
                      "max-running sequences)"));
  t.push_back(Integer<int64_t>("kv-tokens", &c->plan.kv_tokens, 0, int64_t{1} << 40,
                               "Or for exactly this many token positions (0: use kv-sequences)"));
  t.push_back(Integer("kv-block-size", &c->plan.kv_block_size, 1, 4096, "Tokens per KV block"));
  t.push_back(Option(
      "kv-type", "KV cache elements: f16 (half the memory of f32; keys and values rounded) or f32 (exact)",
      [c](const std::string& s) -> absl::Status {
        const std::optional<TensorType> type = ParseKvCacheType(s);
        if (!type) return Bad("kv-type", s, "f32 or f16");
        c->plan.kv_type = *type;
        return absl::OkStatus();
      },
      [c] { return absl::AsciiStrToLower(TensorTypeName(c->plan.kv_type)); }));
  t.push_back(Integer<int64_t>("max-batch-tokens", &c->plan.batch_tokens, 1, kMaxCount,
                               "Tokens per micro-batch"));
  t.push_back(Real("memory-fraction", &c->plan.memory_fraction, 0.01, 1,
                   "Fraction of each worker's memory the plan may use (weights, KV cache, "
                   "activations)"));
  // Replicas.
  t.push_back(Option(
      "replicas",
      "Pipelines that serve: a count, or auto (as many as the workers hold after the "
      "model's fewest stages; 1: one pipeline, the other workers spares)",
      [c](const std::string& s) -> absl::Status {
        int64_t n = 0;
        if (s == "auto") {
          c->replicas.count = 0;
        } else if (absl::SimpleAtoi(s, &n) && n >= 1 && n <= 4096) {
          c->replicas.count = static_cast<int>(n);
        } else {
          return Bad("replicas", s, "auto or an integer in [1, 4096]");
        }
        return absl::OkStatus();
      },
      [c] { return c->replicas.count == 0 ? std::string("auto") : absl::StrCat(c->replicas.count); },
      "auto|INT"));
  t.push_back(Option(
      "routing",
      "Which replica serves a request: cache-aware (least prefill left plus queue), "
      "least-loaded or round-robin",
      [c](const std::string& s) -> absl::Status {
        const std::optional<Router::Policy> p = Router::ParsePolicy(s);
        if (!p) return Bad("routing", s, "cache-aware, least-loaded or round-robin");
        c->replicas.routing = *p;
        return absl::OkStatus();
      },
      [c] { return std::string(Router::PolicyName(c->replicas.routing)); }));
  // Scheduler.
  t.push_back(Integer<int64_t>("prefill-chunk", &c->scheduler.prefill_chunk, 1, kMaxCount,
                               "Prompt tokens per sequence per micro-batch"));
  t.push_back(Integer("max-running", &c->scheduler.max_running, 1, kMaxCount,
                      "Sequences decoding at once"));
  t.push_back(Integer("max-waiting", &c->scheduler.max_waiting, 0, kMaxCount,
                      "Queued requests beyond which new ones get RESOURCE_EXHAUSTED"));
  t.push_back(Boolean("prefix-cache", &c->scheduler.prefix_cache,
                      "Reuse the KV blocks of prompts seen before", {"on", "off"}));
  t.push_back(Option(
      "speculative",
      "Speculative decoding: off, ngram (drafts from the text so far) or draft (drafts "
      "from --draft-model); drafts are verified by the pipeline in one trip, and the text "
      "is the same",
      [c](const std::string& s) -> absl::Status {
        absl::StatusOr<Speculative> v = SpeculativeFromName(s);
        if (!v.ok()) return Bad("speculative", s, "off, ngram or draft");
        c->scheduler.speculative = *v;
        return absl::OkStatus();
      },
      [c] { return std::string(SpeculativeName(c->scheduler.speculative)); }));
  t.push_back(Integer("spec-tokens", &c->scheduler.spec_tokens, 1, 64,
                      "Drafted tokens a sequence verifies per step, at most"));
  t.push_back(Text("draft-model", &c->draft.model,
                   "With --speculative draft: a small GGUF file or Hugging Face folder with "
                   "the model's vocabulary, run by the coordinator to draft tokens"));
  t.push_back(Integer("draft-threads", &c->draft.threads, 1, 256,
                      "Compute threads of the draft model (per replica)"));
  // Stages.
  t.push_back(Integer("threads-per-stage", &c->stage.threads, 0, 4096,
                      "Compute threads per stage (0: each worker's own)"));
  t.push_back(Option(
      "device", "Device for the stages: auto, cpu, cuda or cuda:N (default: each worker's own)",
      [c](const std::string& s) -> absl::Status {
        if (s.empty()) {
          c->stage.device.reset();
          return absl::OkStatus();
        }
        auto d = ParseDevice(s);
        if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("--device: ", d.status().message()));
        c->stage.device = *d;
        return absl::OkStatus();
      },
      [c] { return c->stage.device ? DeviceName(*c->stage.device) : std::string(); }));
  t.push_back(Boolean("quantized-activations", &c->stage.quantized_activations,
                      "8-bit activations for quantized weights on CPUs (false: exact F32)"));
}

}  // namespace

std::vector<ClusterOption> ClusterOptions(ClusterConfig* c) {
  std::vector<ClusterOption> t;
  t.push_back(Text("model", &c->model, "GGUF file or Hugging Face folder to serve"));
  t.push_back(Text("served-model-name", &c->served_model_name,
                   "The model's id in the APIs (default: its own name, or its file name)"));
  t.push_back(Text("chat-template", &c->chat_template,
                   absl::StrCat("Chat format: ", KnownChatFormats(),
                                ", or a file with a Jinja chat template of one of them "
                                "(default: the model's own)")));
  // Server.
  t.push_back(Text("listen", &c->server.listen, "Address of the public gRPC API"));
  t.push_back(Text("control-listen", &c->server.control_listen,
                   "Address of the control plane workers register with"));
  t.push_back(Text("http-listen", &c->server.http.listen,
                   "Also serve the OpenAI-compatible HTTP API here, e.g. 0.0.0.0:8080"));
  t.push_back(Integer("http-max-connections", &c->server.http.max_connections, 1, 1 << 20,
                      "Open HTTP connections at most (more wait in the listen queue)"));
  t.push_back(Option(
      "http-idle-timeout-s",
      "Seconds an HTTP connection may send nothing (headers, body, between requests)",
      [c](const std::string& s) -> absl::Status {
        int v = 0;
        if (!absl::SimpleAtoi(s, &v) || v < 1 || v > 86400) {
          return Bad("http-idle-timeout-s", s, "an integer in [1, 86400]");
        }
        c->server.http.idle_timeout = std::chrono::seconds(v);
        return absl::OkStatus();
      },
      [c] { return absl::StrCat(c->server.http.idle_timeout.count()); }, "INT"));
  t.push_back(Text("cors-origin", &c->server.cors_origin,
                   "Access-Control-Allow-Origin of the HTTP API (\"\": no CORS headers)"));
  t.push_back(Text("advertise", &c->server.advertise,
                   "Control address workers use to reach the coordinator (default: "
                   "control-listen's host:port)"));
  // Standby coordinators.
  t.push_back(Text("etcd", &c->ha.etcd,
                   "etcd endpoints (host:port,...): elect one leader among the coordinators "
                   "of the cluster; the others stand by and take over (\"\": run alone)"));
  t.push_back(Option(
      "cluster-name", "The cluster's name in etcd (its keys are under /cascade/NAME/)",
      [c](const std::string& s) -> absl::Status {
        const bool ok = !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char ch) {
          return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                 ch == '.';
        });
        if (!ok) return Bad("cluster-name", s, "1 to 128 of A-Z, a-z, 0-9, '-', '_', '.'");
        c->ha.cluster_name = s;
        return absl::OkStatus();
      },
      [c] { return c->ha.cluster_name; }));
  t.push_back(Text("etcd-cacert", &c->ha.etcd_cacert,
                   "CA (PEM) that signed etcd's certificate: reach etcd over TLS"));
  t.push_back(Text("etcd-cert", &c->ha.etcd_cert,
                   "Client certificate (PEM) for an etcd with --client-cert-auth"));
  t.push_back(Text("etcd-key", &c->ha.etcd_key, "Key (PEM) of --etcd-cert"));
  t.push_back(Integer("lease-ttl-s", &c->ha.lease_ttl_s, 2, 60,
                      "Seconds the leader's etcd lease lasts: a standby takes over this long "
                      "after the leader is lost"));
  // Security.
  t.push_back(Text("join-token-file", &c->security.join_token_file,
                   "File holding the token workers must present to join"));
  t.push_back(Text("api-key-file", &c->security.api_key_file,
                   "File holding the bearer token clients of the public APIs must present"));
  t.push_back(Text("tls-cert", &c->security.tls_cert, "This server's certificate (PEM): mTLS"));
  t.push_back(Text("tls-key", &c->security.tls_key, "Its private key (PEM)"));
  t.push_back(Text("tls-ca", &c->security.tls_ca, "The cluster's CA certificate (PEM)"));
  // Data plane.
  t.push_back(Option(
      "data-plane", "Activation and result transport: tcp, grpc, or mpi (under cascade-mpi)",
      [c](const std::string& s) -> absl::Status {
        if (s == "tcp") {
          c->data_plane.kind = DataPlane::kTcp;
        } else if (s == "grpc") {
          c->data_plane.kind = DataPlane::kGrpc;
        } else if (s == "mpi") {
          c->data_plane.kind = DataPlane::kMpi;
        } else {
          return Bad("data-plane", s, "tcp, grpc or mpi");
        }
        return absl::OkStatus();
      },
      [c] { return std::string(DataPlaneName(c->data_plane.kind)); }));
  t.push_back(Text("data-listen", &c->data_plane.listen,
                   "Where results arrive over TCP (default: the listen host, a free port)"));
  AppendPlanningOptions(c, &t);
  return t;
}

void AddClusterFlags(CLI::App& app, ClusterConfig* c) {
  for (ClusterOption& o : ClusterOptions(c)) {
    std::string names = o.flag;
    if (o.flag == "--model") names = "--model,-m";
    if (o.flag == "--listen") names = "--listen,-l";
    if (o.flag == "--workers") names = "--workers,-w";
    const std::string flag = o.flag;
    auto set = o.set;
    CLI::Option* opt = app.add_option_function<std::string>(
        names,
        [set, flag](const std::string& v) {
          if (absl::Status st = set(v); !st.ok()) throw CLI::ValidationError(flag, std::string(st.message()));
        },
        o.help);
    opt->type_name(o.type);
    const std::string shown = o.show();
    if (!shown.empty()) opt->default_str(shown);
  }
}

absl::Status LoadClusterFile(const std::string& path, ClusterConfig* c) {
  std::vector<ClusterOption> table = ClusterOptions(c);
  try {
    YAML::Node root = YAML::LoadFile(path);
    if (root.IsNull()) return absl::OkStatus();  // an empty file sets nothing
    if (!root.IsMap()) return absl::InvalidArgumentError(path + ": not a YAML mapping");
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      auto it = std::find_if(table.begin(), table.end(),
                             [&](const ClusterOption& o) { return o.key == key; });
      if (it == table.end()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": unknown key '", key, "'"));
      }
      if (!kv.second.IsScalar()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": '", key, "' must be a single value"));
      }
      if (absl::Status st = it->set(kv.second.Scalar()); !st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": '", key, "': ", st.message()));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return absl::OkStatus();
}

std::string FindConfigFlag(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc) return argv[i + 1];
    if (std::strncmp(argv[i], "--config=", 9) == 0) return argv[i] + 9;
  }
  return "";
}

}  // namespace cascade
