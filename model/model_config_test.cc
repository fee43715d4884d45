#include "model/model_config.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/arch.h"
#include "nlohmann/json.hpp"

namespace cascade {
namespace {

ModelConfig Llama31() {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_dim = 128;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_context = 8192;
  return c;
}

// Llama 3 RoPE frequency scaling, computed here from the published definition (Meta's
// llama3 reference `apply_scaling`, also transformers' `_compute_llama3_parameters`):
//   base freq_i = 1 / theta^(2i / d)
//   wavelen = 2 pi / freq
//   wavelen < orig / high_freq_factor  -> freq                      (high frequencies kept)
//   wavelen > orig / low_freq_factor   -> freq / factor             (low frequencies divided)
//   otherwise smooth = (orig / wavelen - low) / (high - low)
//                    freq = (1 - smooth) * freq / factor + smooth * freq
struct Llama3Params {
  double theta, factor, low, high, orig;
  int64_t dim;
};

enum class Band { kKept, kDivided, kBlended };

std::vector<double> PublishedLlama3Frequencies(const Llama3Params& p, std::vector<Band>* bands) {
  std::vector<double> out;
  const double low_freq_wavelen = p.orig / p.low;
  const double high_freq_wavelen = p.orig / p.high;
  for (int64_t i = 0; i < p.dim; i += 2) {
    const double freq = 1.0 / std::pow(p.theta, static_cast<double>(i) / p.dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_freq_wavelen) {
      out.push_back(freq);
      bands->push_back(Band::kKept);
    } else if (wavelen > low_freq_wavelen) {
      out.push_back(freq / p.factor);
      bands->push_back(Band::kDivided);
    } else {
      const double smooth = (p.orig / wavelen - p.low) / (p.high - p.low);
      out.push_back((1 - smooth) * freq / p.factor + smooth * freq);
      bands->push_back(Band::kBlended);
    }
  }
  return out;
}

TEST(RopeFrequencies, Llama3ScalingMatchesThePublishedFormulaInEveryBand) {
  // Llama 3.1 (factor 8, 1, 4, 8192, theta 5e5, head dim 128) and Llama 3.2 1B/3B (factor 32).
  for (const Llama3Params& p : {Llama3Params{500000.0, 8.0, 1.0, 4.0, 8192, 128},
                                Llama3Params{500000.0, 32.0, 1.0, 4.0, 8192, 64},
                                Llama3Params{10000.0, 4.0, 2.0, 8.0, 2048, 96}}) {
    ModelConfig c = Llama31();
    c.head_dim = p.dim;
    c.rope_dim = p.dim;
    c.rope_theta = p.theta;
    c.rope_scaling.factor = p.factor;
    c.rope_scaling.low_freq_factor = p.low;
    c.rope_scaling.high_freq_factor = p.high;
    c.rope_scaling.original_context = static_cast<int64_t>(p.orig);
    std::vector<Band> bands;
    const std::vector<double> want = PublishedLlama3Frequencies(p, &bands);
    const std::vector<float> got = c.RopeFrequencies();
    ASSERT_EQ(got.size(), want.size());
    int count[3] = {0, 0, 0};
    for (size_t i = 0; i < got.size(); ++i) {
      ++count[static_cast<int>(bands[i])];
      EXPECT_NEAR(got[i], want[i], 1e-6 * want[i])
          << "factor " << p.factor << ", frequency " << i << " (band " << static_cast<int>(bands[i])
          << ")";
    }
    // Each set of parameters has frequencies in all three bands.
    EXPECT_GT(count[0], 0) << p.factor;
    EXPECT_GT(count[1], 0) << p.factor;
    EXPECT_GT(count[2], 0) << p.factor;
  }
}

TEST(RopeFrequencies, LinearScalingAndFactorsTensor) {
  ModelConfig c;
  c.rope_dim = 8;
  c.rope_theta = 10000;
  const auto base = c.RopeFrequencies();
  EXPECT_FLOAT_EQ(base[0], 1.0f);
  EXPECT_NEAR(base[1], std::pow(10000.0, -2.0 / 8), 1e-7);
  c.rope_scaling.type = RopeScalingType::kLinear;
  c.rope_scaling.factor = 4;
  EXPECT_FLOAT_EQ(c.RopeFrequencies()[1], base[1] / 4);
  c.rope_freq_factors = {1, 2, 4, 8};  // a GGUF rope_freqs tensor wins over the type
  EXPECT_FLOAT_EQ(c.RopeFrequencies()[3], base[3] / 8);
}

TEST(HfConfig, ReadsQwen2AndLlama3Scaling) {
  nlohmann::json qwen = {{"architectures", {"Qwen2ForCausalLM"}},
                         {"hidden_size", 896},
                         {"intermediate_size", 4864},
                         {"num_attention_heads", 14},
                         {"num_key_value_heads", 2},
                         {"num_hidden_layers", 24},
                         {"vocab_size", 151936},
                         {"max_position_embeddings", 32768},
                         {"rope_theta", 1000000.0},
                         {"rms_norm_eps", 1e-6},
                         {"tie_word_embeddings", true}};
  ModelConfig c;
  ASSERT_TRUE(Qwen2Arch().from_hf(qwen, "q/config.json", &c).ok());
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalves);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.Validate("q").ok());
  nlohmann::json llama = qwen;
  llama["architectures"] = {"LlamaForCausalLM"};
  llama["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", 8.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192}};
  ModelConfig l;
  ASSERT_TRUE(LlamaArch().from_hf(llama, "l/config.json", &l).ok());
  EXPECT_EQ(l.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(l.rope_scaling.original_context, 8192);
  EXPECT_FALSE(l.qkv_bias);
  // Qwen3: its own head size (not hidden / heads), q/k norms, no biases.
  nlohmann::json qwen3 = qwen;
  qwen3["head_dim"] = 128;
  ModelConfig q3;
  ASSERT_TRUE(Qwen3Arch().from_hf(qwen3, "q3/config.json", &q3).ok());
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_EQ(q3.rope_layout, RopeLayout::kHalves);
  EXPECT_TRUE(q3.Validate("q3").ok());
  // Phi-3: fused projections, a window on every layer.
  nlohmann::json phi3 = qwen;
  phi3["sliding_window"] = 2047;
  ModelConfig p3;
  ASSERT_TRUE(Phi3Arch().from_hf(phi3, "p3/config.json", &p3).ok());
  EXPECT_TRUE(p3.fused_projections);
  EXPECT_EQ(p3.WindowOf(0), 2047);
  EXPECT_EQ(p3.WindowOf(5), 2047);
  // LongRoPE (Phi-3-128k, Phi-3.5): factors for half the rotated dimensions, the original
  // context beside them, the attention factor from how far the context was stretched.
  phi3["rope_scaling"] = {{"type", "longrope"},
                          {"long_factor", std::vector<double>(32, 4.0)},
                          {"short_factor", std::vector<double>(32, 1.5)}};
  phi3["original_max_position_embeddings"] = 4096;
  phi3["partial_rotary_factor"] = 0.75;  // Phi-4-mini: rotates 48 of 64 here, 24 pairs
  ASSERT_TRUE(Phi3Arch().from_hf(phi3, "p3/config.json", &p3).ok());
  EXPECT_EQ(p3.rope_dim, 48);
  EXPECT_THAT(p3.Validate("p3").message(),
              ::testing::HasSubstr("LongRoPE long factors: 32 entries, expected 24"));
  phi3["partial_rotary_factor"] = 1.0;
  ASSERT_TRUE(Phi3Arch().from_hf(phi3, "p3/config.json", &p3).ok());
  ASSERT_TRUE(p3.Validate("p3").ok());
  EXPECT_EQ(p3.rope_scaling.type, RopeScalingType::kLongRope);
  EXPECT_EQ(p3.rope_scaling.original_context, 4096);
  EXPECT_NEAR(p3.RopeMagnitude(), std::sqrt(1 + std::log(8.0) / std::log(4096.0)), 1e-6);
  const float base1 = static_cast<float>(std::pow(1e6, -2.0 / 64));
  EXPECT_FLOAT_EQ(p3.RopeFrequencies()[1], base1 / 4);  // 32768 > 4096: the long factors
  phi3["max_position_embeddings"] = 4096;
  ASSERT_TRUE(Phi3Arch().from_hf(phi3, "p3/config.json", &p3).ok());
  EXPECT_FLOAT_EQ(p3.RopeFrequencies()[1], base1 / 1.5f);  // not stretched: the short ones
  EXPECT_EQ(p3.RopeMagnitude(), 1.0f);
  phi3["rope_scaling"]["type"] = "yarn";
  const absl::Status yarn = Phi3Arch().from_hf(phi3, "p3/config.json", &p3);
  EXPECT_EQ(yarn.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(yarn.message().find("'yarn'"), std::string::npos) << yarn;
  // Mistral's window: MistralConfig's default 4096 when the key is absent, none when null
  // (v0.2 and later); a Llama config without one has none.
  nlohmann::json mistral = qwen;
  mistral["architectures"] = {"MistralForCausalLM"};
  ModelConfig m;
  ASSERT_TRUE(LlamaArch().from_hf(mistral, "m/config.json", &m).ok());
  EXPECT_EQ(m.WindowOf(3), 4096);
  mistral["sliding_window"] = nullptr;
  ASSERT_TRUE(LlamaArch().from_hf(mistral, "m/config.json", &m).ok());
  EXPECT_EQ(m.WindowOf(3), 0);
  mistral["sliding_window"] = 2048;
  ASSERT_TRUE(LlamaArch().from_hf(mistral, "m/config.json", &m).ok());
  EXPECT_EQ(m.WindowOf(0), 2048);
  ModelConfig plain;
  ASSERT_TRUE(LlamaArch().from_hf(qwen, "l/config.json", &plain).ok());
  EXPECT_EQ(plain.WindowOf(0), 0);
  // Gemma 3 (1B): q/k norms, norms stored as w, five windowed layers with the local base
  // to one global layer.
  nlohmann::json gemma3 = qwen;
  gemma3["architectures"] = {"Gemma3ForCausalLM"};
  gemma3["sliding_window"] = 512;
  gemma3["rope_local_base_freq"] = 10000.0;
  gemma3["query_pre_attn_scalar"] = 256;
  gemma3["hidden_activation"] = "gelu_pytorch_tanh";
  ModelConfig g3;
  ASSERT_TRUE(Gemma3Arch().from_hf(gemma3, "g3/config.json", &g3).ok());
  ASSERT_TRUE(g3.Validate("g3").ok());
  EXPECT_TRUE(g3.qk_norm);
  EXPECT_EQ(g3.norm_weight_offset, 1.0);
  EXPECT_EQ(g3.WindowOf(4), 512);
  EXPECT_EQ(g3.WindowOf(11), 0);
  EXPECT_TRUE(g3.UsesLocalRope(6));
  EXPECT_FLOAT_EQ(g3.LocalRopeFrequencies()[1], static_cast<float>(std::pow(1e4, -2.0 / 64)));
  EXPECT_FLOAT_EQ(g3.RopeFrequencies()[1], static_cast<float>(std::pow(1e6, -2.0 / 64)));
  EXPECT_FLOAT_EQ(g3.AttentionScale(), 1.0f / 16);
  gemma3["hidden_activation"] = "relu";
  EXPECT_EQ(Gemma3Arch().from_hf(gemma3, "g3/config.json", &g3).code(),
            absl::StatusCode::kUnimplemented);
  llama["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_EQ(LlamaArch().from_hf(llama, "l/config.json", &l).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace cascade
