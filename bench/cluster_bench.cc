// cluster_bench: end-to-end decode throughput of Cascade, in one process or as a pipeline
// of worker processes on loopback (TCP or gRPC data plane). Prints one line of JSON per
// measurement so that bench/run_benchmarks.sh can compute ratios.
//
//   cluster_bench local   --model M [--stages S] --threads T --streams K --tokens N
//       one process: K sequences on S in-process stages of T threads (S=1: the baseline)
//   cluster_bench cluster --model M --stages S --threads T --streams K --tokens N
//       cascade-coordinator + S cascade-worker processes (T threads each), K concurrent
//       gRPC streams
//   cluster_bench compare --model M --stages 2,3 --threads T [--baseline-threads U]
//       --streams K --tokens N --repeats R [--data-plane tcp,grpc,mpi]
//       one process (one stage of U threads, default T) and each pipeline (T threads per
//       stage; one per stage count and data plane) all up at once, taking turns for R
//       rounds; prints each pipeline's rate over the one process's
// --launcher mpi starts each cluster as one MPI job instead (mpirun -np S*TP cascade-mpi,
// each rank its own node, --tp TP ranks per stage), so that the data planes compare with
// everything else equal; --data-plane mpi needs it.
// --repeats is the number of rounds (K streams of N tokens each) a set-up serves.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "cascade/v1/inference.grpc.pb.h"
#include "cascade/v1/control_plane.grpc.pb.h"
#include "tests/subprocess.h"
#include "local/local_engine.h"
#include "transport/grpc_util.h"
#include "util/logging.h"
#include "util/runtime.h"

namespace cascade {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  std::string bin_dir;
  int stages = 1;
  int threads = 1;
  int streams = 1;
  int tokens = 64;
  int prompt_tokens = 16;
  int repeats = 3;
  std::string data_plane = "tcp";  // the coordinator's --data-plane
  std::string launcher = "processes";  // or "mpi": one cascade-mpi job
  int tp = 1;                          // mpi: ranks per stage
};

struct Measurement {
  double seconds = 0;  // wall time of the timed phase
  int64_t tokens = 0;  // tokens generated in it
  double tokens_per_s() const { return seconds > 0 ? tokens / seconds : 0; }
};

// BOS, then ids spread over the vocabulary's ordinary tokens (past the first 259: control
// and byte tokens in Llama vocabularies).
std::vector<int32_t> Prompt(int n, int salt, int64_t vocab) {
  const int64_t first = vocab > 600 ? 300 : 3, span = std::min<int64_t>(5000, vocab - first);
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i)
    p.push_back(static_cast<int32_t>(first + (i * 37 + salt * 101) % span));
  return p;
}

// One stage's own account of its work, on stderr (stdout carries the JSON result).
void PrintStageStats(int stage, uint64_t frames, uint64_t tokens, double busy_s, double cpu_s) {
  std::fprintf(stderr, "stage %d: %llu frames, %llu tokens, busy %.2f s (thread CPU %.2f s)\n",
               stage, static_cast<unsigned long long>(frames),
               static_cast<unsigned long long>(tokens), busy_s, cpu_s);
}

// The decode rate of K streams: tokens after each stream's first one, over the time from
// the moment every stream had its first token to the moment the last one finished.
Measurement DecodeRate(const std::vector<Clock::time_point>& first,
                       const std::vector<Clock::time_point>& done,
                       const std::vector<int64_t>& count) {
  Measurement m;
  Clock::time_point start = first[0], end = done[0];
  for (size_t i = 0; i < first.size(); ++i) {
    start = std::max(start, first[i]);
    end = std::max(end, done[i]);
  }
  // Tokens produced after `start`: approximate each stream's as uniform in its decode span.
  double produced = 0;
  for (size_t i = 0; i < first.size(); ++i) {
    const double span = std::chrono::duration<double>(done[i] - first[i]).count();
    const double after = std::chrono::duration<double>(done[i] - start).count();
    produced += span > 0 ? (count[i] - 1) * std::clamp(after / span, 0.0, 1.0) : 0;
  }
  m.seconds = std::chrono::duration<double>(end - start).count();
  m.tokens = static_cast<int64_t>(produced + 0.5);
  return m;
}

