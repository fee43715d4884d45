#include "tools/model_loader.h"

#include <thread>

#include "kernels/make_backend.h"
#include "util/logging.h"
#include "util/progress.h"
#include "util/status_macros.h"

namespace cascade::cli {

int DefaultThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const StageOptions& options,
                                      bool with_stage, const DeviceSpec& device) {
  LoadedModel m;
  CASCADE_ASSIGN_OR_RETURN(m.source, ModelSource::Open(path));
  CASCADE_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::FromSource(*m.source));
  if (m.tokenizer->vocab_size() < m.source->config().vocab_size) {
    spdlog::warn("{}: tokenizer has {} tokens, the model's vocabulary {}", path,
                 m.tokenizer->vocab_size(), m.source->config().vocab_size);
  }
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
  if (!with_stage) return m;
  CASCADE_ASSIGN_OR_RETURN(
      std::unique_ptr<Backend> backend,
      MakeBackend(device, {.threads = options.threads,
                           .quantized_activations = options.quantized_activations}));
  CASCADE_ASSIGN_OR_RETURN(m.stage, Stage::Create(*m.source, options, std::move(backend)));
  spdlog::info("{}: {} ({} layers, dim {}, vocab {}), backend {}", path, m.source->config().arch,
               m.source->config().n_layers, m.source->config().dim, m.source->config().vocab_size,
               m.stage->backend().name());
  return m;
}

}  // namespace cascade::cli
