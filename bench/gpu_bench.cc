// gpu_bench: decode on one GPU with the CUDA backend: batch 1 and 32, the TinyLlama-1.1B and
// Llama-3-8B shapes at F16 (random weights, made once; the 8B shape with --layers-8b of its
// 32 layers so that the run stays short: the time per layer and the bandwidth fraction do
// not depend on the layer count), and the fraction of the GPU's measured device-to-device
// copy bandwidth at which the weights stream. One JSON line per measurement on stdout.
//
//   gpu_bench --models DIR [--tokens 64] [--layers-8b 8]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "engine/stage.h"
#include "kernels/gpu.h"
#include "model/synthetic.h"
#include "util/logging.h"
#include "util/runtime.h"

namespace cascade {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes per second of a device-to-device copy (each byte read once and written once).
double CopyBandwidth() {
  const size_t bytes = size_t{1} << 30;
  void* a = nullptr;
  void* b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0;
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  cudaDeviceSynchronize();
  const int reps = 10;
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaDeviceSynchronize();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * reps / s;
}

int Run(const std::string& dir, int tokens, int layers_8b) {
  std::string why;
  const auto gpus = ListGpus(&why);
  if (gpus.empty()) {
    std::cerr << "gpu_bench: no GPU: " << why << "\n";
    return 77;
  }
  const double bw = CopyBandwidth();
  std::printf("{\"gpu\": \"%s\", \"copy_bandwidth_gb_s\": %.1f}\n", gpus[0].name.c_str(), bw / 1e9);
  for (const std::string name : {"tinyllama-1.1b", "llama-3-8b"}) {
    ModelShape shape = *FindModelShape(name);
    if (name == "llama-3-8b") shape.layers = layers_8b;
    const std::string path = absl::StrCat(dir, "/", name, "-", shape.layers, "l-F16.gguf");
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      std::fclose(f);
    } else if (absl::Status st = WriteSyntheticModel(shape, {}, path); !st.ok()) {
      std::cerr << st << "\n";
      return 1;
    }
    auto src = ModelSource::Open(path);
    if (!src.ok()) {
      std::cerr << src.status() << "\n";
      return 1;
    }
    for (int batch : {1, 32}) {
      StageOptions o;
      o.quantized_activations = false;
      o.kv_block_size = 16;
      o.kv_blocks = batch * ((16 + tokens + 2 + 15) / 16);
      o.max_batch_tokens = 16 * batch;
      auto be = CreateCudaBackend({});
      if (!be.ok()) {
        std::cerr << be.status() << "\n";
        return 1;
      }
      auto stage = Stage::Create(**src, o, std::move(*be));
      if (!stage.ok()) {
        std::cerr << stage.status() << "\n";
        return 1;
      }
      std::vector<float> out;
      Batch prefill;
      for (int s = 0; s < batch; ++s) {
        for (int p = 0; p < 16; ++p) prefill.push_back({1 + (s * 7 + p) % 1000, s, p, p == 15});
      }
      if (absl::Status st = (*stage)->Forward(prefill, {}, &out); !st.ok()) {
        std::cerr << st << "\n";
        return 1;
      }
      double seconds = 0;
      for (int t = 0; t < tokens; ++t) {
        Batch step;
        for (int s = 0; s < batch; ++s) step.push_back({100 + s, s, 16 + t, true});
        const auto t0 = Clock::now();
        if (absl::Status st = (*stage)->Forward(step, {}, &out); !st.ok()) {
          std::cerr << st << "\n";
          return 1;
        }
        if (t > 0) seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      }
      const double step_s = seconds / (tokens - 1);
      const double bytes = static_cast<double>((*stage)->weights().matrix_bytes());
      std::printf(
          "{\"shape\": \"%s\", \"layers\": %lld, \"type\": \"F16\", \"batch\": %d, "
          "\"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"weight_gb\": %.3f, "
          "\"weight_stream_gb_s\": %.1f, \"fraction_of_copy_bandwidth\": %.3f}\n",
          name.c_str(), static_cast<long long>(shape.layers), batch, 1000 * step_s,
          batch / step_s, bytes / 1e9, bytes / step_s / 1e9, bw > 0 ? bytes / step_s / bw : 0);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace cascade

int main(int argc, char** argv) {
  cascade::ConfigureRuntime();
  CLI::App app{"Cascade GPU decode benchmark"};
  std::string dir = "/tmp/cascade-gpu-bench";
  int tokens = 64, layers_8b = 8;
  app.add_option("--models", dir, "Where the random-weight models are made (once)");
  app.add_option("--tokens", tokens, "Decode steps measured")->check(CLI::Range(2, 4096));
  app.add_option("--layers-8b", layers_8b, "Layers of the Llama-3-8B shape")->check(CLI::Range(1, 32));
  CLI11_PARSE(app, argc, argv);
  (void)cascade::InitLogging("warn", "gpu_bench");
  std::system(("mkdir -p " + dir).c_str());
  return cascade::Run(dir, tokens, layers_8b);
}