// A set-up that serves rounds of K concurrent streams of N tokens; it stays up between
// rounds, so several set-ups can take turns under the same machine conditions.
class Setup {
 public:
  virtual ~Setup() = default;
  virtual std::string name() const = 0;
  // One round: K streams (prompts salted by `round`), each to N tokens; its decode rate.
  virtual Measurement Round(int round) = 0;
  // Each stage's own account of its work so far, on stderr.
  virtual void PrintStats() = 0;
};

// One process: the same scheduler over an in-process pipeline of `stages` stages (no gRPC).
class LocalSetup : public Setup {
 public:
  explicit LocalSetup(const Options& o) : o_(o) {
    auto src = ModelSource::Open(o.model);
    if (!src.ok()) Die(src.status());
    src_ = *std::move(src);
    auto tok = Tokenizer::FromSource(*src_);
    if (!tok.ok()) Die(tok.status());
    tok_ = *std::move(tok);
    LocalEngineOptions eo;
    eo.stages = EvenLayerRanges(src_->config().n_layers, o.stages);
    eo.stage.threads = o.threads;
    eo.stage.kv_sequences = o.streams;
    auto engine = LocalEngine::Create(*src_, *tok_, eo);
    if (!engine.ok()) Die(engine.status());
    engine_ = *std::move(engine);
  }

  std::string name() const override { return "local"; }

  Measurement Round(int round) override {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < o_.streams; ++i) {
      SequenceRequest r;
      r.prompt = Prompt(o_.prompt_tokens, i + 16 * round, src_->config().vocab_size);
      r.max_tokens = o_.tokens;
      r.ignore_eos = true;
      r.sampling = SamplingParams::Greedy();
      auto stream = engine_->scheduler().Submit(std::move(r));
      if (!stream.ok()) Die(stream.status());
      streams.push_back(*std::move(stream));
    }
    std::vector<Clock::time_point> first(o_.streams), done(o_.streams);
    std::vector<int64_t> count(o_.streams, 0);
    std::vector<std::thread> readers;
    for (int i = 0; i < o_.streams; ++i) {
      readers.emplace_back([&, i] {
        for (;;) {
          auto e = streams[i]->Next(std::chrono::seconds(600));
          if (!e) return;
          if (!e->ids.empty() && count[i]++ == 0) first[i] = Clock::now();
          if (e->last) {
            done[i] = Clock::now();
            return;
          }
        }
      });
    }
    for (auto& t : readers) t.join();
    return DecodeRate(first, done, count);
  }

  void PrintStats() override {
    for (int i = 0; i < engine_->pipeline().num_stages(); ++i) {
      const ExecutorStats st = engine_->pipeline().executor(i).Stats();
      PrintStageStats(i, st.frames, st.tokens, st.busy_seconds, st.cpu_seconds);
    }
  }

 private:
  [[noreturn]] static void Die(const absl::Status& st) {
    std::cerr << st << "\n";
    std::exit(1);
  }

  Options o_;
  std::unique_ptr<ModelSource> src_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<LocalEngine> engine_;
};

