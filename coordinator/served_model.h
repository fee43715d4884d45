// ServedModel: the model a coordinator serves, opened once at start: its files (mapped,
// validated), its tokenizer, its chat template, the id clients use for it, and the profile
// the planner works from, and the draft model of `--speculative draft` when there is one.
// The coordinator never computes with the model's weights (workers do); only with the
// draft model's, to draft tokens.
//
// Contract: Open and OpenDraft fail with the reason (missing file, corrupt header, no
// tokenizer, a draft model of another vocabulary) before anything listens. Immutable
// after them; thread-safe.
#ifndef CASCADE_COORDINATOR_SERVED_MODEL_H_
#define CASCADE_COORDINATOR_SERVED_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cascade/v1/inference.pb.h"
#include "serving/chat_template.h"
#include "coordinator/planner.h"
#include "engine/draft_model.h"
#include "model/model_source.h"
#include "model/tokenizer.h"

namespace cascade {

class ServedModel {
 public:
  // `served_name` is the id clients use; "" means the model's own name, or else its file
  // or folder name without the extension. `chat_template` overrides the model's chat
  // format: a family name (ChatFormatName) or a file with a Jinja template of a known
  // family; an unknown name, an unreadable file or a template of no known family is an
  // error naming it.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Open(const std::string& path,
                                                           const std::string& served_name = "",
                                                           const std::string& chat_template = "");

  const std::string& path() const { return path_; }
  const std::string& id() const { return id_; }
  const ModelSource& source() const { return *source_; }
  const ModelConfig& config() const { return source_->config(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // Jinja source from GGUF tokenizer.chat_template or tokenizer_config.json; "" if none.
  const std::string& chat_template() const { return chat_template_; }
  // The format chat requests are rendered in (kUnknown: the model cannot chat).
  ChatFormat chat_format() const { return chat_format_; }
  const ModelProfile& profile() const { return profile_; }
  // Opens the draft model (engine/draft_model.h); called once, right after Open.
  absl::Status OpenDraft(const std::string& path, const DraftModelOptions& options);
  // The draft model; null without one.
  const DraftModel* draft() const { return draft_.get(); }
  // Id, architecture and sizes (the cluster fills in stages and readiness).
  v1::ModelInfo Info() const;

 private:
  ServedModel() = default;
  std::string path_, id_, chat_template_;
  ChatFormat chat_format_ = ChatFormat::kUnknown;
  std::unique_ptr<ModelSource> source_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelProfile profile_;
  std::unique_ptr<DraftModel> draft_;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_SERVED_MODEL_H_
