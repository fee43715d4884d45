#include "model/model_source.h"

#include <sys/stat.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/arch.h"
#include "nlohmann/json.hpp"
#include "util/logging.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::string CanonicalTensorName(
    std::string_view hf_name,
    std::span<const std::pair<std::string_view, std::string_view>> leaf_overrides) {
  static const std::pair<std::string_view, std::string_view> kTop[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  for (const auto& [hf, canon] : kTop) {
    if (hf_name == hf) return std::string(canon);
  }
  constexpr std::string_view kLayers = "model.layers.";
  if (hf_name.substr(0, kLayers.size()) != kLayers) return "";
  std::string_view rest = hf_name.substr(kLayers.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return "";
  int layer;
  if (!absl::SimpleAtoi(absl::string_view(rest.data(), dot), &layer) || layer < 0) return "";
  const std::string_view leaf = rest.substr(dot + 1);
  static const std::pair<std::string_view, std::string_view> kLeaf[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},  // Qwen3
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"self_attn.qkv_proj.weight", "attn_qkv.weight"},  // Phi-3: q, k, v rows
      {"mlp.gate_up_proj.weight", "ffn_up.weight"},      // Phi-3: gate rows, then up
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  auto lookup = [&](std::span<const std::pair<std::string_view, std::string_view>> table) {
    for (const auto& [hf, canon] : table) {
      if (leaf == hf) return absl::StrCat("blk.", layer, ".", std::string(canon));
    }
    return std::string();
  };
  if (std::string canon = lookup(leaf_overrides); !canon.empty()) return canon;
  return lookup(kLeaf);
}

absl::StatusOr<std::unique_ptr<ModelSource>> ModelSource::Open(const std::string& path) {
  std::unique_ptr<ModelSource> src(new ModelSource());
  src->path_ = path;
  if (IsDirectory(path)) {
    CASCADE_RETURN_IF_ERROR(src->OpenHf(path));
  } else {
    CASCADE_RETURN_IF_ERROR(src->OpenGguf(path));
  }
  CASCADE_RETURN_IF_ERROR(src->config_.Validate(path));
  return src;
}

absl::Status ModelSource::AddTensor(TensorView view) {
  // Kernels read elements with natural alignment; realign the rare misaligned tensor.
  const uint64_t elem = std::min<uint64_t>(Traits(view.type).block_bytes, 4);
  if (reinterpret_cast<uintptr_t>(view.data) % elem != 0) {
    auto copy = std::make_unique_for_overwrite<uint8_t[]>(view.nbytes);
    std::memcpy(copy.get(), view.data, view.nbytes);
    view.data = copy.get();
    owned_.push_back(std::move(copy));
  }
  if (index_.count(view.name) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", view.name, "' appears twice"));
  }
  index_.emplace(view.name, tensors_.size());
  tensors_.push_back(std::move(view));
  return absl::OkStatus();
}

absl::Status ModelSource::OpenGguf(const std::string& path) {
  CASCADE_ASSIGN_OR_RETURN(gguf_, GgufFile::Open(path));
  CASCADE_ASSIGN_OR_RETURN(std::string arch, gguf_->GetString("general.architecture"));
  const ArchSpec* spec = FindArchByGgufName(arch);
  if (spec == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": architecture '", arch,
                     "' is not supported (supported: ", SupportedArchitectures(), ")"));
  }
  CASCADE_RETURN_IF_ERROR(spec->from_gguf(*gguf_, &config_));
  for (const auto& t : gguf_->tensors()) {
    TensorView v;
    v.name = t.name;
    v.type = t.type;
    v.n_dims = t.n_dims;
    std::copy(t.ne, t.ne + 4, v.ne);
    v.data = t.data;
    v.nbytes = t.nbytes;
    CASCADE_RETURN_IF_ERROR(AddTensor(std::move(v)));
  }
  return absl::OkStatus();
}

absl::Status ModelSource::OpenHf(const std::string& dir) {
  hf_dir_ = dir;
  const std::string config_path = dir + "/config.json";
  CASCADE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path, 16 << 20));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": not a JSON object"));
  }
  const ArchSpec* spec = nullptr;
  std::string hf_class;
  auto archs = j.find("architectures");
  if (archs != j.end() && archs->is_array()) {
    for (const auto& a : *archs) {
      if (!a.is_string()) continue;
      hf_class = a.get<std::string>();
      if ((spec = FindArchByHfClass(hf_class)) != nullptr) break;
    }
  }
  if (spec == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(config_path, ": architecture '", hf_class.empty() ? "(none listed)" : hf_class,
                     "' is not supported (supported: ", SupportedArchitectures(), ")"));
  }
  CASCADE_RETURN_IF_ERROR(spec->from_hf(j, config_path, &config_));
  auto name = j.find("_name_or_path");
  config_.name = name != j.end() && name->is_string() ? name->get<std::string>() : dir;

  std::vector<std::string> files;
  if (FileExists(dir + "/model.safetensors")) {
    files.push_back(dir + "/model.safetensors");
  } else if (FileExists(dir + "/model.safetensors.index.json")) {
    CASCADE_ASSIGN_OR_RETURN(auto shards,
                             ReadSafetensorsIndex(dir + "/model.safetensors.index.json"));
    for (auto& s : shards) files.push_back(dir + "/" + s);
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no model.safetensors or model.safetensors.index.json in this folder"));
  }
  for (const auto& file : files) {
    CASCADE_ASSIGN_OR_RETURN(auto shard, SafetensorsFile::Open(file));
    for (const auto& t : shard->tensors()) {
      std::string canon = CanonicalTensorName(t.name, spec->hf_leaf_names);
      if (canon.empty()) {
        spdlog::debug("{}: ignoring tensor '{}'", file, t.name);
        continue;
      }
      if (!t.type || !(t.type == TensorType::kF32 || t.type == TensorType::kF16 ||
                       t.type == TensorType::kBF16)) {
        return absl::UnimplementedError(absl::StrCat(file, ": tensor '", t.name, "' has dtype ",
                                                     t.dtype,
                                                     " (F32, F16 and BF16 are supported)"));
      }
      if (t.shape.empty() || t.shape.size() > 4) {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ": tensor '", t.name, "' has ", t.shape.size(), " dimensions"));
      }
      TensorView v;
      v.name = canon;
      v.type = *t.type;
      v.n_dims = static_cast<int>(t.shape.size());
      for (int d = 0; d < v.n_dims; ++d) {
        v.ne[d] = t.shape[t.shape.size() - 1 - d];  // PyTorch order is outermost first
        if (v.ne[d] == 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(file, ": tensor '", t.name, "' has an empty dimension"));
        }
      }
      v.data = t.data;
      v.nbytes = t.nbytes;
      CASCADE_RETURN_IF_ERROR(AddTensor(std::move(v)));
    }
    shards_.push_back(std::move(shard));
  }
  config_.tied_embeddings = Find("output.weight") == nullptr;
  return absl::OkStatus();
}

const TensorView* ModelSource::Find(std::string_view canonical_name) const {
  auto it = index_.find(canonical_name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t ModelSource::weight_bytes() const {
  uint64_t total = 0;
  for (const auto& t : tensors_) total += t.nbytes;
  return total;
}

void ModelSource::Prefetch() const {
  if (gguf_) gguf_->Prefetch();
}

}  // namespace cascade
