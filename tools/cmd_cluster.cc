// Subcommands that run or talk to a cluster: serve, status, plan, and the remote half of
// generate (--server).
#include <cstdio>
#include <iostream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cascade/v1/inference.grpc.pb.h"
#include "cascade/v1/control_plane.grpc.pb.h"
#include "client/resuming_stream.h"
#include "coordinator/cluster_config.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/planner.h"
#include "coordinator/status_text.h"
#include "tools/commands.h"
#include "util/logging.h"
#include "util/status_macros.h"
#include "util/runtime.h"
#include "util/signals.h"
#include "util/units.h"
#include "transport/grpc_util.h"
#include "transport/security.h"
#include "util/secret.h"
#include "util/system_memory.h"
#include "worker/worker_server.h"

namespace cascade::cli {
namespace {

// ---------------------------------------------------------------- serve

struct ServeFlags {
  ClusterConfig config;
  int threads = 0;
  double cost_per_hour = 0;
};

int RunServe(ServeFlags f) {
  BlockTerminationSignals();
  HeapTrimmer heap_trimmer;  // resident memory follows use (util/runtime.h)
  if (!f.config.ha.etcd.empty()) {
    std::cerr << "cascade serve: --etcd needs coordinators of their own: run "
                 "cascade-coordinator --etcd on two machines and cascade-worker --coordinator "
                 "A,B (docs/architecture.md, \"Standby coordinators\")\n";
    return 2;
  }
  const int n = f.config.bring_up.workers;
  StageEveryWorker(n, &f.config);  // one process shows pipeline parallelism
  auto coordinator = CoordinatorServer::Start(f.config);
  if (!coordinator.ok()) {
    std::cerr << "cascade serve: " << coordinator.status().message() << "\n";
    return 1;
  }
  // N workers in this process, sharing the machine's memory and cores.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::unique_ptr<WorkerServer>> workers;
  for (int i = 0; i < n; ++i) {
    WorkerOptions w;
    w.listen = "127.0.0.1:0";
    w.coordinator = (*coordinator)->control_address();
    w.join_token = (*coordinator)->join_token();  // the coordinator's own
    w.worker_id = absl::StrCat("local-", i);
    w.threads = f.threads > 0 ? f.threads : std::max(1, cores / n);
    w.memory_bytes = AvailableMemoryBytes() / static_cast<uint64_t>(n);
    w.device = f.config.stage.device.value_or(DeviceSpec{DeviceKind::kCpu, 0});
    w.cost_per_hour = f.cost_per_hour / n;
    auto s = WorkerServer::Start(w);
    if (!s.ok()) {
      std::cerr << "cascade serve: " << s.status().message() << "\n";
      return 1;
    }
    workers.push_back(std::move(*s));
  }
  absl::Status st = (*coordinator)->WaitUntilServing(std::chrono::minutes(30));
  if (!st.ok()) {
    std::cerr << "cascade serve: " << st.message() << "\n";
    return 1;
  }
  std::cerr << "cascade serve: serving " << f.config.model << " with " << n
            << " worker(s) on " << (*coordinator)->Addresses() << "; Ctrl-C stops\n";
  WaitForTerminationSignal();
  std::cerr << "cascade serve: draining (up to " << f.config.bring_up.drain_timeout_s << " s)\n";
  (*coordinator)->Drain(
      std::chrono::milliseconds(static_cast<int64_t>(1000 * f.config.bring_up.drain_timeout_s)));
  for (auto& w : workers) w->Shutdown();
  return 0;
}

// ---------------------------------------------------------------- status

struct StatusFlags {
  std::string control = kDefaultControlAddress;
  std::string server;  // the old spelling of --control
  std::string join_token_file;
  TlsFiles tls;
};

int RunStatus(const StatusFlags& f) {
  if (absl::Status st = SetTransportSecurity(f.tls); !st.ok()) {
    std::cerr << "cascade status: " << st.message() << "\n";
    return 2;
  }
  if (!f.server.empty()) {
    std::cerr << "cascade status: --server is now --control (the coordinator's control "
                 "address); reading " << f.server << " as --control\n";
  }
  const std::string& server = f.server.empty() ? f.control : f.server;
  auto stub = v1::Coordinator::NewStub(MakeChannel(server));
  grpc::ClientContext ctx;
  if (!f.join_token_file.empty()) {
    auto t = ReadSecretFile(f.join_token_file);
    if (!t.ok()) {
      std::cerr << "cascade status: " << t.status().message() << "\n";
      return 2;
    }
    ctx.AddMetadata(kJoinTokenMetadata, *t);
  }
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ClusterStatusResponse s;
  grpc::Status st = stub->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &s);
  if (!st.ok()) {
    std::cerr << "cascade status: " << server << ": "
              << (st.error_message().empty() ? "the call failed" : st.error_message()) << " ("
              << absl::StatusCodeToString(FromGrpc(st).code()) << ")";
    if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      std::cerr << "; this is the public API (what `cascade generate --server` takes): give "
                   "--control the coordinator's control address (--control-listen, "
               << kDefaultControlAddress << " by default)";
    }
    std::cerr << "\n";
    return 1;
  }
  std::fputs(RenderClusterStatus(s).c_str(), stdout);
  return 0;
}

