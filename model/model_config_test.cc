#include "model/model_config.h"

#include <cmath>

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

TEST(RopeFrequencies, Llama3ScalingKeepsHighAndDividesLowFrequencies) {
  const ModelConfig c = Llama31();
  ModelConfig plain = c;
  plain.rope_scaling = {};
  const std::vector<float> scaled = c.RopeFrequencies(), base = plain.RopeFrequencies();
  ASSERT_EQ(scaled.size(), 64u);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < scaled.size(); ++i) {
    const double wavelen = 2 * M_PI / base[i];
    if (wavelen < 8192.0 / 4.0) {  // short wavelengths: untouched
      EXPECT_FLOAT_EQ(scaled[i], base[i]) << i;
      ++kept;
    } else if (wavelen > 8192.0) {  // long wavelengths: divided by the factor
      EXPECT_NEAR(scaled[i], base[i] / 8.0, 1e-6 * base[i]) << i;
      ++divided;
    } else {  // in between: strictly between the two
      EXPECT_LT(scaled[i], base[i]) << i;
      EXPECT_GT(scaled[i], base[i] / 8.0) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
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
  llama["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_EQ(LlamaArch().from_hf(llama, "l/config.json", &l).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace cascade
