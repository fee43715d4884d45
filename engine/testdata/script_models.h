// Tiny random-weight models whose weights are a function of each tensor's name and element
// index, written as GGUF for tests: the float64 NumPy references beside this header
// (engine/testdata/*/make_reference.py) compute the same weights from the same formula and
// hold the logits and greedy ids each model must give. Test-only (gtest's TempDir and
// EXPECT report a file that cannot be written).
//
// With `tokenizer` set, the model carries that file's tokenizer.* keys (the bundled
// stories260K's 512-token vocabulary over a 128-token model: prompts given as ids below 128
// serve, text prompts may not), so that a server can load it.
#ifndef CASCADE_ENGINE_TESTDATA_SCRIPT_MODELS_H_
#define CASCADE_ENGINE_TESTDATA_SCRIPT_MODELS_H_

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"

namespace cascade::testing {

// Every tokenizer.* key of `from`.
inline void CopyTokenizer(const GgufFile& from, GgufWriter* w) {
  for (const auto& [key, value] : from.metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) w->SetValue(key, value);
  }
}

// mini-qwen3moe: not stored; its weights are a function of each tensor's name and element
// index (engine/testdata/qwen3moe/make_reference.py, which made the float64 NumPy
// reference from the same function; the sizes below are its).
inline uint64_t SplitMix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A tensor of the script's `tensor(name, shape, norm)`, GGUF order `ne`, its values in
// *keep (the writer refers to them until it writes the file).
inline void AddScriptTensor(GgufWriter& w, std::deque<std::vector<float>>* keep, const std::string& name,
                     std::vector<int64_t> ne, bool norm) {
  uint64_t seed = 0xCBF29CE484222325ull;
  for (unsigned char ch : name) seed = (seed ^ ch) * 0x100000001B3ull;
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  std::vector<float>& v = keep->emplace_back(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t z = SplitMix(seed + static_cast<uint64_t>(i));
    v[i] = norm ? 1.0f + static_cast<float>(static_cast<int64_t>(z >> 56) - 128) / 2048.0f
                : static_cast<float>(static_cast<int64_t>(z >> 54) - 512) / 4096.0f;
  }
  w.AddTensor(name, TensorType::kF32, std::move(ne),
              std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), n * 4));
}

