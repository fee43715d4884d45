// `cascade logits`: teacher-forced logits of every position of an id sequence, as .npy.
#include <iostream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tools/commands.h"
#include "tools/model_loader.h"
#include "util/npy.h"

namespace cascade::cli {
namespace {

struct LogitsFlags {
  std::string model;
  std::string ids;
  std::string out;
  bool exact = false;
  int threads = 0;
  std::string device = "auto";
};

int RunLogits(const LogitsFlags& f) {
  std::vector<int32_t> ids;
  for (absl::string_view w : absl::StrSplit(f.ids, absl::ByAnyChar(" ,\t\n"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(w, &id)) {
      std::cerr << "cascade logits: '" << w << "' in --ids is not an integer\n";
      return 1;
    }
    ids.push_back(id);
  }
  if (ids.empty()) {
    std::cerr << "cascade logits: --ids is empty\n";
    return 1;
  }
  StageOptions so;
  so.threads = f.threads > 0 ? f.threads : DefaultThreads();
  so.quantized_activations = !f.exact;
  so.max_batch_tokens = static_cast<int64_t>(ids.size());
  auto device = ParseDevice(f.device);
  if (!device.ok()) {
    std::cerr << "cascade logits: --device: " << device.status().message() << "\n";
    return 2;
  }
  auto model = LoadModel(f.model, so, true, *device);
  if (!model.ok()) {
    std::cerr << "cascade logits: " << model.status().message() << "\n";
    return 1;
  }
  Batch batch;
  for (size_t i = 0; i < ids.size(); ++i)
    batch.push_back({ids[i], 0, static_cast<int32_t>(i), true});
  std::vector<float> logits;
  absl::Status st = model->stage->Forward(batch, {}, &logits);
  if (!st.ok()) {
    std::cerr << "cascade logits: " << st.message() << "\n";
    return 1;
  }
  const int64_t shape[2] = {static_cast<int64_t>(ids.size()), model->source->config().vocab_size};
  st = WriteNpyF32(f.out, shape, logits);
  if (!st.ok()) {
    std::cerr << "cascade logits: " << st.message() << "\n";
    return 1;
  }
  std::cerr << "wrote " << f.out << " [" << shape[0] << ", " << shape[1] << "]\n";
  return 0;
}

}  // namespace

void AddLogits(CLI::App& app, Action* action) {
  auto f = std::make_shared<LogitsFlags>();
  CLI::App* cmd = app.add_subcommand(
      "logits", "Write the logits of every position of an id sequence as float32 .npy");
  cmd->add_option("--model,-m", f->model, "GGUF file or Hugging Face folder")->required();
  cmd->add_option("--ids", f->ids, "Token ids, e.g. \"1 2 3\"")->required();
  cmd->add_option("--out,-o", f->out, "Output .npy file")->required();
  cmd->add_flag("--exact", f->exact,
                "Compute quantized weights in F32 instead of quantizing activations");
  cmd->add_option("--threads", f->threads, "Compute threads (default: all cores)");
  cmd->add_option("--device", f->device, "auto (GPU if usable, else CPU), cpu, cuda or cuda:N");
  cmd->callback([f, action] { *action = [f] { return RunLogits(*f); }; });
}

}  // namespace cascade::cli