// Processes: a coordinator and `stages` workers on loopback; K concurrent gRPC streams.
class ClusterSetup : public Setup {
 public:
  explicit ClusterSetup(const Options& o) : o_(o) {
    auto src = ModelSource::Open(o.model);  // for the vocabulary size of the prompts
    if (!src.ok()) {
      std::cerr << src.status() << "\n";
      std::exit(1);
    }
    vocab_ = (*src)->config().vocab_size;
    const int port = testing::FreePort();
    addr_ = "127.0.0.1:" + std::to_string(port);
    const std::string log = "/tmp/cluster_bench_" + std::to_string(::getpid()) + ".log";
    if (o.launcher == "mpi") {
      StartMpiJob(port, log);
      return;
    }
    procs_.push_back(testing::Subprocess::Start(
        {o.bin_dir + "/cascade-coordinator", "--model", o.model, "--listen", addr_, "--workers",
         std::to_string(o.stages), "--min-stages", std::to_string(o.stages), "--kv-sequences",
         std::to_string(std::max(2, o.streams)), "--data-plane", o.data_plane, "--log-level",
         "warn"},
        log));
    testing::WaitForPort("127.0.0.1", port, std::chrono::seconds(30));
    for (int i = 0; i < o.stages; ++i) {
      procs_.push_back(testing::Subprocess::Start(
          {o.bin_dir + "/cascade-worker", "--coordinator", addr_, "--listen", "127.0.0.1:0",
           "--threads", std::to_string(o.threads), "--memory", "8GiB", "--id",
           "bench" + std::to_string(i), "--log-level", "warn"},
          log));
    }
    control_ = v1::Coordinator::NewStub(MakeChannel(addr_));
    for (int i = 0; i < 3000; ++i) {
      grpc::ClientContext ctx;
      v1::ClusterStatusResponse s;
      if (control_->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &s).ok() && s.serving()) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~ClusterSetup() override {
    if (o_.launcher == "mpi") {
      for (auto& p : procs_) p->Signal(SIGUSR1);  // mpirun forwards it: the job drains
      for (auto& p : procs_) p->WaitExit(std::chrono::seconds(20));
    }
    procs_.clear();  // coordinator first, then the workers
  }

  std::string name() const override { return std::to_string(o_.stages) + " stages"; }

  Measurement Round(int round) override {
    std::vector<Clock::time_point> first(o_.streams), done(o_.streams);
    std::vector<int64_t> count(o_.streams, 0);
    std::vector<std::thread> clients;
    for (int i = 0; i < o_.streams; ++i) {
      clients.emplace_back([&, i] {
        auto stub = v1::Inference::NewStub(MakeChannel(addr_));
        grpc::ClientContext ctx;
        v1::GenerateRequest req;
        for (int32_t id : Prompt(o_.prompt_tokens, i + 16 * round, vocab_)) {
          req.add_prompt_ids(id);
        }
        req.set_max_tokens(o_.tokens);
        req.set_ignore_eos(true);
        req.mutable_sampling()->set_temperature(0);
        auto reader = stub->Generate(&ctx, req);
        v1::GenerateResponse r;
        while (reader->Read(&r)) {
          if (r.token_ids_size() > 0 && count[i] == 0) first[i] = Clock::now();
          count[i] += r.token_ids_size();
        }
        done[i] = Clock::now();
        grpc::Status st = reader->Finish();
        if (!st.ok()) std::cerr << "stream " << i << ": " << st.error_message() << "\n";
      });
    }
    for (auto& t : clients) t.join();
    return DecodeRate(first, done, count);
  }

  void PrintStats() override {  // asked of the workers directly
    if (o_.launcher == "mpi") return;  // its control port is its own
    grpc::ClientContext ctx;
    v1::ClusterStatusResponse s;
    if (!control_->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &s).ok()) return;
    for (const auto& stage : s.stages()) {
      auto worker = v1::Worker::NewStub(MakeChannel(stage.address()));
      grpc::ClientContext wctx;
      v1::WorkerStatus ws;
      if (!worker->Status(&wctx, v1::StatusRequest(), &ws).ok()) continue;
      PrintStageStats(stage.index(), ws.stats().frames(), ws.stats().tokens(), ws.stats().busy_s(),
                      ws.stats().cpu_s());
    }
  }