// Writes `w` to TempDir()/<stem>_<pid>.gguf and returns the path (a failure is a test
// failure).
inline std::string WriteScriptModel(GgufWriter& w, const std::string& stem) {
  const std::string out = ::testing::TempDir() + "/" + stem + "_" + std::to_string(::getpid()) + ".gguf";
  absl::Status st = w.WriteFile(out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Writes mini-qwen3moe (once per process) and returns its path.
// Written once per process (and once more with a tokenizer).
inline std::string MiniQwen3Moe(const GgufFile* tokenizer = nullptr) {
  auto write = [](const GgufFile* tokenizer) {
    constexpr int64_t kVocab = 128, kDim = 64, kLayers = 2, kHeads = 4, kKvHeads = 2, kHd = 32;
    constexpr int64_t kExperts = 8, kUsed = 3, kExpertFfn = 32;
    GgufWriter w;
    std::deque<std::vector<float>> values;
    auto add = [&](const std::string& name, std::vector<int64_t> ne, bool norm) {
      AddScriptTensor(w, &values, name, std::move(ne), norm);
    };
    w.SetString("general.architecture", "qwen3moe");
    w.SetString("general.name", "mini-qwen3moe-random-f32");
    if (tokenizer != nullptr) CopyTokenizer(*tokenizer, &w);
    const std::pair<const char*, uint32_t> ints[] = {{"block_count", kLayers},
                                                     {"context_length", 256},
                                                     {"embedding_length", kDim},
                                                     {"feed_forward_length", 96},
                                                     {"attention.head_count", kHeads},
                                                     {"attention.head_count_kv", kKvHeads},
                                                     {"attention.key_length", kHd},
                                                     {"attention.value_length", kHd},
                                                     {"expert_count", kExperts},
                                                     {"expert_used_count", kUsed},
                                                     {"expert_feed_forward_length", kExpertFfn},
                                                     {"vocab_size", kVocab}};
    for (const auto& [key, value] : ints) w.SetUint32(std::string("qwen3moe.") + key, value);
    w.SetFloat32("qwen3moe.rope.freq_base", 1e6f);
    w.SetFloat32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6f);
    add("token_embd.weight", {kDim, kVocab}, false);
    for (int l = 0; l < kLayers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", {kDim}, true);
      add(p + "attn_q.weight", {kDim, kHeads * kHd}, false);
      add(p + "attn_k.weight", {kDim, kKvHeads * kHd}, false);
      add(p + "attn_v.weight", {kDim, kKvHeads * kHd}, false);
      add(p + "attn_q_norm.weight", {kHd}, true);
      add(p + "attn_k_norm.weight", {kHd}, true);
      add(p + "attn_output.weight", {kHeads * kHd, kDim}, false);
      add(p + "ffn_norm.weight", {kDim}, true);
      add(p + "ffn_gate_inp.weight", {kDim, kExperts}, false);
      add(p + "ffn_gate_exps.weight", {kDim, kExpertFfn, kExperts}, false);
      add(p + "ffn_up_exps.weight", {kDim, kExpertFfn, kExperts}, false);
      add(p + "ffn_down_exps.weight", {kExpertFfn, kDim, kExperts}, false);
    }
    add("output_norm.weight", {kDim}, true);
    add("output.weight", {kDim, kVocab}, false);
    return WriteScriptModel(w, tokenizer != nullptr ? "mini_qwen3moe_tok" : "mini_qwen3moe");
  };
  if (tokenizer != nullptr) {
    static const std::string with_tokenizer = write(tokenizer);
    return with_tokenizer;
  }
  static const std::string path = write(nullptr);
  return path;
}

// A mixture of experts whose head counts 2 divides, for tensor parallelism over 2 ranks
// (tests/mpi_launch_test.cc; ../shared's mini Mixtral and Qwen2-MoE have 3 heads): `arch`
// "llama" is Mixtral's layout (a router over 8 experts, 2 used, renormalised), "qwen2moe"
// Qwen2-MoE's (q/k/v biases, 3 of 8 experts as routed, a shared expert under a sigmoid
// gate). Weights by the formula above; compared with the single process only. Written once
// per process and arch.
inline std::string MiniMoeForTp(const std::string& arch, const GgufFile* tokenizer) {
  constexpr int64_t kVocab = 128, kDim = 64, kLayers = 2, kHeads = 4, kKvHeads = 2;
  constexpr int64_t kHd = kDim / kHeads, kExperts = 8, kExpertFfn = 32, kSharedFfn = 48;
  const bool qwen = arch == "qwen2moe";
  GgufWriter w;
  std::deque<std::vector<float>> values;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, bool norm) {
    AddScriptTensor(w, &values, name, std::move(ne), norm);
  };
  w.SetString("general.architecture", arch);
  w.SetString("general.name", "mini-" + arch + "-moe-tp-random-f32");
  if (tokenizer != nullptr) CopyTokenizer(*tokenizer, &w);
  const std::pair<const char*, uint32_t> ints[] = {{"block_count", kLayers},
                                                   {"context_length", 256},
                                                   {"embedding_length", kDim},
                                                   {"feed_forward_length", kExpertFfn},
                                                   {"attention.head_count", kHeads},
                                                   {"attention.head_count_kv", kKvHeads},
                                                   {"expert_count", kExperts},
                                                   {"expert_used_count", qwen ? 3u : 2u},
                                                   {"vocab_size", kVocab}};
  for (const auto& [key, value] : ints) w.SetUint32(arch + "." + key, value);
  if (qwen) {
    w.SetUint32("qwen2moe.expert_feed_forward_length", kExpertFfn);
    w.SetUint32("qwen2moe.expert_shared_feed_forward_length", kSharedFfn);
  }
  w.SetFloat32(arch + ".rope.freq_base", qwen ? 1e6f : 1e4f);
  w.SetFloat32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  add("token_embd.weight", {kDim, kVocab}, false);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {kDim}, true);
    add(p + "attn_q.weight", {kDim, kHeads * kHd}, false);
    add(p + "attn_k.weight", {kDim, kKvHeads * kHd}, false);
    add(p + "attn_v.weight", {kDim, kKvHeads * kHd}, false);
    if (qwen) {
      add(p + "attn_q.bias", {kHeads * kHd}, false);
      add(p + "attn_k.bias", {kKvHeads * kHd}, false);
      add(p + "attn_v.bias", {kKvHeads * kHd}, false);
    }
    add(p + "attn_output.weight", {kHeads * kHd, kDim}, false);
    add(p + "ffn_norm.weight", {kDim}, true);
    add(p + "ffn_gate_inp.weight", {kDim, kExperts}, false);
    add(p + "ffn_gate_exps.weight", {kDim, kExpertFfn, kExperts}, false);
    add(p + "ffn_up_exps.weight", {kDim, kExpertFfn, kExperts}, false);
    add(p + "ffn_down_exps.weight", {kExpertFfn, kDim, kExperts}, false);
    if (qwen) {
      add(p + "ffn_gate_inp_shexp.weight", {kDim}, false);
      add(p + "ffn_gate_shexp.weight", {kDim, kSharedFfn}, false);
      add(p + "ffn_up_shexp.weight", {kDim, kSharedFfn}, false);
      add(p + "ffn_down_shexp.weight", {kSharedFfn, kDim}, false);
    }
  }
  add("output_norm.weight", {kDim}, true);
  add("output.weight", {kDim, kVocab}, false);
  return WriteScriptModel(w, "mini_" + arch + "_moe_tp");
}

