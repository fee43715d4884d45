// Tensor-parallel stages on in-process groups (threads): every rank's logits match the
// unsplit stage within 1e-4 at F32, greedy ids are equal, batching changes nothing, and
// each rank holds only its slices. The same checks run over MPI in
// parallel/mpi_collective_test.cc.
#include <cstdio>
#include <thread>

#include "engine/testdata/script_models.h"
#include "engine/tp_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_util.h"
#include "parallel/inproc_collective.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

template <typename Fn>
void OnEveryRank(int size, Fn fn) {
  InProcessGroup g(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { fn(g.rank(r)); });
  for (auto& t : threads) t.join();
}

struct Case {
  std::string name;
  // Under the shared folder; "odd": the synthetic OddShape; "qwen3moe": the model of
  // engine/testdata/script_models.h.
  std::string model;
  int size;
};

std::string OddModelPath() {
  static const std::string path = [] {
    const std::string p = ::testing::TempDir() + "/tp_odd_shape.gguf";
    SyntheticOptions o;
    o.type = TensorType::kF32;
    o.seed = 7;
    absl::Status st = WriteSyntheticModel(testing::OddShape(), o, p);
    EXPECT_TRUE(st.ok()) << st;
    return p;
  }();
  return path;
}

// A Qwen3-MoE-shaped model from `cascade make-model`'s writer at Q8_0: 8 experts of 64,
// 2 used, head_dim 32 (not dim / heads), q/k norms, the router F32.
std::string MoeQ8ModelPath() {
  static const std::string path = [] {
    const std::string p = ::testing::TempDir() + "/tp_moe_q8.gguf";
    ModelShape s;
    s.name = "moe-q8";
    s.arch = "qwen3moe";
    s.vocab = 512;
    s.dim = 64;
    s.layers = 2;
    s.heads = 4;
    s.kv_heads = 2;
    s.head_dim = 32;
    s.ffn = 128;
    s.context = 128;
    s.n_experts = 8;
    s.experts_used = 2;
    s.expert_ffn = 64;
    SyntheticOptions o;
    o.type = TensorType::kQ8_0;
    o.seed = 11;
    absl::Status st = WriteSyntheticModel(s, o, p);
    EXPECT_TRUE(st.ok()) << st;
    return p;
  }();
  return path;
}

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, MatchesTheUnsplitStage) {
  const Case& c = GetParam();
  std::string path = c.model == "odd"        ? OddModelPath()
                     : c.model == "qwen3moe" ? testing::MiniQwen3Moe()
                     : c.model == "moe_q8"   ? MoeQ8ModelPath()
                                             : testing::SharedPath(c.model);
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<int32_t> ids = testing::ReadIds(testing::SharedPath(
      c.model.find("tiny-llama") != std::string::npos ? "models/tiny-llama/prompt.ids"
                                                      : "models/stories260K/prompt.ids"));
  if (c.model == "qwen3moe") {  // its vocabulary is 128: the reference's own prompt
    ids = testing::ReadIds(std::string(CASCADE_SOURCE_DIR) +
                           "/engine/testdata/qwen3moe/mini-qwen3moe.ids");
    ids.resize(10);
  }
  if (ids.empty()) ids = {1, 403, 407, 261, 378};
  std::vector<double> worst(c.size);
  OnEveryRank(c.size, [&](Collective& col) {
    worst[col.rank()] = testing::CheckTpMatchesUnsplit(col, **src, ids, 24, 1e-4);
    testing::CheckTpBatchInvariance(col, **src);
  });
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", *std::max_element(worst.begin(), worst.end()));
  RecordProperty("max_abs_logit_diff", text);
}

