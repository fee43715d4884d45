// engine_bench: single-process decode and prefill rates of the CPU engine on
// TinyLlama-1.1B-shaped models, the machine's memory bandwidth (a STREAM-like triad, and
// a plain read in huge pages: decode's ceiling), and the fraction of the triad decode reaches. The
// peer is measured side by side, on the same files in the same run, by bench/run_benchmarks.sh
// kernels (LLAMA_BENCH=...): a figure from another machine is no baseline.
//
//   engine_bench --models DIR [--types F16,Q8_0,Q4_0,Q4_K] [--threads 1,2]
//                (any type the kernels take: also Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, Q6_K)
//   engine_bench --model FILE [--model FILE ...]
//   engine_bench ... --json      one JSON object per (model, threads) line, nothing else
//                                (bench/run_benchmarks.sh reads these)
//
// Models missing from DIR are written as DIR/tinyllama-1.1b-TYPE.gguf (random weights,
// the same files `cascade make-model --shape tinyllama-1.1b --type TYPE` writes, less the
// tokenizer). Decode: 64 tokens, one forward pass each, after a 128-token prompt (or from
// an empty context with --decode-from-empty). Prefill:
// one 512-token prompt as one batch. Each rate is the best of --repeats runs. The
// bandwidth fraction is (matrix bytes read per token) x (decode tokens/s) / the triad
// bandwidth at the same thread count measured just before that decode run (a shared
// machine's bandwidth drifts; the adjacent measurement sees the same conditions). Run on
// an otherwise idle machine.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "bench/read_rate.h"
#include "engine/stage.h"
#include "kernels/cpu/cpu_features.h"
#include "model/synthetic.h"
#include "util/status_macros.h"
#include "util/thread_pool.h"

namespace cascade {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// STREAM triad a = b + s * c over doubles, split over `threads` threads like the kernels
// (contiguous ranges, first-touch by the same split). Returns the best GB/s of `reps`,
// counting 3 arrays of 8-byte elements per pass (no write-allocate traffic counted).
double TriadGBps(int threads, int64_t n, int reps) {
  ThreadPool pool(threads);
  std::vector<double> a(n), b(n), c(n);  // value-initialized once; re-touched below
  pool.ParallelFor(n, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      a[i] = 0;
      b[i] = 1.0 + static_cast<double>(i & 7);
      c[i] = 2.0;
    }
  });
  double best = 0;
  const double s = 3.0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    pool.ParallelFor(n, 4096, [&](int64_t lo, int64_t hi) {
      double* __restrict pa = a.data();
      const double* __restrict pb = b.data();
      const double* __restrict pc = c.data();
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    const double sec = Seconds(t0, Clock::now());
    best = std::max(best, 3.0 * 8.0 * static_cast<double>(n) / sec / 1e9);
  }
  if (a[n / 2] < 0) std::printf("?");  // keep the stores observable
  return best;
}

struct Rates {
  double decode = 0;       // tokens/s, best of repeats
  double prefill = 0;      // tokens/s of the long prompt
  double prompt_rate = 0;  // tokens/s of the decode run's prompt
};

struct Options {
  int decode_tokens = 64;
  int prompt_tokens = 128;
  int prefill_tokens = 512;
  int repeats = 2;
  bool exact = false;
  TensorType kv_type = TensorType::kF32;
  // Decode from an empty context (one start token) instead of after the prompt, as
  // llama-bench's generation test does: the same attention work as the peer.
  bool decode_from_empty = false;
};

std::vector<int32_t> PromptIds(int n, int32_t vocab, int salt) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < n; ++i) p.push_back(300 + (i * 37 + salt * 101) % (vocab - 400));
  return p;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

