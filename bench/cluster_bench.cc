// cluster_bench: end-to-end decode throughput of Cascade, in one process or as a pipeline
// of worker processes over gRPC on loopback. Prints one line of JSON per measurement so
// that bench/run_benchmarks.sh can compute ratios.
//
//   cluster_bench local   --model M [--stages S] --threads T --streams K --tokens N
//       one process: K sequences on S in-process stages of T threads (S=1: the baseline)
//   cluster_bench cluster --model M --stages S --threads T --streams K --tokens N
//       cascade-coordinator + S cascade-worker processes (T threads each), K concurrent
//       gRPC streams
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "cascade/v1/inference.grpc.pb.h"
#include "cascade/v1/worker.grpc.pb.h"
#include "coordinator/scheduler.h"
#include "tests/subprocess.h"
#include "util/logging.h"
#include "worker/grpc_util.h"
#include "worker/local_pipeline.h"

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
void PrintStageStats(int stage, uint64_t frames, uint64_t tokens, double busy_s) {
  std::fprintf(stderr, "stage %d: %llu frames, %llu tokens, busy %.2f s\n", stage,
               static_cast<unsigned long long>(frames), static_cast<unsigned long long>(tokens),
               busy_s);
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

// One process: the same scheduler over a one-stage in-process pipeline (no gRPC).
Measurement RunLocal(const Options& o) {
  auto src = ModelSource::Open(o.model);
  if (!src.ok()) {
    std::cerr << src.status() << "\n";
    std::exit(1);
  }
  auto tok = Tokenizer::FromGguf(*(*src)->gguf());
  StageOptions so;
  so.threads = o.threads;
  so.kv_sequences = o.streams;
  Scheduler* sched_ptr = nullptr;
  auto pipeline =
      LocalPipeline::Create(**src, EvenLayerRanges((*src)->config().n_layers, o.stages), so, 1,
                            [&](StepResult r) { sched_ptr->OnResult(std::move(r)); });
  SchedulerOptions opt;
  opt.num_stages = o.stages;
  opt.kv_blocks = (*pipeline)->executor(0).stage().kv_cache().num_blocks();
  opt.context_length = (*src)->config().context_length;
  opt.vocab_size = (*src)->config().vocab_size;
  Scheduler sched(opt, **tok, (*pipeline)->first());
  sched_ptr = &sched;
  sched.Start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < o.streams; ++i) {
    SequenceRequest r;
    r.prompt = Prompt(o.prompt_tokens, i, (*src)->config().vocab_size);
    r.max_tokens = o.tokens;
    r.ignore_eos = true;
    r.sampling = SamplingParams::Greedy();
    auto stream = sched.Submit(std::move(r));
    if (!stream.ok()) {
      std::cerr << "request " << i << ": " << stream.status() << "\n";
      std::exit(1);
    }
    streams.push_back(*std::move(stream));
  }
  std::vector<Clock::time_point> first(o.streams), done(o.streams);
  std::vector<int64_t> count(o.streams, 0);
  std::vector<std::thread> readers;
  for (int i = 0; i < o.streams; ++i) {
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
  for (int i = 0; i < (*pipeline)->num_stages(); ++i) {
    const ExecutorStats st = (*pipeline)->executor(i).Stats();
    PrintStageStats(i, st.frames, st.tokens, st.busy_seconds);
  }
  sched.Stop();
  (*pipeline)->Stop();
  return DecodeRate(first, done, count);
}

// Processes: a coordinator and `stages` workers on loopback; K concurrent gRPC streams.
Measurement RunCluster(const Options& o) {
  auto src = ModelSource::Open(o.model);  // for the vocabulary size of the prompts
  if (!src.ok()) {
    std::cerr << src.status() << "\n";
    std::exit(1);
  }
  const int64_t vocab = (*src)->config().vocab_size;
  const int port = testing::FreePort();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const std::string log = "/tmp/cluster_bench_" + std::to_string(::getpid()) + ".log";
  std::vector<std::unique_ptr<testing::Subprocess>> procs;
  procs.push_back(testing::Subprocess::Start(
      {o.bin_dir + "/cascade-coordinator", "--model", o.model, "--listen", addr, "--workers",
       std::to_string(o.stages), "--min-stages", std::to_string(o.stages), "--kv-sequences",
       std::to_string(std::max(2, o.streams)), "--log-level", "warn"},
      log));
  testing::WaitForPort("127.0.0.1", port, std::chrono::seconds(30));
  for (int i = 0; i < o.stages; ++i) {
    procs.push_back(testing::Subprocess::Start(
        {o.bin_dir + "/cascade-worker", "--coordinator", addr, "--listen", "127.0.0.1:0",
         "--threads", std::to_string(o.threads), "--memory", "8GiB", "--id",
         "bench" + std::to_string(i), "--log-level", "warn"},
        log));
  }
  auto channel = MakeChannel(addr);
  auto control = v1::Coordinator::NewStub(channel);
  for (int i = 0; i < 3000; ++i) {
    grpc::ClientContext ctx;
    v1::ClusterStatusResponse s;
    if (control->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &s).ok() && s.serving()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<Clock::time_point> first(o.streams), done(o.streams);
  std::vector<int64_t> count(o.streams, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < o.streams; ++i) {
    clients.emplace_back([&, i] {
      auto stub = v1::Inference::NewStub(MakeChannel(addr));
      grpc::ClientContext ctx;
      v1::GenerateRequest req;
      for (int32_t id : Prompt(o.prompt_tokens, i, vocab)) req.add_prompt_ids(id);
      req.set_max_tokens(o.tokens);
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
  {  // Each stage's own account of its compute time (asked of the workers directly).
    grpc::ClientContext ctx;
    v1::ClusterStatusResponse s;
    if (control->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &s).ok()) {
      for (const auto& stage : s.stages()) {
        auto worker = v1::Worker::NewStub(MakeChannel(stage.address()));
        grpc::ClientContext wctx;
        v1::WorkerStatus ws;
        if (!worker->Status(&wctx, v1::StatusRequest(), &ws).ok()) continue;
        PrintStageStats(stage.index(), ws.stats().frames(), ws.stats().tokens(),
                        ws.stats().busy_s());
      }
    }
  }
  procs.clear();  // coordinator first, then the workers
  return DecodeRate(first, done, count);
}

}  // namespace
}  // namespace cascade

int main(int argc, char** argv) {
  CLI::App app{"Cascade end-to-end decode benchmark"};
  cascade::Options o;
  std::string mode;
  app.add_option("mode", mode, "local or cluster")->required();
  app.add_option("--model", o.model)->required();
  app.add_option("--bin-dir", o.bin_dir, "Where cascade-coordinator and cascade-worker are");
  app.add_option("--stages", o.stages);
  app.add_option("--threads", o.threads);
  app.add_option("--streams", o.streams);
  app.add_option("--tokens", o.tokens);
  app.add_option("--prompt-tokens", o.prompt_tokens);
  app.add_option("--repeats", o.repeats, "Runs; the best is reported");
  CLI11_PARSE(app, argc, argv);
  if (o.bin_dir.empty()) {
    std::string self = argv[0];
    o.bin_dir = self.substr(0, self.rfind('/'));
  }
  (void)cascade::InitLogging("warn", "bench");
  cascade::Measurement best;
  for (int r = 0; r < o.repeats; ++r) {
    cascade::Measurement m = mode == "local" ? cascade::RunLocal(o) : cascade::RunCluster(o);
    if (m.tokens_per_s() > best.tokens_per_s()) best = m;
  }
  std::printf(
      "{\"mode\": \"%s\", \"stages\": %d, \"threads\": %d, \"streams\": %d, \"tokens\": %d, "
      "\"decode_tokens_per_s\": %.3f, \"seconds\": %.3f}\n",
      mode.c_str(), o.stages, o.threads, o.streams, o.tokens, best.tokens_per_s(), best.seconds);
  return 0;
}
