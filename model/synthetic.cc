#include "model/synthetic.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "tensor/quant.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

const ModelShape kShapes[] = {
    {"tiny", "llama", 512, 64, 2, 4, 2, 256, 512, 10000.0, false},
    {"tiny-qwen2", "qwen2", 512, 64, 2, 4, 2, 256, 512, 1000000.0, true},
    {"llama-110m", "llama", 32000, 768, 12, 12, 12, 2048, 1024, 10000.0, false},
    {"tinyllama-1.1b", "llama", 32000, 2048, 22, 32, 4, 5632, 2048, 10000.0, false},
    {"smollm-135m", "llama", 49152, 576, 30, 9, 3, 1536, 2048, 10000.0, true},
    {"llama-2-7b", "llama", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.0, false},
    {"mistral-7b", "llama", 32000, 4096, 32, 32, 8, 14336, 32768, 1000000.0, false},
    {"llama-3-8b", "llama", 128256, 4096, 32, 32, 8, 14336, 8192, 500000.0, false},
    {"qwen2-0.5b", "qwen2", 151936, 896, 24, 14, 2, 4864, 32768, 1000000.0, true},
    {"qwen3-30b-a3b-4l", "qwen3moe", 32000, 2048, 4, 32, 4, 6144, 40960, 1000000.0, false,
     /*head_dim=*/128, /*n_experts=*/128, /*experts_used=*/8, /*expert_ffn=*/768},
};

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Deterministic N(mean, stddev) values for a tensor.
void FillNormal(const std::string& name, uint64_t seed, float mean, float stddev, float* out,
                int64_t n) {
  uint64_t state = seed ^ HashName(name);
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = (static_cast<double>(SplitMix(state) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(SplitMix(state) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(mean + stddev * r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(mean + stddev * r * std::sin(2 * M_PI * u2));
  }
}

}  // namespace

std::optional<ModelShape> FindModelShape(const std::string& name) {
  for (const auto& s : kShapes) {
    if (s.name == name) return s;
  }
  return std::nullopt;
}

std::vector<std::string> ModelShapeNames() {
  std::vector<std::string> names;
  for (const auto& s : kShapes) names.push_back(s.name);
  return names;
}

absl::Status WriteSyntheticModel(const ModelShape& shape, const SyntheticOptions& options,
                                 const std::string& path) {
  if (!IsComputeSupported(options.type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "make-model: type ", TensorTypeName(options.type), " is not one the kernels support"));
  }
  const int64_t head_dim = shape.HeadDim();
  const bool moe = shape.n_experts > 0;
  const bool qk_norm = shape.arch == "qwen3" || shape.arch == "qwen3moe";
  const int64_t block = Traits(options.type).block_elems;
  for (int64_t cols : {shape.dim, moe ? shape.expert_ffn : shape.ffn, shape.heads * head_dim}) {
    if (cols % block != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "make-model: shape ", shape.name, " has rows of ", cols, " elements, not a multiple of ",
          TensorTypeName(options.type), "'s block of ", block));
    }
  }
  GgufWriter w;
  const std::string a = shape.arch;
  w.SetString("general.architecture", a);
  w.SetString("general.name", absl::StrCat("cascade-random-", shape.name));
  w.SetString("general.description",
              absl::StrCat("Random weights (NOT trained), shape ", shape.name, ", seed ",
                           options.seed, ", written by cascade make-model"));
  w.SetUint32(a + ".context_length", static_cast<uint32_t>(shape.context));
  w.SetUint32(a + ".embedding_length", static_cast<uint32_t>(shape.dim));
  w.SetUint32(a + ".block_count", static_cast<uint32_t>(shape.layers));
  w.SetUint32(a + ".feed_forward_length", static_cast<uint32_t>(shape.ffn));
  w.SetUint32(a + ".attention.head_count", static_cast<uint32_t>(shape.heads));
  w.SetUint32(a + ".attention.head_count_kv", static_cast<uint32_t>(shape.kv_heads));
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetUint32(a + ".rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.SetFloat32(a + ".rope.freq_base", static_cast<float>(shape.rope_theta));
  w.SetUint32(a + ".vocab_size", static_cast<uint32_t>(shape.vocab));
  w.SetUint32(a + ".attention.key_length", static_cast<uint32_t>(head_dim));
  w.SetUint32(a + ".attention.value_length", static_cast<uint32_t>(head_dim));
  if (moe) {
    w.SetUint32(a + ".expert_count", static_cast<uint32_t>(shape.n_experts));
    w.SetUint32(a + ".expert_used_count", static_cast<uint32_t>(shape.experts_used));
    w.SetUint32(a + ".expert_feed_forward_length", static_cast<uint32_t>(shape.expert_ffn));
  }

  std::unique_ptr<GgufFile> vocab;
  if (!options.tokenizer_gguf.empty()) {
    CASCADE_ASSIGN_OR_RETURN(vocab, GgufFile::Open(options.tokenizer_gguf));
    CASCADE_ASSIGN_OR_RETURN(const GgufArray* tokens, vocab->GetArray("tokenizer.ggml.tokens"));
    if (static_cast<int64_t>(tokens->size) != shape.vocab) {
      return absl::InvalidArgumentError(absl::StrCat(options.tokenizer_gguf, ": has ", tokens->size,
                                                     " tokens but shape ", shape.name,
                                                     " needs a vocabulary of ", shape.vocab));
    }
    for (const auto& [key, value] : vocab->metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) w.SetValue(key, value);
    }
  }

  const uint64_t seed = options.seed;
  // rows x cols, or `stack` such matrices one after another (experts: GGUF ne {cols, rows,
  // stack}).
  // The router stays F32, as llama.cpp's quantizer leaves it.
  auto matrix = [&](const std::string& name, int64_t cols, int64_t matrix_rows,
                    int64_t stack = 1, bool f32 = false) {
    const int64_t rows = matrix_rows * stack;
    std::vector<int64_t> ne = {cols, matrix_rows};
    if (stack > 1) ne.push_back(stack);
    const TensorType type = f32 ? TensorType::kF32 : options.type;
    w.AddTensor(
        name, type, std::move(ne), [name, cols, rows, seed, type](std::vector<uint8_t>* out) {
          uint64_t row_bytes = 0;
          if (!RowBytes(type, cols, &row_bytes)) {
            return absl::InternalError(absl::StrCat(name, ": bad row length ", cols));
          }
          out->resize(row_bytes * rows);
          std::vector<float> row(cols);
          for (int64_t r = 0; r < rows; ++r) {
            FillNormal(absl::StrCat(name, "#", r), seed, 0.0f, 0.02f, row.data(), cols);
            if (!QuantizeRow(type, row.data(), cols, out->data() + r * row_bytes)) {
              return absl::InternalError(absl::StrCat("cannot quantize to ", TensorTypeName(type)));
            }
          }
          return absl::OkStatus();
        });
  };
  auto norm = [&](const std::string& name, int64_t n) {
    w.AddTensor(name, TensorType::kF32, {n}, [name, n, seed](std::vector<uint8_t>* out) {
      out->resize(n * sizeof(float));
      FillNormal(name, seed, 1.0f, 0.05f, reinterpret_cast<float*>(out->data()), n);
      return absl::OkStatus();
    });
  };
  auto bias = [&](const std::string& name, int64_t n) {
    w.AddTensor(name, TensorType::kF32, {n}, [name, n, seed](std::vector<uint8_t>* out) {
      out->resize(n * sizeof(float));
      FillNormal(name, seed, 0.0f, 0.02f, reinterpret_cast<float*>(out->data()), n);
      return absl::OkStatus();
    });
  };
  const int64_t q_dim = shape.heads * head_dim, kv_dim = shape.kv_heads * head_dim;
  matrix("token_embd.weight", shape.dim, shape.vocab);
  for (int64_t l = 0; l < shape.layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    norm(p + "attn_norm.weight", shape.dim);
    matrix(p + "attn_q.weight", shape.dim, q_dim);
    matrix(p + "attn_k.weight", shape.dim, kv_dim);
    matrix(p + "attn_v.weight", shape.dim, kv_dim);
    if (shape.arch == "qwen2") {
      bias(p + "attn_q.bias", q_dim);
      bias(p + "attn_k.bias", kv_dim);
      bias(p + "attn_v.bias", kv_dim);
    }
    if (qk_norm) {
      norm(p + "attn_q_norm.weight", head_dim);
      norm(p + "attn_k_norm.weight", head_dim);
    }
    matrix(p + "attn_output.weight", q_dim, shape.dim);
    norm(p + "ffn_norm.weight", shape.dim);
    if (moe) {
      const int64_t E = shape.n_experts, f = shape.expert_ffn;
      matrix(p + "ffn_gate_inp.weight", shape.dim, E, 1, /*f32=*/true);
      matrix(p + "ffn_gate_exps.weight", shape.dim, f, E);
      matrix(p + "ffn_up_exps.weight", shape.dim, f, E);
      matrix(p + "ffn_down_exps.weight", f, shape.dim, E);
      continue;
    }
    matrix(p + "ffn_gate.weight", shape.dim, shape.ffn);
    matrix(p + "ffn_up.weight", shape.dim, shape.ffn);
    matrix(p + "ffn_down.weight", shape.ffn, shape.dim);
  }
  norm("output_norm.weight", shape.dim);
  if (!shape.tied) matrix("output.weight", shape.dim, shape.vocab);
  return w.WriteFile(path);
}

}  // namespace cascade
