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
#include "tensor/device.h"

namespace cascade::cli {

struct LoadedModel {
  std::unique_ptr<ModelSource> source;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Stage> stage;  // only when asked for
};

// Opens the model and its tokenizer and pages its weights in (a progress bar on a
// terminal); with `with_stage`, also builds a Stage over all layers on `device`.
absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const StageOptions& options,
                                      bool with_stage, const DeviceSpec& device);

// Number of hardware threads (at least 1).
int DefaultThreads();

}  // namespace cascade::cli

#endif  // CASCADE_TOOLS_MODEL_LOADER_H_
