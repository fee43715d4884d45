#include "coordinator/cluster_config.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace cascade {

void AddCoordinatorFlags(CLI::App& app, CoordinatorOptions* o) {
  app.add_option("--model,-m", o->model_path, "GGUF file or Hugging Face folder to serve");
  app.add_option("--listen,-l", o->listen, "Address to listen on");
  app.add_option("--http-listen", o->http_listen,
                 "Also serve the OpenAI-compatible HTTP API here, e.g. 0.0.0.0:8080");
  app.add_option("--advertise", o->advertise,
                 "Address workers use to reach the coordinator (default: listen host:port)");
  app.add_option("--workers,-w", o->workers, "Plan once this many workers have registered")
      ->check(CLI::Range(1, 4096));
  app.add_option("--min-stages", o->min_stages, "Pipeline over at least this many workers")
      ->check(CLI::Range(1, 4096));
  app.add_option("--threads-per-stage", o->threads_per_stage,
                 "Compute threads per stage (0: each worker's own)");
  app.add_option("--kv-sequences", o->kv_sequences,
                 "Size the KV cache for this many full-context sequences")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--kv-tokens", o->kv_tokens, "Or for exactly this many token positions");
  app.add_option("--kv-block-size", o->kv_block_size, "Tokens per KV block")
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-batch-tokens", o->max_batch_tokens, "Tokens per micro-batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per sequence per micro-batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--max-running", o->max_running, "Sequences decoding at once")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-waiting", o->max_waiting,
                 "Queued requests beyond which new ones get RESOURCE_EXHAUSTED")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--data-plane", o->data_plane,
                 "Activation and result transport: tcp (default) or grpc")
      ->check(CLI::IsMember({"tcp", "grpc"}));
  app.add_option("--data-listen", o->data_listen,
                 "Where results arrive over TCP (default: the listen host, a free port)");
  app.add_option("--device", o->device, "Device for the workers: cpu, auto, cuda:N");
}

absl::Status LoadClusterConfig(const std::string& path, CoordinatorOptions* o) {
  try {
    YAML::Node root = YAML::LoadFile(path);
    if (!root.IsMap()) return absl::InvalidArgumentError(path + ": not a YAML mapping");
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      auto bad = [&](const char* want) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": '", key, "' must be ", want));
      };
      try {
        if (key == "model") {
          o->model_path = v.as<std::string>();
        } else if (key == "listen") {
          o->listen = v.as<std::string>();
        } else if (key == "http_listen") {
          o->http_listen = v.as<std::string>();
        } else if (key == "advertise") {
          o->advertise = v.as<std::string>();
        } else if (key == "workers") {
          o->workers = v.as<int>();
        } else if (key == "min_stages") {
          o->min_stages = v.as<int>();
        } else if (key == "worker_wait_s") {
          o->worker_wait = std::chrono::seconds(v.as<int>());
        } else if (key == "threads_per_stage") {
          o->threads_per_stage = v.as<int>();
        } else if (key == "kv_sequences") {
          o->kv_sequences = v.as<int>();
        } else if (key == "kv_tokens") {
          o->kv_tokens = v.as<int64_t>();
        } else if (key == "kv_block_size") {
          o->kv_block_size = v.as<int>();
        } else if (key == "max_batch_tokens") {
          o->max_batch_tokens = v.as<int64_t>();
        } else if (key == "prefill_chunk") {
          o->prefill_chunk = v.as<int64_t>();
        } else if (key == "max_running") {
          o->max_running = v.as<int>();
        } else if (key == "max_waiting") {
          o->max_waiting = v.as<int>();
        } else if (key == "data_plane") {
          o->data_plane = v.as<std::string>();
          if (o->data_plane != "tcp" && o->data_plane != "grpc") return bad("tcp or grpc");
        } else if (key == "data_listen") {
          o->data_listen = v.as<std::string>();
        } else if (key == "device") {
          o->device = v.as<std::string>();
        } else if (key == "heartbeat_interval_s") {
          o->heartbeat_interval_s = v.as<double>();
        } else {
          return absl::InvalidArgumentError(absl::StrCat(path, ": unknown key '", key, "'"));
        }
      } catch (const YAML::Exception&) {
        return bad("a value of the right type");
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
