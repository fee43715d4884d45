#include "coordinator/served_model.h"


#include "nlohmann/json.hpp"
#include "util/logging.h"
#include "util/mapped_file.h"

namespace cascade {
namespace {

std::string ReadChatTemplate(const ModelSource& source) {
  if (source.gguf() != nullptr) {
    return source.gguf()->GetString("tokenizer.chat_template").value_or("");
  }
  auto text = ReadFileToString(source.hf_dir() + "/tokenizer_config.json", 64 << 20);
  if (!text.ok()) return "";
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  auto it = j.find("chat_template");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// "/models/TinyLlama-1.1B-q8_0.gguf" -> "TinyLlama-1.1B-q8_0"; "/models/Qwen2-0.5B/" ->
// "Qwen2-0.5B".
std::string NameFromPath(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::string base = path.substr(path.rfind('/') + 1);
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".gguf") == 0) base.resize(base.size() - 5);
  return base.empty() ? path : base;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Open(const std::string& path,
                                                               const std::string& served_name,
                                                               const std::string& chat_template) {
  std::unique_ptr<ServedModel> m(new ServedModel());
  m->path_ = path;
  auto src = ModelSource::Open(path);
  if (!src.ok()) return src.status();
  m->source_ = std::move(*src);
  auto tok = Tokenizer::FromSource(*m->source_);
  if (!tok.ok()) return tok.status();
  m->tokenizer_ = std::move(*tok);
  if (m->tokenizer_->vocab_size() < m->source_->config().vocab_size) {
    spdlog::warn("{}: tokenizer has {} tokens, the model's vocabulary {}", path,
                 m->tokenizer_->vocab_size(), m->source_->config().vocab_size);
  }
  m->chat_template_ = ReadChatTemplate(*m->source_);
  m->chat_format_ = DetectChatFormat(m->chat_template_);
  if (!chat_template.empty()) {
    auto format = ChatFormatFromName(chat_template);
    if (!format.ok()) {
      absl::StatusOr<std::string> text = ReadFileToString(chat_template, 1 << 20);
      if (!text.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--chat-template '", chat_template,
            "' is neither a chat format (", KnownChatFormats(),
            ") nor a readable file of at most 1 MiB: ", text.status().message()));
      }
      m->chat_template_ = *std::move(text);
      format = DetectChatFormat(m->chat_template_);
      if (*format == ChatFormat::kUnknown) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--chat-template ", chat_template,
            ": the template is of no family Cascade renders (", KnownChatFormats(), ")"));
      }
    }
    m->chat_format_ = *format;
  }
  m->id_ = !served_name.empty()                  ? served_name
           : !m->source_->config().name.empty() ? m->source_->config().name
                                                 : NameFromPath(path);
  m->profile_ = ProfileFromSource(*m->source_);
  return m;
}

absl::Status ServedModel::OpenDraft(const std::string& path, const DraftModelOptions& options) {
  auto draft = DraftModel::Open(path, *tokenizer_, options);
  if (!draft.ok()) return draft.status();
  draft_ = std::move(*draft);
  spdlog::info("draft model {}: {} layers, dim {}", path, draft_->config().n_layers,
               draft_->config().dim);
  return absl::OkStatus();
}

v1::ModelInfo ServedModel::Info() const {
  v1::ModelInfo info;
  const ModelConfig& c = config();
  info.set_id(id_);
  info.set_architecture(c.arch);
  info.set_parameters(c.ParameterCount());
  info.set_context_length(static_cast<int32_t>(c.context_length));
  info.set_vocab_size(static_cast<int32_t>(c.vocab_size));
  info.set_layers(static_cast<int32_t>(c.n_layers));
  return info;
}

}  // namespace cascade