// ---------------------------------------------------------------- plan

struct PlanFlags {
  std::string model, shape, type = "F16", workers;
  int kv_sequences = PlanLimits().kv_sequences;
  int64_t kv_tokens = PlanLimits().kv_tokens;
  int64_t ctx = 0;
  int64_t batch = PlanLimits().batch_tokens;
  double memory_fraction = PlanLimits().memory_fraction;
  int min_stages = 1;
  int tp = 1;
  std::string replicas = "1";
  std::string kv_type = absl::AsciiStrToLower(TensorTypeName(PlanLimits().kv_type));
};

// The profile --model or --shape/--type name; an error names what is unknown and lists
// what is known.
absl::StatusOr<ModelProfile> PlanProfile(const PlanFlags& f) {
  if (!f.model.empty()) {
    CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> src, ModelSource::Open(f.model));
    return ProfileFromSource(*src);
  }
  if (f.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "give --model, or --shape (", absl::StrJoin(ModelShapeNames(), ", "), ") with a --type"));
  }
  const std::optional<ModelShape> shape = FindModelShape(f.shape);
  if (!shape) {
    return absl::InvalidArgumentError(absl::StrCat("--shape: '", f.shape,
                                                   "' is not a known shape; the shapes are ",
                                                   absl::StrJoin(ModelShapeNames(), ", ")));
  }
  const std::optional<WeightType> type = ParseWeightType(f.type);
  if (!type) {
    return absl::InvalidArgumentError(absl::StrCat("--type: '", f.type,
                                                   "' is not a known weight type; the types are ",
                                                   absl::StrJoin(WeightTypeNames(), ", ")));
  }
  return ProfileFromShape(*shape, *type);
}

int RunPlan(const PlanFlags& f) {
  absl::StatusOr<ModelProfile> profile = PlanProfile(f);
  if (!profile.ok()) {
    std::cerr << "cascade plan: " << profile.status().message() << "\n";
    return f.model.empty() ? 2 : 1;
  }
  auto workers = ParseWorkerSpecs(f.workers);
  if (!workers.ok()) {
    std::cerr << "cascade plan: --workers: " << workers.status().message() << "\n";
    return 2;
  }
  for (WorkerSpec& w : *workers) w.tp = f.tp;  // each worker is a group of tp ranks
  PlanLimits lim;
  lim.context = f.ctx;
  lim.kv_sequences = f.kv_sequences;
  lim.kv_tokens = f.kv_tokens;
  lim.batch_tokens = f.batch;
  lim.memory_fraction = f.memory_fraction;
  lim.min_stages = f.min_stages;
  const std::optional<TensorType> kv_type = ParseKvCacheType(f.kv_type);
  if (!kv_type) {
    std::cerr << "cascade plan: --kv-type: '" << f.kv_type << "' is not f32 or f16\n";
    return 2;
  }
  lim.kv_type = *kv_type;
  int replicas = 0;
  if (f.replicas != "auto" && (!absl::SimpleAtoi(f.replicas, &replicas) || replicas < 1)) {
    std::cerr << "cascade plan: --replicas: '" << f.replicas << "' is not a count or auto\n";
    return 2;
  }
  auto plan = MakeReplicaPlans(*profile, *workers, lim, replicas);
  if (!plan.ok()) {
    std::cerr << plan.status().message() << "\n";
    return 1;
  }
  std::printf("micro-batches of %ld tokens; %g of each worker's memory\n",
              static_cast<long>(f.batch), lim.memory_fraction);
  std::fputs(plan->Table(*profile, *workers, lim.Context(profile->config.context_length)).c_str(),
             stdout);
  return 0;
}

}  // namespace

// ---------------------------------------------------------------- remote generate