 private:
  // mpirun -np stages*tp cascade-mpi: each rank its own node, tp ranks per stage.
  void StartMpiJob(int port, const std::string& log) {
    const std::string address_file =
        "/tmp/cluster_bench_" + std::to_string(::getpid()) + "_" + std::to_string(port) + ".address";
    std::remove(address_file.c_str());
    procs_.push_back(testing::Subprocess::Start(
        {"mpirun", "--oversubscribe", "--allow-run-as-root", "--mca", "btl", "tcp,self", "-np",
         std::to_string(o_.stages * o_.tp), o_.bin_dir + "/cascade-mpi", "--model", o_.model,
         "--listen", addr_, "--control-listen", "127.0.0.1:0", "--ranks-per-node",
         std::to_string(o_.tp), "--tp", std::to_string(o_.tp), "--threads",
         std::to_string(o_.threads), "--memory", "8GiB", "--kv-sequences",
         std::to_string(std::max(2, o_.streams)), "--data-plane", o_.data_plane,
         "--address-file", address_file, "--log-level", "warn"},
        log));
    for (int i = 0; i < 6000; ++i) {
      if (std::ifstream(address_file).good()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::cerr << "the MPI job did not come up; see " << log << "\n";
    std::exit(1);
  }

  Options o_;
  int64_t vocab_ = 0;
  std::string addr_;
  std::vector<std::unique_ptr<testing::Subprocess>> procs_;
  std::unique_ptr<v1::Coordinator::Stub> control_;
};

std::unique_ptr<Setup> MakeSetup(const std::string& mode, const Options& o) {
  if (mode == "local") return std::make_unique<LocalSetup>(o);
  return std::make_unique<ClusterSetup>(o);
}

}  // namespace
}  // namespace cascade

