#include "model/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/model_source.h"
#include "model/tokenizer/loaders.h"
#include "model/tokenizer/pipeline.h"
#include "model/tokenizer/text_util.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"
#include "util/status_macros.h"
#include "util/utf8.h"

namespace cascade {
namespace {

constexpr uint64_t kMaxJsonBytes = uint64_t{1} << 30;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// eos_token_id (a number or a list of numbers) from a model folder's config files.
std::vector<int64_t> ConfigEosIds(const std::string& path) {
  std::vector<int64_t> ids;
  if (!IsFile(path)) return ids;
  auto text = ReadFileToString(path, 16 << 20);
  if (!text.ok()) return ids;
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return ids;
  auto it = j.find("eos_token_id");
  if (it == j.end()) return ids;
  if (it->is_number_integer()) ids.push_back(it->get<int64_t>());
  if (it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_number_integer()) ids.push_back(v.get<int64_t>());
    }
  }
  return ids;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  CASCADE_ASSIGN_OR_RETURN(tok::VocabSpec spec, tok::LoadGgufVocab(file));
  return tok::PipelineTokenizer::Create(std::move(spec));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromHfJson(const std::string& tokenizer_path,
                                                                 const std::string& config_path) {
  CASCADE_ASSIGN_OR_RETURN(const std::string json, ReadFileToString(tokenizer_path, kMaxJsonBytes));
  std::string config;
  if (!config_path.empty()) {
    CASCADE_ASSIGN_OR_RETURN(config, ReadFileToString(config_path, kMaxJsonBytes));
  }
  CASCADE_ASSIGN_OR_RETURN(tok::VocabSpec spec,
                           tok::LoadHfVocab(tokenizer_path, json, config_path, config));
  return tok::PipelineTokenizer::Create(std::move(spec));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSource(const ModelSource& source) {
  if (source.gguf() != nullptr) return FromGguf(*source.gguf());
  return FromPath(source.hf_dir());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromPath(const std::string& path) {
  if (!IsDirectory(path)) {
    CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
    return FromGguf(*file);
  }
  const std::string json = path + "/tokenizer.json";
  if (!IsFile(json)) {
    return absl::NotFoundError(absl::StrCat(path, ": no tokenizer.json in this folder"));
  }
  const std::string config = path + "/tokenizer_config.json";
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok,
                           FromHfJson(json, IsFile(config) ? config : ""));
  // Models list extra end-of-generation ids in their config files.
  for (const char* name : {"/generation_config.json", "/config.json"}) {
    for (int64_t id : ConfigEosIds(path + name)) {
      if (id >= 0 && id < tok->vocab_size() &&
          std::find(tok->eog_ids_.begin(), tok->eog_ids_.end(), id) == tok->eog_ids_.end()) {
        tok->eog_ids_.push_back(static_cast<int32_t>(id));
      }
    }
  }
  std::sort(tok->eog_ids_.begin(), tok->eog_ids_.end());
  return tok;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    std::string piece = TokenToPiece(id, render_special);
    if (piece.empty()) continue;
    if (first && strip_leading_space_ && piece[0] == ' ') piece.erase(0, 1);
    first = false;
    bytes += piece;
  }
  return tok::SanitizeUtf8(bytes);
}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer,
                                           std::span<const int32_t> prev_ids)
    : tok_(tokenizer) {
  for (int32_t id : prev_ids) {
    if (!tok_.TokenToPiece(id, false).empty()) {
      first_ = false;
      break;
    }
  }
}

std::string StreamingDetokenizer::Push(int32_t id) {
  std::string piece = tok_.TokenToPiece(id, false);
  if (piece.empty()) return "";
  if (first_) {
    first_ = false;
    if (tok_.strips_leading_space() && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  const size_t keep = IncompleteUtf8Suffix(pending_);
  std::string out = tok::SanitizeUtf8(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out = tok::SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace cascade
