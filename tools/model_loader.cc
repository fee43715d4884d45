#include "tools/model_loader.h"

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/gpu.h"
#include "util/logging.h"
#include "util/progress.h"
#include "util/status_macros.h"

namespace cascade::cli {

int DefaultThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device,
                                                     const StageOptions& options) {
  auto cpu = [&]() -> std::unique_ptr<Backend> {
    CpuBackendOptions bo;
    bo.threads = options.threads;
    bo.quantized_activations = options.quantized_activations;
    return std::make_unique<CpuBackend>(bo);
  };
  if (device == "cpu") return cpu();
  if (device == "auto") {
    std::string why;
    if (ListGpus(&why).empty()) {
      if (BuiltWithCuda()) spdlog::warn("no GPU found ({}); running on the CPU", why);
      return cpu();
    }
    return CreateCudaBackend({});
  }
  if (device.rfind("cuda", 0) == 0) {
    CudaBackendOptions co;
    if (device.size() > 4) {
      if (device[4] != ':' || !absl::SimpleAtoi(device.substr(5), &co.device)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--device '", device, "': expected cuda or cuda:N"));
      }
    }
    return CreateCudaBackend(co);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device '", device, "': expected auto, cpu, cuda or cuda:N"));
}

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const StageOptions& options,
                                      bool with_stage, const std::string& device) {
  LoadedModel m;
  CASCADE_ASSIGN_OR_RETURN(m.source, ModelSource::Open(path));
  if (m.source->gguf() != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::FromGguf(*m.source->gguf()));
  } else {
    CASCADE_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::FromPath(m.source->hf_dir()));
  }
  if (m.tokenizer->vocab_size() < m.source->config().vocab_size) {
    spdlog::warn("{}: tokenizer has {} tokens, the model's vocabulary {}", path,
                 m.tokenizer->vocab_size(), m.source->config().vocab_size);
  }
  if (!with_stage) return m;
  // Touch every page of the weights once so that the first token does not pay for disk
  // reads; on a terminal this shows progress.
  m.source->Prefetch();
  const uint64_t total = m.source->weight_bytes();
  ProgressBar bar("loading " + path, total);
  uint64_t done = 0;
  volatile uint8_t sink = 0;
  for (const TensorView& t : m.source->tensors()) {
    for (uint64_t off = 0; off < t.nbytes; off += 4096) sink = sink + t.data[off];
    done += t.nbytes;
    bar.Update(done);
  }
  bar.Finish();
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(device, options));
  CASCADE_ASSIGN_OR_RETURN(m.stage, Stage::Create(*m.source, options, std::move(backend)));
  spdlog::info("{}: {} ({} layers, dim {}, vocab {}), backend {}", path, m.source->config().arch,
               m.source->config().n_layers, m.source->config().dim, m.source->config().vocab_size,
               m.stage->backend().name());
  return m;
}

}  // namespace cascade::cli