absl::StatusOr<Rates> Measure(const ModelSource& src, int threads, const Options& o) {
  StageOptions so;
  so.threads = threads;
  so.quantized_activations = !o.exact;
  so.kv_type = o.kv_type;
  so.kv_sequences = 1;
  CASCADE_ASSIGN_OR_RETURN(auto stage, Stage::Create(src, so));
  const int32_t vocab = static_cast<int32_t>(src.config().vocab_size);
  Rates best;
  std::vector<float> logits;
  {  // Warm-up, as llama-bench's: one prompt of the measured length (every weight and the
     // prompt's buffers touched: page cache -> page tables, caches), then one token.
    const auto ids = PromptIds(std::max(o.prompt_tokens, 1), vocab, 99);
    Batch warm;
    for (size_t i = 0; i < ids.size(); ++i) {
      warm.push_back({ids[i], 0, static_cast<int32_t>(i), i + 1 == ids.size()});
    }
    CASCADE_RETURN_IF_ERROR(stage->Forward(warm, {}, &logits));
    stage->FreeSequence(0);
    warm = {{1, 0, 0, true}};
    CASCADE_RETURN_IF_ERROR(stage->Forward(warm, {}, &logits));
    stage->FreeSequence(0);
  }
  for (int rep = 0; rep < o.repeats; ++rep) {
    // Decode after a prompt.
    auto ids = PromptIds(o.prompt_tokens, vocab, rep);
    Batch prompt;
    for (size_t i = 0; i < ids.size(); ++i) {
      prompt.push_back({ids[i], 0, static_cast<int32_t>(i), i + 1 == ids.size()});
    }
    auto t0 = Clock::now();
    CASCADE_RETURN_IF_ERROR(stage->Forward(prompt, {}, &logits));
    best.prompt_rate = std::max(best.prompt_rate, ids.size() / Seconds(t0, Clock::now()));
    int32_t pos = static_cast<int32_t>(ids.size());
    if (o.decode_from_empty) {
      stage->FreeSequence(0);
      Batch start = {{1, 0, 0, true}};
      CASCADE_RETURN_IF_ERROR(stage->Forward(start, {}, &logits));
      pos = 1;
    }
    t0 = Clock::now();
    for (int i = 0; i < o.decode_tokens; ++i) {
      Batch b = {{Argmax(logits), 0, pos++, true}};
      CASCADE_RETURN_IF_ERROR(stage->Forward(b, {}, &logits));
    }
    best.decode = std::max(best.decode, o.decode_tokens / Seconds(t0, Clock::now()));
    stage->FreeSequence(0);
    // Prefill of a long prompt as one batch.
    if (o.prefill_tokens > 0) {
      ids = PromptIds(o.prefill_tokens, vocab, rep + 7);
      prompt.clear();
      for (size_t i = 0; i < ids.size(); ++i) {
        prompt.push_back({ids[i], 0, static_cast<int32_t>(i), i + 1 == ids.size()});
      }
      t0 = Clock::now();
      CASCADE_RETURN_IF_ERROR(stage->Forward(prompt, {}, &logits));
      best.prefill = std::max(best.prefill, ids.size() / Seconds(t0, Clock::now()));
      stage->FreeSequence(0);
    }
  }
  return best;
}