// mini-phi3-{long,short}: Phi-3 with LongRoPE over 24 of each head's 32 dimensions, weights
// as in MiniQwen3Moe (engine/testdata/phi3longrope/make_reference.py made the reference;
// the sizes and factors below are its). `context` 256 stretches the original 64 (long
// factors, attention factor from the file), 64 does not (short factors).
inline std::string MiniPhi3LongRope(int64_t context, const GgufFile* tokenizer = nullptr) {
  constexpr int64_t kVocab = 128, kDim = 64, kLayers = 2, kHeads = 4, kKvHeads = 2, kHd = 32;
  constexpr int64_t kRopeDim = 24, kFfn = 96, kOriginal = 64;
  GgufWriter w;
  std::deque<std::vector<float>> values;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, bool norm) {
    AddScriptTensor(w, &values, name, std::move(ne), norm);
  };
  w.SetString("general.architecture", "phi3");
  w.SetString("general.name", "mini-phi3-longrope-random-f32");
  if (tokenizer != nullptr) CopyTokenizer(*tokenizer, &w);
  const std::pair<const char*, uint32_t> ints[] = {
      {"block_count", kLayers},         {"context_length", static_cast<uint32_t>(context)},
      {"embedding_length", kDim},       {"feed_forward_length", kFfn},
      {"attention.head_count", kHeads}, {"attention.head_count_kv", kKvHeads},
      {"attention.key_length", kHd},    {"attention.value_length", kHd},
      {"rope.dimension_count", kRopeDim}, {"rope.scaling.original_context_length", kOriginal},
      {"vocab_size", kVocab}};
  for (const auto& [key, value] : ints) w.SetUint32(std::string("phi3.") + key, value);
  w.SetFloat32("phi3.rope.freq_base", 10000.0f);
  w.SetFloat32("phi3.attention.layer_norm_rms_epsilon", 1e-5f);
  // As llama.cpp's converter writes it: sqrt(1 + ln(context / original) / ln(original)).
  const double stretch = static_cast<double>(context) / kOriginal;
  w.SetFloat32("phi3.rope.scaling.attn_factor",
               stretch > 1 ? static_cast<float>(std::sqrt(1 + std::log(stretch) / std::log(64.0)))
                           : 1.0f);
  std::vector<float>& long_f = values.emplace_back();
  std::vector<float>& short_f = values.emplace_back();
  for (int i = 0; i < kRopeDim / 2; ++i) {
    long_f.push_back(1.0f + 0.5f * static_cast<float>(i));
    short_f.push_back(1.0f + 0.0625f * static_cast<float>(i));
  }
  for (auto [name, v] : {std::pair<const char*, std::vector<float>*>{"rope_factors_long.weight", &long_f},
                         {"rope_factors_short.weight", &short_f}}) {
    w.AddTensor(name, TensorType::kF32, {kRopeDim / 2},
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v->data()), v->size() * 4));
  }
  add("token_embd.weight", {kDim, kVocab}, false);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {kDim}, true);
    add(p + "attn_qkv.weight", {kDim, (kHeads + 2 * kKvHeads) * kHd}, false);
    add(p + "attn_output.weight", {kHeads * kHd, kDim}, false);
    add(p + "ffn_norm.weight", {kDim}, true);
    add(p + "ffn_up.weight", {kDim, 2 * kFfn}, false);
    add(p + "ffn_down.weight", {kFfn, kDim}, false);
  }
  add("output_norm.weight", {kDim}, true);
  add("output.weight", {kDim, kVocab}, false);
  return WriteScriptModel(w, "mini_phi3_longrope_" + std::to_string(context));
}

