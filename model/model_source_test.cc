#include "model/model_source.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_util.h"
#include "model/weights.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

TEST(CanonicalTensorName, MapsHuggingFaceNames) {
  EXPECT_EQ(CanonicalTensorName("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(CanonicalTensorName("model.layers.12.self_attn.k_proj.bias"), "blk.12.attn_k.bias");
  EXPECT_EQ(CanonicalTensorName("model.layers.3.mlp.down_proj.weight"), "blk.3.ffn_down.weight");
  EXPECT_EQ(CanonicalTensorName("model.layers.x.mlp.down_proj.weight"), "");
  EXPECT_EQ(CanonicalTensorName("model.rotary_emb.inv_freq"), "");
}

TEST(ModelSource, GgufAndHfAgreeOnStories260K) {
  const std::string gguf = testing::SharedPath("models/stories260K/stories260K.gguf");
  const std::string hf = testing::SharedPath("models/stories260K/hf");
  CASCADE_REQUIRE_SHARED(gguf);
  CASCADE_REQUIRE_SHARED(hf);
  auto a = ModelSource::Open(gguf);
  auto b = ModelSource::Open(hf);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const ModelConfig& ca = (*a)->config();
  const ModelConfig& cb = (*b)->config();
  EXPECT_EQ(ca.dim, 64);
  EXPECT_EQ(ca.n_layers, 5);
  EXPECT_EQ(ca.n_heads, 8);
  EXPECT_EQ(ca.n_kv_heads, 4);
  EXPECT_EQ(ca.ffn_dim, 172);
  EXPECT_EQ(ca.vocab_size, 512);
  EXPECT_TRUE(ca.tied_embeddings);
  EXPECT_EQ(ca.rope_layout, RopeLayout::kAdjacentPairs);
  EXPECT_EQ(cb.rope_layout, RopeLayout::kHalves);
  EXPECT_EQ(cb.dim, ca.dim);
  EXPECT_EQ(cb.n_kv_heads, ca.n_kv_heads);
  EXPECT_TRUE(cb.tied_embeddings);
  for (const char* name : {"token_embd.weight", "blk.4.ffn_down.weight", "output_norm.weight"}) {
    const TensorView* ta = (*a)->Find(name);
    const TensorView* tb = (*b)->Find(name);
    ASSERT_NE(ta, nullptr) << name;
    ASSERT_NE(tb, nullptr) << name;
    EXPECT_EQ(ta->ShapeString(), tb->ShapeString()) << name;
  }
  auto wa = ModelWeights::Bind(**a, {0, 5});
  ASSERT_TRUE(wa.ok()) << wa.status();
  EXPECT_EQ((*wa)->output, (*wa)->token_embd);
  auto wb = ModelWeights::Bind(**b, {2, 5});
  ASSERT_TRUE(wb.ok()) << wb.status();
  EXPECT_FALSE((*wb)->has_embedding);
  EXPECT_TRUE((*wb)->has_head);
}

TEST(ModelSource, MissingFolderFilesAreNamed) {
  auto s = ModelSource::Open(::testing::TempDir());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("config.json"));
}

TEST(ModelWeights, RejectsBadLayerRange) {
  const std::string gguf = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(gguf);
  auto a = ModelSource::Open(gguf);
  ASSERT_TRUE(a.ok());
  auto w = ModelWeights::Bind(**a, {3, 9});
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("layer range"));
}

}  // namespace
}  // namespace cascade