namespace {

// One set-up (local or cluster), its best of --repeats rounds.
int RunOne(const std::string& mode, cascade::Options o, const std::vector<int>& stages) {
  o.stages = stages.empty() ? 1 : stages[0];
  auto setup = cascade::MakeSetup(mode, o);
  cascade::Measurement best;
  for (int r = 0; r < o.repeats; ++r) {
    cascade::Measurement m = setup->Round(r);
    if (m.tokens_per_s() > best.tokens_per_s()) best = m;
  }
  setup->PrintStats();
  std::printf(
      "{\"mode\": \"%s\", \"stages\": %d, \"threads\": %d, \"streams\": %d, "
      "\"tokens\": %d, \"decode_tokens_per_s\": %.3f, \"seconds\": %.3f}\n",
      mode.c_str(), o.stages, o.threads, o.streams, o.tokens, best.tokens_per_s(), best.seconds);
  return 0;
}

// compare: one process (one stage) and each pipeline stay up and take turns, round by
// round with the order rotated, so that all meet the same machine speed (a shared VM
// drifts by 10-20% within minutes). Per set-up: the total rate over all rounds; per
// pipeline: that over the baseline's, and the median of the rounds' own ratios.
int RunCompare(cascade::Options o, std::vector<int> compare_stages, int baseline_threads,
               const std::vector<std::string>& data_planes, const std::vector<int>& tps) {
  if (compare_stages.empty()) compare_stages = {2, 3};
  std::vector<std::unique_ptr<cascade::Setup>> setups;
  const int stage_threads = o.threads;
  if (baseline_threads <= 0) baseline_threads = stage_threads;
  o.stages = 1;
  o.threads = baseline_threads;
  setups.push_back(cascade::MakeSetup("local", o));
  o.threads = stage_threads;
  struct Pipeline {
    int stages;
    std::string data_plane;
    int tp;
  };
  std::vector<Pipeline> pipelines;
  for (int s : compare_stages) {
    for (const std::string& dp : data_planes) {
      for (int tp : tps) {
        o.stages = s;
        o.data_plane = dp;
        o.tp = tp;
        setups.push_back(cascade::MakeSetup("cluster", o));
        pipelines.push_back({s, dp, tp});
      }
    }
  }
  const size_t n = setups.size();
  std::vector<cascade::Measurement> total(n);
  std::vector<std::vector<double>> rates(n);
  for (size_t i = 0; i < n; ++i) (void)setups[i]->Round(o.repeats);  // warm-up
  for (int r = 0; r < o.repeats; ++r) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (static_cast<size_t>(r) + k) % n;
      const cascade::Measurement m = setups[i]->Round(r);
      total[i].seconds += m.seconds;
      total[i].tokens += m.tokens;
      rates[i].push_back(m.tokens_per_s());
    }
  }
  for (auto& s : setups) s->PrintStats();
  auto rounds = [](const std::vector<double>& v) {
    std::string out;
    for (double x : v) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%s%.2f", out.empty() ? "" : ", ", x);
      out += buf;
    }
    return out;
  };
  std::printf(
      "{\"mode\": \"compare\", \"threads\": %d, \"baseline_threads\": %d, \"streams\": %d, "
      "\"tokens\": %d, \"rounds\": %d, \"baseline_tokens_per_s\": %.3f, "
      "\"baseline_rounds\": [%s], \"pipelines\": [",
      o.threads, baseline_threads, o.streams, o.tokens, o.repeats, total[0].tokens_per_s(),
      rounds(rates[0]).c_str());
  for (size_t i = 1; i < n; ++i) {
    std::vector<double> ratio;
    for (size_t r = 0; r < rates[i].size(); ++r) ratio.push_back(rates[i][r] / rates[0][r]);
    std::sort(ratio.begin(), ratio.end());
    const double median = ratio.empty() ? 0
                          : ratio.size() % 2 == 1
                              ? ratio[ratio.size() / 2]
                              : 0.5 * (ratio[ratio.size() / 2 - 1] + ratio[ratio.size() / 2]);
    std::printf(
        "%s{\"stages\": %d, \"data_plane\": \"%s\", \"launcher\": \"%s\", \"tp\": %d, "
        "\"tokens_per_s\": %.3f, \"ratio\": %.3f, \"median_round_ratio\": %.3f, "
        "\"rounds\": [%s]}",
        i > 1 ? ", " : "", pipelines[i - 1].stages, pipelines[i - 1].data_plane.c_str(),
        o.launcher.c_str(), pipelines[i - 1].tp, total[i].tokens_per_s(),
        total[i].tokens_per_s() / total[0].tokens_per_s(), median, rounds(rates[i]).c_str());
  }
  std::printf("]}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cascade::ConfigureRuntime();
  CLI::App app{"Cascade end-to-end decode benchmark"};
  cascade::Options o;
  std::string mode;
  std::vector<int> compare_stages;
  app.add_option("mode", mode, "local, cluster or compare")
      ->required()
      ->check(CLI::IsMember({"local", "cluster", "compare"}));
  app.add_option("--model", o.model)->required();
  app.add_option("--bin-dir", o.bin_dir, "Where cascade-coordinator and cascade-worker are");
  app.add_option("--stages", compare_stages,
                 "Stages (compare: the pipelines to set against one process, e.g. 2 3)")
      ->delimiter(',');
  app.add_option("--threads", o.threads);
  int baseline_threads = 0;
  app.add_option("--baseline-threads", baseline_threads,
                 "compare: threads of the one process (default: --threads)");
  app.add_option("--streams", o.streams);
  app.add_option("--tokens", o.tokens);
  app.add_option("--prompt-tokens", o.prompt_tokens);
  app.add_option("--repeats", o.repeats, "Rounds; local/cluster report the best");
  std::vector<std::string> data_planes;
  app.add_option("--data-plane", data_planes,
                 "Frames between stages: tcp, grpc or mpi (--launcher mpi); compare takes a "
                 "list, one pipeline each")
      ->delimiter(',')
      ->check(CLI::IsMember({"tcp", "grpc", "mpi"}));
  app.add_option("--launcher", o.launcher, "processes (coordinator + workers) or mpi (cascade-mpi)")
      ->check(CLI::IsMember({"processes", "mpi"}));
  std::vector<int> tps;
  app.add_option("--tp", tps, "mpi: ranks per stage (tensor parallelism); compare takes a list")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (data_planes.empty()) data_planes = {"tcp"};
  if (tps.empty()) tps = {1};
  o.data_plane = data_planes[0];
  o.tp = tps[0];
  if (o.launcher != "mpi" && (o.data_plane == "mpi" || tps != std::vector<int>{1})) {
    std::cerr << "--data-plane mpi and --tp need --launcher mpi\n";
    return 2;
  }
  if (o.bin_dir.empty()) {
    std::string self = argv[0];
    o.bin_dir = self.substr(0, self.rfind('/'));
  }
  (void)cascade::InitLogging("warn", "bench");
  if (mode != "compare") return RunOne(mode, o, compare_stages);
  return RunCompare(o, compare_stages, baseline_threads, data_planes, tps);
}