// mini-mistral-swa: GGUF "llama" with llama.attention.sliding_window 5, weights as in
// MiniQwen3Moe (engine/testdata/mistralswa/make_reference.py made the reference).
inline std::string MiniMistralSwa(const GgufFile* tokenizer = nullptr) {
  constexpr int64_t kVocab = 128, kDim = 64, kLayers = 2, kHeads = 4, kKvHeads = 2, kFfn = 96;
  constexpr int64_t kKv = kKvHeads * (kDim / kHeads);
  GgufWriter w;
  std::deque<std::vector<float>> values;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, bool norm) {
    AddScriptTensor(w, &values, name, std::move(ne), norm);
  };
  w.SetString("general.architecture", "llama");
  w.SetString("general.name", "mini-mistral-swa-random-f32");
  if (tokenizer != nullptr) CopyTokenizer(*tokenizer, &w);
  const std::pair<const char*, uint32_t> ints[] = {
      {"block_count", kLayers},         {"context_length", 128},
      {"embedding_length", kDim},       {"feed_forward_length", kFfn},
      {"attention.head_count", kHeads}, {"attention.head_count_kv", kKvHeads},
      {"attention.sliding_window", 5},  {"vocab_size", kVocab}};
  for (const auto& [key, value] : ints) w.SetUint32(std::string("llama.") + key, value);
  w.SetFloat32("llama.rope.freq_base", 10000.0f);
  w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  add("token_embd.weight", {kDim, kVocab}, false);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {kDim}, true);
    add(p + "attn_q.weight", {kDim, kDim}, false);
    add(p + "attn_k.weight", {kDim, kKv}, false);
    add(p + "attn_v.weight", {kDim, kKv}, false);
    add(p + "attn_output.weight", {kDim, kDim}, false);
    add(p + "ffn_norm.weight", {kDim}, true);
    add(p + "ffn_gate.weight", {kDim, kFfn}, false);
    add(p + "ffn_up.weight", {kDim, kFfn}, false);
    add(p + "ffn_down.weight", {kFfn, kDim}, false);
  }
  add("output_norm.weight", {kDim}, true);
  add("output.weight", {kDim, kVocab}, false);
  return WriteScriptModel(w, "mini_mistral_swa");
}

// mini-gemma3: six layers (five windowed over 4 positions with the local base, the sixth
// global with base 1e6 and linear scaling 8), weights as in MiniQwen3Moe, tied embeddings
// (engine/testdata/gemma3/make_reference.py made the reference).
inline std::string MiniGemma3(const GgufFile* tokenizer = nullptr) {
  constexpr int64_t kVocab = 128, kDim = 64, kLayers = 6, kHeads = 4, kKvHeads = 2, kHd = 32;
  constexpr int64_t kFfn = 96;
  GgufWriter w;
  std::deque<std::vector<float>> values;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, bool norm) {
    AddScriptTensor(w, &values, name, std::move(ne), norm);
  };
  w.SetString("general.architecture", "gemma3");
  w.SetString("general.name", "mini-gemma3-random-f32");
  if (tokenizer != nullptr) CopyTokenizer(*tokenizer, &w);
  const std::pair<const char*, uint32_t> ints[] = {
      {"block_count", kLayers},         {"context_length", 128},
      {"embedding_length", kDim},       {"feed_forward_length", kFfn},
      {"attention.head_count", kHeads}, {"attention.head_count_kv", kKvHeads},
      {"attention.key_length", kHd},    {"attention.value_length", kHd},
      {"attention.sliding_window", 4},  {"vocab_size", kVocab}};
  for (const auto& [key, value] : ints) w.SetUint32(std::string("gemma3.") + key, value);
  w.SetFloat32("gemma3.rope.freq_base", 1e6f);
  w.SetString("gemma3.rope.scaling.type", "linear");
  w.SetFloat32("gemma3.rope.scaling.factor", 8.0f);
  w.SetFloat32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
  add("token_embd.weight", {kDim, kVocab}, false);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {kDim}, true);
    add(p + "attn_q.weight", {kDim, kHeads * kHd}, false);
    add(p + "attn_k.weight", {kDim, kKvHeads * kHd}, false);
    add(p + "attn_v.weight", {kDim, kKvHeads * kHd}, false);
    add(p + "attn_q_norm.weight", {kHd}, true);
    add(p + "attn_k_norm.weight", {kHd}, true);
    add(p + "attn_output.weight", {kHeads * kHd, kDim}, false);
    add(p + "post_attention_norm.weight", {kDim}, true);
    add(p + "ffn_norm.weight", {kDim}, true);
    add(p + "ffn_gate.weight", {kDim, kFfn}, false);
    add(p + "ffn_up.weight", {kDim, kFfn}, false);
    add(p + "ffn_down.weight", {kFfn, kDim}, false);
    add(p + "post_ffw_norm.weight", {kDim}, true);
  }
  add("output_norm.weight", {kDim}, true);
  return WriteScriptModel(w, "mini_gemma3");
}


}  // namespace cascade::testing

#endif  // CASCADE_ENGINE_TESTDATA_SCRIPT_MODELS_H_