INSTANTIATE_TEST_SUITE_P(
    Models, TensorParallel,
    ::testing::Values(Case{"stories_tp1", "models/stories260K/stories260K.gguf", 1},
                      Case{"stories_tp2", "models/stories260K/stories260K.gguf", 2},
                      Case{"stories_tp4", "models/stories260K/stories260K.gguf", 4},
                      // 4 KV heads on 8 ranks: each KV head is kept by two ranks.
                      Case{"stories_tp8", "models/stories260K/stories260K.gguf", 8},
                      Case{"tinyllama_f16_tp2", "models/tiny-llama/tiny-llama-f16.gguf", 2},
                      // 2 KV heads on 4 ranks.
                      Case{"tinyllama_f16_tp4", "models/tiny-llama/tiny-llama-f16.gguf", 4},
                      Case{"tinyllama_q8_tp4", "models/tiny-llama-q/tiny-llama-q-Q8_0.gguf", 4},
                      // GQA groups cut by the split; uneven FFN and vocabulary.
                      Case{"odd_tp2", "odd", 2}, Case{"odd_tp3", "odd", 3},
                      Case{"odd_tp6", "odd", 6},
                      // Per-head q/k norms (6 heads, 2 KV heads: one per rank).
                      Case{"qwen3_tp2", "models/arch/mini-qwen3-f32.gguf", 2},
                      // Fused q/k/v and gate/up sliced again per rank; sliding windows.
                      Case{"phi3_tp3", "models/arch/mini-phi3-f32.gguf", 3},
                      // Post norms after the all-reduce, soft-caps, GELU, scaled embedding.
                      Case{"gemma2_tp2", "models/arch/mini-gemma2-f32.gguf", 2},
                      // Expert parallelism: whole experts per rank, every rank routing
                      // every token, the all-reduce summing the parts. 8 experts on 3
                      // ranks (3, 3, 2), 2 used (Mixtral) and 4 used with the shared expert
                      // on rank 0 (Qwen2-MoE); Qwen3-MoE on 2 and on 4 ranks.
                      Case{"mixtral_tp3", "models/arch/mini-mixtral-f32.gguf", 3},
                      Case{"qwen2moe_tp3", "models/arch/mini-qwen2moe-f32.gguf", 3},
                      Case{"qwen3moe_tp2", "qwen3moe", 2}, Case{"qwen3moe_tp4", "qwen3moe", 4},
                      // make-model's MoE writer, quantized experts (Q8_0), on 2 ranks.
                      Case{"moe_q8_tp2", "moe_q8", 2}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

TEST(TensorParallelShard, EachRankHoldsItsShareOfTheWeights) {
  const std::string path = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok());
  auto whole = ModelWeights::Bind(**src, {0, 4});
  ASSERT_TRUE(whole.ok());
  for (int size : {2, 4}) {
    uint64_t sum = 0;
    for (int r = 0; r < size; ++r) {
      auto shard = MakeTpShard((*src)->config(), r, size);
      ASSERT_TRUE(shard.ok());
      auto part = ModelWeights::Bind(**src, {0, 4}, &*shard);
      ASSERT_TRUE(part.ok()) << part.status();
      const double share = static_cast<double>((*part)->matrix_bytes()) /
                           static_cast<double>((*whole)->matrix_bytes());
      // 1/T of Q, O, FFN and the head; K and V (2 KV heads) are replicated at T = 4.
      EXPECT_LT(share, 1.0 / size + 0.05) << "rank " << r << " of " << size;
      EXPECT_GT(share, 1.0 / size - 0.05);
      sum += (*part)->matrix_bytes();
    }
    if (size == 2) {
      EXPECT_EQ(sum, (*whole)->matrix_bytes());  // a partition
    }
  }
}

// Once a backend holds copies of a shard's column slices, the shard's own copies go; the
// views keep their shapes (the memory report still counts them), and the mapping's views
// are untouched.
TEST(TensorParallelShard, ReleasingTheCopiesKeepsShapesAndMappingViews) {
  const std::string path = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok());
  auto shard = MakeTpShard((*src)->config(), 1, 2);
  ASSERT_TRUE(shard.ok());
  auto part = ModelWeights::Bind(**src, {0, 4}, &*shard);
  ASSERT_TRUE(part.ok()) << part.status();
  ModelWeights& w = **part;
  ASSERT_FALSE(w.owned_bytes.empty()) << "rank 1's column slices are copies";
  const uint64_t before = w.matrix_bytes();
  const uint8_t* wq = w.layers[0].wq->data;  // a row slice: a view of the mapping
  const TensorView* wo = w.layers[0].wo;     // a column slice: a copy
  ASSERT_NE(wo->data, nullptr);
  w.ReleaseOwnedBytes();
  EXPECT_TRUE(w.owned_bytes.empty());
  EXPECT_EQ(wo->data, nullptr);
  EXPECT_GT(wo->nbytes, 0u);
  EXPECT_EQ(w.layers[0].wq->data, wq);
  EXPECT_EQ(w.matrix_bytes(), before);
}

