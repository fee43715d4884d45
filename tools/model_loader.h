// Loading a model for the command-line tools: open the file or folder, read its
// tokenizer, and page the weights in with a progress bar on a terminal.
//
// Contract: errors are returned, not printed. The returned object owns everything; the
// Stage refers to the ModelSource inside it.
#ifndef CASCADE_TOOLS_MODEL_LOADER_H_
#define CASCADE_TOOLS_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/stage.h"
#include "model/model_source.h"
#include "model/tokenizer.h"

namespace cascade::cli {

struct LoadedModel {
  std::unique_ptr<ModelSource> source;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Stage> stage;
};

// Opens the model and its tokenizer; with `with_stage`, also pages in the weights and
// builds a Stage over all layers on `device`: "auto" (a GPU when one is usable, else the
// CPU, saying why), "cpu", or "cuda" / "cuda:N".
absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const StageOptions& options,
                                      bool with_stage, const std::string& device = "auto");

// The backend for a --device value (see LoadModel).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device,
                                                     const StageOptions& options);

// Number of hardware threads (at least 1).
int DefaultThreads();

}  // namespace cascade::cli

#endif  // CASCADE_TOOLS_MODEL_LOADER_H_