int RunRemoteGenerate(const std::string& server, const v1::GenerateRequest& req, bool ids,
                      bool echo) {
  // One coordinator, or the cluster's several: the stream resumes on whichever serves
  // when its own is lost (client/resuming_stream.h).
  const std::vector<std::string> servers = absl::StrSplit(server, ',', absl::SkipWhitespace());
  if (echo && !ids) {
    const std::string& prompt = req.prompt();
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  }
  std::vector<int32_t> all;
  ResumeStats stats;
  absl::Status st = GenerateResuming(
      servers, req,
      [&](const v1::GenerateResponse& r) {
        if (ids) {
          all.insert(all.end(), r.token_ids().begin(), r.token_ids().end());
        } else {
          std::fwrite(r.text().data(), 1, r.text().size(), stdout);
          std::fflush(stdout);
        }
        return true;
      },
      {}, &stats);
  if (ids) std::cout << absl::StrJoin(all, " ");
  std::cout << "\n";
  if (stats.resumes > 0) {
    spdlog::info("the stream resumed {} time(s), the longest gap {:.2f} s ({})", stats.resumes,
                 stats.longest_resume_s, stats.last_error);
  }
  if (!st.ok()) {
    std::cerr << "cascade generate: "
              << (st.message().empty() ? "the call failed" : std::string(st.message()));
    if (st.code() == absl::StatusCode::kUnimplemented) {
      std::cerr << " (UNIMPLEMENTED); this is not the public API: --server takes the "
                   "coordinator's public address (--listen, "
                << kDefaultPublicAddress << " by default), not its control address, which is "
                   "what `cascade status --control` takes";
    }
    std::cerr << "\n";
    return 1;
  }
  return 0;
}

void AddServe(CLI::App& app, Action* action) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Run a coordinator and N local workers in this process (one command cluster)");
  f->config.server.listen = kDefaultPublicAddress;
  f->config.server.control_listen = kDefaultControlAddress;
  AddClusterFlags(*cmd, &f->config);
  cmd->add_option("--threads", f->threads, "Threads per worker (default: cores / workers)");
  cmd->add_option("--cost-per-hour", f->cost_per_hour,
                  "What this machine costs per hour, for the cost metrics (split over the workers)")
      ->check(CLI::Range(0.0, 1e9).description("NONNEGATIVE"));
  cmd->callback([f, action] { *action = [f] { return RunServe(*f); }; });
}

void AddStatus(CLI::App& app, Action* action) {
  auto f = std::make_shared<StatusFlags>();
  CLI::App* cmd = app.add_subcommand("status", "Show a running cluster's stages, workers and load");
  cmd->add_option("--control,-c", f->control,
                  "The coordinator's control address (its --control-listen)");
  cmd->add_option("--server,-s", f->server, "Old spelling of --control")
      ->default_str("");
  cmd->add_option("--join-token-file", f->join_token_file, "File holding the cluster's join token");
  cmd->add_option("--tls-cert", f->tls.cert, "Certificate (PEM) for the cluster's mTLS");
  cmd->add_option("--tls-key", f->tls.key, "Its private key (PEM)");
  cmd->add_option("--tls-ca", f->tls.ca, "The cluster's CA certificate (PEM)");
  cmd->callback([f, action] { *action = [f] { return RunStatus(*f); }; });
}

void AddPlan(CLI::App& app, Action* action) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd =
      app.add_subcommand("plan", "Print the pipeline plan for a model on given workers");
  cmd->add_option("--model,-m", f->model, "GGUF file or Hugging Face folder");
  cmd->add_option("--shape", f->shape, "Or a named shape, e.g. tinyllama-1.1b");
  cmd->add_option("--type", f->type,
                  "Weight type with --shape: a tensor type (F16, Q8_0, Q4_K, ...) or a "
                  "llama.cpp file type (Q4_K_M, Q5_K_S, ...)");
  cmd->add_option("--workers,-w", f->workers,
                  "Workers: name=memory[@gflops],... e.g. a=8GiB@2,b=4GiB")
      ->required();
  cmd->add_option("--kv-sequences", f->kv_sequences,
                  "Full-context sequences the KV cache holds (default: what the memory left "
                  "holds)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--kv-tokens", f->kv_tokens, "Or exactly this many KV positions per stage")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--ctx", f->ctx, "Context per sequence (default: the model's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--kv-type", f->kv_type, "KV cache elements: f16 or f32")->capture_default_str();
  cmd->add_option("--memory-fraction", f->memory_fraction,
                  "Fraction of each worker's memory the plan may use")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  cmd->add_option("--batch", f->batch, "Tokens per micro-batch");
  cmd->add_option("--min-stages", f->min_stages, "Use at least this many workers a pipeline");
  cmd->add_option("--replicas", f->replicas,
                  "Pipelines to form over the workers (a count, or auto: as many as fit; the "
                  "workers left are spares)")
      ->type_name("INT|auto")
      ->capture_default_str();
  cmd->add_option("--tp", f->tp,
                  "Tensor parallelism: each worker is a group of this many ranks of one node, "
                  "each with the memory given (the table shows each rank's share)")
      ->check(CLI::Range(1, 1024));
  cmd->callback([f, action] { *action = [f] { return RunPlan(*f); }; });
}

}  // namespace cascade::cli