// A rank's stage on the CPU backend (which copies every weight) releases the shard's copies.
TEST(TensorParallelShard, AStageOfARankReleasesTheShardCopiesItUploaded) {
  const std::string path = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok());
  std::vector<bool> released(2, false);
  OnEveryRank(2, [&](Collective& rank) {
    StageOptions o;
    o.tp = &rank;
    auto stage = Stage::Create(**src, o);
    if (stage.ok()) released[rank.rank()] = (*stage)->weights().owned_bytes.empty();
  });
  EXPECT_TRUE(released[0]);
  EXPECT_TRUE(released[1]);
}

TEST(TensorParallelShard, RefusesSplitsThatDoNotFit) {
  ModelConfig c;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.ffn_dim = 768;
  c.vocab_size = 100;
  EXPECT_THAT(MakeTpShard(c, 0, 3).status().message(), HasSubstr("does not divide the model's 8"));
  // Q4_K output projections (blocks of 256): 4 heads of 32 per rank cut them.
  EXPECT_THAT(MakeTpShard(c, 0, 2, {.q_cols = 256, .ffn = 256}).status().message(),
              HasSubstr("blocks of 256"));
  auto s = MakeTpShard(c, 3, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->head_begin, 6);
  EXPECT_THAT(s->kv_heads, ::testing::ElementsAre(1));  // heads 6, 7 use KV head 1
  c.n_heads = 6;
  c.n_kv_heads = 3;
  auto cut = MakeTpShard(c, 0, 2);  // heads 0-2: KV heads 0, 0, 1
  ASSERT_TRUE(cut.ok());
  EXPECT_THAT(cut->kv_heads, ::testing::ElementsAre(0, 0, 1));
}

TEST(TensorParallelStage, RefusesAGroupOnAnotherKindOfMemory) {
  class DeviceGroup : public Collective {
   public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
    std::string name() const override { return "a GPU group"; }
    absl::Status AllGather(const void*, size_t, void*) override { return absl::OkStatus(); }
    absl::Status Broadcast(void*, size_t, int) override { return absl::OkStatus(); }
    absl::Status AllReduceSum(float*, int64_t) override { return absl::OkStatus(); }
  } gpu;
  const std::string path = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok());
  auto s = Stage::Create(**src, testing::TpOptions(&gpu));
  EXPECT_THAT(s.status().message(), HasSubstr("different kinds of memory"));
}

TEST(TensorParallelStage, ABrokenGroupFailsTheBatchAndEveryLaterOne) {
  const std::string path = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok());
  InProcessGroup g(2);
  auto s = Stage::Create(**src, testing::TpOptions(&g.rank(0)));
  ASSERT_TRUE(s.ok());
  g.Abort("rank 1 was lost");
  std::vector<float> out;
  Batch one = {{1, 0, 0, true}};
  EXPECT_THAT((*s)->Forward(one, {}, &out).message(), HasSubstr("rank 1 was lost"));
  EXPECT_THAT((*s)->Forward(one, {}, &out).message(), HasSubstr("broken"));
}

}  // namespace
}  // namespace cascade