int Main(int argc, char** argv) {
  CLI::App app{"Cascade CPU engine benchmark: decode, prefill, memory bandwidth"};
  std::string models_dir, types_arg = "F16,Q8_0,Q4_0,Q4_K", threads_arg = "1,2";
  std::vector<std::string> model_files;
  Options o;
  int64_t triad_mib = 256;
  app.add_option("--models", models_dir, "Folder of tinyllama-1.1b-TYPE.gguf (made if missing)");
  app.add_option("--model", model_files, "Model files to measure instead");
  app.add_option("--types", types_arg,
                 "Types to measure from --models (F16, BF16, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, Q6_K, "
                 "Q5_K, Q4_K, Q3_K, Q2_K)");
  app.add_option("--threads", threads_arg, "Thread counts, comma separated");
  app.add_option("--decode-tokens", o.decode_tokens);
  app.add_option("--prompt-tokens", o.prompt_tokens);
  app.add_option("--prefill-tokens", o.prefill_tokens, "0 skips the long prefill");
  app.add_option("--repeats", o.repeats, "Runs per measurement; the best is reported");
  app.add_option("--triad-mib", triad_mib, "Size of each triad array");
  app.add_flag("--exact", o.exact, "Float activations for quantized weights");
  std::string kv_type_arg = "f32";
  app.add_option("--kv-type", kv_type_arg, "KV cache elements: f32 or f16");
  app.add_flag("--decode-from-empty", o.decode_from_empty,
               "Decode from an empty context (as llama-bench -n does), not after the prompt");
  bool json = false;
  app.add_flag("--json", json,
               "One JSON object per (model, threads) line instead of the table; "
               "--triad-mib 0 skips the bandwidth measurement");
  CLI11_PARSE(app, argc, argv);

  if (auto t = ParseKvCacheType(kv_type_arg)) {
    o.kv_type = *t;
  } else {
    std::fprintf(stderr, "--kv-type: '%s' is not f32 or f16\n", kv_type_arg.c_str());
    return 2;
  }
  std::vector<int> thread_counts;
  for (absl::string_view t : absl::StrSplit(threads_arg, ',', absl::SkipEmpty())) {
    thread_counts.push_back(std::max(1, std::atoi(std::string(t).c_str())));
  }
  std::vector<std::pair<std::string, std::string>> runs;  // (type label, path)
  if (!model_files.empty()) {
    for (const auto& f : model_files) runs.push_back({"", f});
  } else {
    if (models_dir.empty()) models_dir = "/tmp/cascade-bench-models";
    const ModelShape shape = *FindModelShape("tinyllama-1.1b");
    for (absl::string_view t : absl::StrSplit(types_arg, ',', absl::SkipEmpty())) {
      const std::string type(t);
      const std::string path = models_dir + "/tinyllama-1.1b-" + type + ".gguf";
      if (!std::filesystem::exists(path)) {
        const std::optional<TensorType> tt = ParseTensorTypeName(type);
        if (!tt) {
          std::fprintf(stderr, "unknown type %s\n", type.c_str());
          return 2;
        }
        std::fprintf(stderr, "writing %s ...\n", path.c_str());
        SyntheticOptions so;
        so.type = *tt;
        absl::Status st = WriteSyntheticModel(shape, so, path);
        if (!st.ok()) {
          std::fprintf(stderr, "%s\n", st.ToString().c_str());
          return 1;
        }
      }
      runs.push_back({type, path});
    }
  }

  std::map<int, double> triad, read;
  if (!json) {
    std::printf("== CPU engine: %s, kernels %s ==\n", DetectCpuFeatures().Describe().c_str(),
                CpuIsaName(SelectedIsa()));
    for (int t : thread_counts) {
      if (triad_mib <= 0) break;  // --triad-mib 0: no bandwidth figures
      triad[t] = TriadGBps(t, triad_mib * 1024 * 1024 / 8, 5);
      // Read 4x one triad array (more than the triad's three together): past every cache.
      read[t] = ReadGBps(t, static_cast<size_t>(triad_mib) * 4 * 1024 * 1024, 5);
      std::printf("triad bandwidth, %d thread%s: %6.1f GB/s; read (huge pages): %6.1f GB/s\n", t,
                  t == 1 ? " " : "s", triad[t], read[t]);
    }
    std::printf(
        "decode: %d tokens after a %d-token prompt; prefill: %d-token prompt; %s activations; "
        "%s KV cache\n",
        o.decode_tokens, o.prompt_tokens, o.prefill_tokens,
        o.exact ? "float" : "8-bit (quantized weights)", TensorTypeName(o.kv_type));
    std::printf("%-6s %3s | %8s | %9s | %10s | %6s %6s %6s\n", "type", "thr", "decode", "prefill",
                "prompt-128", "GB/tok", "triad", "bw%");
  }
  for (const auto& [label, path] : runs) {
    auto src = ModelSource::Open(path);
    if (!src.ok()) {
      std::fprintf(stderr, "%s\n", src.status().ToString().c_str());
      return 1;
    }
    auto weights = ModelWeights::Bind(**src, {0, static_cast<int>((*src)->config().n_layers)});
    if (!weights.ok()) {
      std::fprintf(stderr, "%s\n", weights.status().ToString().c_str());
      return 1;
    }
    const double gb_per_token = static_cast<double>((*weights)->matrix_bytes()) / 1e9;
    std::string type = label;
    // The attention projection: every architecture has one (a MoE layer has no dense w_gate).
    if (type.empty()) type = TensorTypeName((*weights)->layers[0].wq->type);
    (*src)->Prefetch();
    for (int t : thread_counts) {
      const double tri = triad_mib > 0 ? TriadGBps(t, triad_mib * 1024 * 1024 / 8, 3) : 0;
      triad[t] = std::max(triad[t], tri);
      auto r = Measure(**src, t, o);
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", path.c_str(), r.status().ToString().c_str());
        return 1;
      }
      if (json) {
        std::printf(
            "{\"model\": \"%s\", \"type\": \"%s\", \"threads\": %d, \"kernels\": \"%s\", "
            "\"decode\": %.3f, \"decode_tokens\": %d, \"prompt\": %.3f, \"prompt_tokens\": %d, "
            "\"prefill\": %.3f, \"prefill_tokens\": %d, \"triad\": %.2f}\n",
            path.c_str(), type.c_str(), t, CpuIsaName(SelectedIsa()), r->decode, o.decode_tokens,
            r->prompt_rate, o.prompt_tokens, r->prefill, o.prefill_tokens, tri);
        std::fflush(stdout);
        continue;
      }
      const double bw = tri > 0 ? gb_per_token * r->decode / tri : 0;
      std::printf("%-6s %3d | %8.2f | %9.2f | %10.2f | %6.3f %6.1f %5.1f%%\n", type.c_str(), t,
                  r->decode, r->prefill, r->prompt_rate, gb_per_token, tri, 100 * bw);
      std::fflush(stdout);
    }
  }
  if (json) return 0;
  std::printf("Target: F16 decode >= 80%% of triad bandwidth. llama.cpp side by side: "
              "LLAMA_BENCH=/path/to/llama-bench bench/run_benchmarks.sh kernels\n");
  for (const auto& [t, gbps] : triad) {
    if (gbps > 0) {
      std::printf("best triad, %d thread%s: %.1f GB/s; best read: %.1f GB/s\n", t,
                  t == 1 ? "" : "s", gbps, read[t]);
    }
  }
  return 0;
}

}  // namespace
}  // namespace cascade

int main(int argc, char** argv) { return cascade::Main(argc, argv); }
