#include "coordinator/planner.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = uint64_t{1} << 30;

ModelProfile TinyLlamaF16() {
  return ProfileFromShape(*FindModelShape("tinyllama-1.1b"), TensorType::kF16);
}

// The fixed limits the sizes in these tests were chosen for: an F32 KV cache of four
// full-context sequences, 95% of each worker's memory.
PlanLimits Limits() {
  PlanLimits l;
  l.kv_tokens = 4 * 2048;
  l.kv_type = TensorType::kF32;
  l.memory_fraction = 0.95;
  l.batch_tokens = 512;
  return l;
}

std::vector<WorkerSpec> Workers(const std::string& spec) { return *ParseWorkerSpecs(spec); }

TEST(Planner, ProfileOfTinyLlamaF16) {
  const ModelProfile m = TinyLlamaF16();
  EXPECT_EQ(m.config.n_layers, 22);
  // ~1.1B parameters at 2 bytes
  EXPECT_NEAR(static_cast<double>(m.total_bytes()) / 1e9, 2.2, 0.05);
}

TEST(Planner, OneWorkerWhenTheModelFitsOnOne) {
  auto plan = MakePlan(TinyLlamaF16(), Workers("small=2GiB,big=8GiB,mid=4GiB"), Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 1u);
  EXPECT_EQ(plan->stages[0].worker, 1);  // the largest
  EXPECT_EQ(plan->stages[0].layers.first, 0);
  EXPECT_EQ(plan->stages[0].layers.last, 22);
}

TEST(Planner, UnequalWorkersGetUnequalLayerRanges) {
  // No single worker holds the model: three are needed, of different sizes.
  auto workers = Workers("a=1.4GiB,b=1GiB,c=0.8GiB");
  auto plan = MakePlan(TinyLlamaF16(), workers, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 3u);
  int covered = 0;
  for (const StagePlan& s : plan->stages) {
    EXPECT_EQ(s.layers.first, covered);
    covered = s.layers.last;
    EXPECT_LE(s.memory.total(), s.capacity);
  }
  EXPECT_EQ(covered, 22);
  EXPECT_GT(plan->stages[0].layers.size(), plan->stages[2].layers.size());
  const std::string table = plan->Table(TinyLlamaF16(), workers);
  EXPECT_THAT(table, HasSubstr("[0, "));
  EXPECT_THAT(table, HasSubstr(", 22)"));
}

TEST(Planner, FasterWorkersGetMoreLayers) {
  auto plan = MakePlan(TinyLlamaF16(), Workers("fast=1.6GiB@3,slow=1.6GiB@1"), Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 2u);
  EXPECT_GT(plan->stages[0].layers.size(), plan->stages[1].layers.size());
}

TEST(Planner, LastStageCarriesTheHeadAndGetsFewerLayers) {
  // TinyLlama's output head (32000 x 2048) weighs ~1.5 layers: on equal workers 12 + 10
  // layers (12 and 11.5 layer-times) beat 11 + 11 (11 and 12.5).
  auto even = MakePlan(TinyLlamaF16(), Workers("x=1.6GiB,y=1.6GiB"), Limits());
  ASSERT_TRUE(even.ok()) << even.status();
  ASSERT_EQ(even->stages.size(), 2u);
  EXPECT_EQ(even->stages[0].layers.size(), 12);
  EXPECT_EQ(even->stages[1].layers.size(), 10);
  // Three equal workers with room to spare: 8 + 8 + 6 (8, 8 and 7.5 layer-times) rather
  // than 8 + 7 + 7 (8, 7, 8.5).
  PlanLimits lim = Limits();
  lim.min_stages = 3;
  auto three = MakePlan(TinyLlamaF16(), Workers("a=4GiB,b=4GiB,c=4GiB"), lim);
  ASSERT_TRUE(three.ok()) << three.status();
  ASSERT_EQ(three->stages.size(), 3u);
  EXPECT_EQ(three->stages[0].layers.size(), 8);
  EXPECT_EQ(three->stages[1].layers.size(), 8);
  EXPECT_EQ(three->stages[2].layers.size(), 6);
  // Tied embeddings: the head is the embedding matrix, still the last stage's work.
  ModelProfile tied = TinyLlamaF16();
  tied.config.tied_embeddings = true;
  tied.head_bytes = 4 * static_cast<uint64_t>(tied.config.dim);  // the output norm only
  auto tied_plan = MakePlan(tied, Workers("x=1.6GiB,y=1.6GiB"), Limits());
  ASSERT_TRUE(tied_plan.ok()) << tied_plan.status();
  ASSERT_EQ(tied_plan->stages.size(), 2u);
  EXPECT_EQ(tied_plan->stages[0].layers.size(), 12);
  EXPECT_EQ(tied_plan->stages[1].layers.size(), 10);
}

TEST(Planner, RefusesAndNamesTheShortfall) {
  auto plan = MakePlan(TinyLlamaF16(), Workers("a=1GiB,b=1GiB"), Limits());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("does not fit"));
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("short by"));
  EXPECT_FALSE(MakePlan(TinyLlamaF16(), {}, Limits()).ok());
}

TEST(Planner, KvCacheCountsAgainstMemory) {
  PlanLimits huge = Limits();
  huge.kv_tokens = 32 * 2048;  // 32 full sequences: 2.75 GiB of KV on top of the weights
  auto one = MakePlan(TinyLlamaF16(), Workers("a=4GiB,b=4GiB"), Limits());
  auto two = MakePlan(TinyLlamaF16(), Workers("a=4GiB,b=4GiB"), huge);
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(one->stages.size(), 1u);
  EXPECT_EQ(two->stages.size(), 2u);
}

TEST(Planner, AnF16KvCacheTakesHalfTheBytesAndTravelsWithThePlan) {
  PlanLimits huge = Limits();
  huge.kv_tokens = 32 * 2048;  // 2.75 GiB of F32 KV: two 4 GiB workers
  auto f32 = MakePlan(TinyLlamaF16(), Workers("a=4GiB,b=4GiB"), huge);
  huge.kv_type = TensorType::kF16;  // 1.4 GiB: one
  auto f16 = MakePlan(TinyLlamaF16(), Workers("a=4GiB,b=4GiB"), huge);
  ASSERT_TRUE(f32.ok() && f16.ok()) << f32.status() << f16.status();
  EXPECT_EQ(f32->stages.size(), 2u);
  ASSERT_EQ(f16->stages.size(), 1u);
  EXPECT_EQ(f16->kv_type, TensorType::kF16);
  EXPECT_EQ(f32->kv_type, TensorType::kF32);
  EXPECT_EQ(f16->stages[0].memory.kv_cache, 22ull * 2 * 2 * 256 * 32 * 2048);
  huge.kv_type = TensorType::kQ8_0;
  auto bad = MakePlan(TinyLlamaF16(), Workers("a=4GiB,b=4GiB"), huge);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("Q8_0"));
}

TEST(Planner, ParsesWorkerSpecs) {
  auto w = ParseWorkerSpecs("a=8GiB@100, b=512MiB");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)[0].memory_bytes, 8 * kGiB);
  EXPECT_EQ((*w)[0].gflops, 100);
  EXPECT_EQ((*w)[1].memory_bytes, uint64_t{512} << 20);
  EXPECT_FALSE(ParseWorkerSpecs("a").ok());
  EXPECT_FALSE(ParseWorkerSpecs("a=lots").ok());
  EXPECT_FALSE(ParseWorkerSpecs("a=1GiB@-2").ok());
}

TEST(Planner, ALostWorkerIsReplacedByASpareWithTheSameLayers) {
  auto workers = Workers("a=1.4GiB,b=1GiB,c=0.8GiB");
  auto plan = MakePlan(TinyLlamaF16(), workers, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 3u);
  // b is lost; a spare s with more memory than b's stage needs, and a tiny one t.
  auto now = Workers("a=1.4GiB,c=0.8GiB,t=100MiB,s=1.2GiB");
  auto re = Replan(TinyLlamaF16(), *plan, workers, {"b"}, now, Limits());
  ASSERT_TRUE(re.ok()) << re.status();
  ASSERT_EQ(re->stages.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(re->stages[i].layers.first, plan->stages[i].layers.first) << i;
    EXPECT_EQ(re->stages[i].layers.last, plan->stages[i].layers.last) << i;
  }
  EXPECT_EQ(now[re->stages[0].worker].id, "a");
  EXPECT_EQ(now[re->stages[1].worker].id, "s");
  EXPECT_EQ(now[re->stages[2].worker].id, "c");
  EXPECT_EQ(re->kv_blocks, plan->kv_blocks);
}

TEST(Planner, WithoutASpareTheRemainingWorkersArePlannedAgain) {
  auto workers = Workers("a=8GiB,b=8GiB,c=8GiB");
  PlanLimits l = Limits();
  l.min_stages = 3;
  auto plan = MakePlan(TinyLlamaF16(), workers, l);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 3u);
  auto now = Workers("a=8GiB,c=8GiB");
  auto re = Replan(TinyLlamaF16(), *plan, workers, {"b"}, now, l);
  ASSERT_TRUE(re.ok()) << re.status();
  ASSERT_EQ(re->stages.size(), 2u);  // min_stages lowered to the workers that remain
  EXPECT_EQ(re->stages.front().layers.first, 0);
  EXPECT_EQ(re->stages.back().layers.last, 22);
  for (const StagePlan& s : re->stages) EXPECT_NE(now[s.worker].id, "b");
}

TEST(Planner, WhenNothingFitsTheReplanSaysWhy) {
  auto workers = Workers("a=1.4GiB,b=1GiB,c=0.8GiB");
  auto plan = MakePlan(TinyLlamaF16(), workers, Limits());
  ASSERT_TRUE(plan.ok());
  auto re = Replan(TinyLlamaF16(), *plan, workers, {"a"}, Workers("b=1GiB,c=0.8GiB"), Limits());
  ASSERT_FALSE(re.ok());
  EXPECT_THAT(std::string(re.status().message()), HasSubstr("does not fit"));
}

// Tensor parallelism: a worker of T ranks holds its stage split over them; what must fit
// is each rank's share.
TEST(Planner, TensorParallelWorkersNeedAbout1OverTPerRank) {
  const ModelProfile m = TinyLlamaF16();
  PlanLimits lim = Limits();
  auto whole = StageMemoryPerRank(m, {0, 22}, lim, 1);
  auto split = StageMemoryPerRank(m, {0, 22}, lim, 4);
  ASSERT_TRUE(whole.ok() && split.ok());
  const double w = static_cast<double>(split->weights) / static_cast<double>(whole->weights);
  EXPECT_GT(w, 0.24);
  EXPECT_LT(w, 0.27);  // 1/4, the norms whole on every rank
  // 4 KV heads over 4 ranks: one each.
  EXPECT_EQ(split->kv_cache, whole->kv_cache / 4);
  // 8 ranks: each KV head is kept by two of them.
  auto eight = StageMemoryPerRank(m, {0, 22}, lim, 8);
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->kv_cache, whole->kv_cache / 4);
  // The whole model does not fit one 1 GiB worker, but fits one group of 4 ranks of 1 GiB.
  EXPECT_FALSE(MakePlan(m, Workers("a=1GiB"), lim).ok());
  std::vector<WorkerSpec> group = Workers("a=1GiB");
  group[0].tp = 4;
  auto plan = MakePlan(m, group, lim);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 1u);
  EXPECT_LE(plan->stages[0].memory.total(), plan->stages[0].capacity);
  EXPECT_THAT(plan->Table(m, group), HasSubstr("weights/rank"));
  // A group size that does not divide the 32 heads is refused, naming the worker.
  group[0].tp = 3;
  EXPECT_THAT(MakePlan(m, group, lim).status().message(), HasSubstr("worker a"));
}

// ---------------------------------------------------------------- the automatic KV cache

ModelProfile Llama3Q4KM() {
  return ProfileFromShape(*FindModelShape("llama-3-8b"), *ParseWeightType("Q4_K_M"));
}

// The room a stage has left for one more block of KV positions.
bool RoomForAnotherBlock(const ModelProfile& m, const Plan& plan, const StagePlan& s) {
  PlanLimits lim;
  lim.kv_type = plan.kv_type;
  lim.kv_tokens = plan.kv_tokens() + plan.kv_block_size;
  return StageMemoryPerRank(m, s.layers, lim, 1)->total() <= s.capacity;
}

TEST(Planner, ByDefaultTheKvCacheFillsWhatTheWeightsLeave) {
  const ModelProfile m = Llama3Q4KM();
  const auto workers = Workers("a=8GiB,b=6GiB,c=4GiB");
  auto plan = MakePlan(m, workers, PlanLimits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kv_type, TensorType::kF16);
  // At least the preferred sequences, every stage within kDefaultMemoryFraction of its
  // worker, and the tightest one without room for another block.
  EXPECT_GE(plan->kv_tokens(), int64_t{kAutoKvSequences} * 8192);
  bool tight = false;
  for (const StagePlan& s : plan->stages) {
    EXPECT_LE(s.memory.total(), s.capacity);
    EXPECT_EQ(s.capacity, static_cast<uint64_t>(static_cast<double>(workers[s.worker].memory_bytes) *
                                                kDefaultMemoryFraction));
    EXPECT_EQ(s.memory.kv_cache,
              KvBytesPerToken(m.config, s.layers.size(), TensorType::kF16) *
                  static_cast<uint64_t>(plan->kv_tokens()));
    tight |= !RoomForAnotherBlock(m, *plan, s);
  }
  EXPECT_TRUE(tight);
  EXPECT_THAT(plan->Table(m, workers),
              HasSubstr(absl::StrCat("KV cache: ", plan->kv_tokens(), " positions per stage (F16) = ",
                                     plan->kv_tokens() / 8192, " sequences of 8192 tokens")));
}

TEST(Planner, TheAutomaticKvCacheHoldsNoMoreThanTheSchedulerRuns) {
  // A tiny model on a large worker: max_sequences full-context sequences, not 90% of it.
  const ModelProfile tiny = ProfileFromShape(*FindModelShape("tiny"), TensorType::kF16);
  PlanLimits lim;
  auto plan = MakePlan(tiny, Workers("a=64GiB"), lim);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kv_tokens(), int64_t{lim.max_sequences} * tiny.config.context_length);
  lim.max_sequences = 3;
  plan = MakePlan(tiny, Workers("a=64GiB"), lim);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kv_tokens(), 3 * tiny.config.context_length);
  // Explicit sizes are kept as given (in whole blocks).
  lim.kv_sequences = 5;
  plan = MakePlan(tiny, Workers("a=64GiB"), lim);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kv_tokens(), 5 * tiny.config.context_length);
  lim.kv_tokens = 100;
  plan = MakePlan(tiny, Workers("a=64GiB"), lim);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kv_blocks, (100 + lim.kv_block_size - 1) / lim.kv_block_size);
}

TEST(Planner, ARefusalNamesSettingsThatFit) {
  // 8 sequences of F32 KV (16 GiB) do not fit 8 + 6 + 4 GiB; the refusal's --kv-sequences
  // does, one more does not.
  const ModelProfile m = ProfileFromShape(*FindModelShape("llama-3-8b"), TensorType::kQ4_K);
  const auto workers = Workers("a=8GiB,b=6GiB,c=4GiB");
  PlanLimits lim;
  lim.kv_sequences = 8;
  lim.kv_type = TensorType::kF32;
  auto no = MakePlan(m, workers, lim);
  ASSERT_FALSE(no.ok());
  const std::string why(no.status().message());
  EXPECT_THAT(why, HasSubstr("--kv-type f16"));
  EXPECT_THAT(why, HasSubstr("--memory-fraction"));
  EXPECT_THAT(why, HasSubstr("--ctx "));
  const size_t at = why.find("--kv-sequences ");
  ASSERT_NE(at, std::string::npos) << why;
  const int fits = std::atoi(why.c_str() + at + 15);
  ASSERT_GE(fits, 1) << why;
  lim.kv_sequences = fits;
  EXPECT_TRUE(MakePlan(m, workers, lim).ok()) << why;
  lim.kv_sequences = fits + 1;
  EXPECT_FALSE(MakePlan(m, workers, lim).ok()) << why;
  // At F16 the default fits.
  EXPECT_TRUE(MakePlan(m, workers, PlanLimits()).ok());
}

// ---------------------------------------------------------------- workers sharing a node

TEST(Planner, WorkersOnOneNodeShareItsMemory) {
  auto w = Workers("a=8GiB,b=8GiB,c=8GiB");
  for (WorkerSpec& s : w) s.node_memory = true;
  w[0].node_id = w[1].node_id = "boot-1";
  w[2].node_id = "boot-2";
  EXPECT_THAT(SharedMemory(w), ::testing::ElementsAre(4 * kGiB, 4 * kGiB, 8 * kGiB));
  // A worker there with a memory of its own takes it out of the node's.
  WorkerSpec given = Workers("d=2GiB")[0];
  given.node_id = "boot-1";
  w.push_back(given);
  EXPECT_THAT(SharedMemory(w), ::testing::ElementsAre(3 * kGiB, 3 * kGiB, 8 * kGiB, 2 * kGiB));
  // No node id, or memory given: nothing is shared.
  auto apart = Workers("a=8GiB,b=8GiB");
  apart[0].node_id = apart[1].node_id = "boot-1";  // memory given to each
  EXPECT_THAT(SharedMemory(apart), ::testing::ElementsAre(8 * kGiB, 8 * kGiB));

  // TinyLlama (2.05 GiB) fits one 3 GiB worker; two on one 3 GiB node get half each, so
  // the plan needs both, and says why.
  auto pair = Workers("a=3GiB,b=3GiB");
  for (WorkerSpec& s : pair) {
    s.node_memory = true;
    s.node_id = "boot-1";
    s.node = "host1";
  }
  auto apart_plan = MakePlan(TinyLlamaF16(), Workers("a=3GiB,b=3GiB"), Limits());
  auto shared_plan = MakePlan(TinyLlamaF16(), pair, Limits());
  ASSERT_TRUE(apart_plan.ok() && shared_plan.ok()) << apart_plan.status() << shared_plan.status();
  EXPECT_EQ(apart_plan->stages.size(), 1u);
  ASSERT_EQ(shared_plan->stages.size(), 2u);
  for (const StagePlan& s : shared_plan->stages) {
    EXPECT_EQ(s.capacity, static_cast<uint64_t>(1.5 * kGiB * 0.95));
  }
  EXPECT_THAT(shared_plan->Table(TinyLlamaF16(), pair),
              HasSubstr("workers a, b share node host1's 3.00 GiB: 1.50 GiB each"));
}

// ---------------------------------------------------------------- replicas

TEST(Planner, ReplicasTakeAsManyPipelinesAsTheWorkersHold) {
  // TinyLlama F16 (2.05 GiB + cache) needs two of these 1.6 GiB workers a pipeline.
  const auto w = Workers("a=1.6GiB,b=1.6GiB,c=1.6GiB,d=1.6GiB,e=1.6GiB,f=1GiB");
  auto all = MakeReplicaPlans(TinyLlamaF16(), w, Limits(), 0);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->replicas.size(), 2u);
  std::set<int> used;
  for (const Plan& p : all->replicas) {
    ASSERT_EQ(p.stages.size(), 2u);
    for (const StagePlan& st : p.stages) {
      EXPECT_TRUE(used.insert(st.worker).second) << "worker " << st.worker << " twice";
      EXPECT_LE(st.memory.total(), st.capacity);
    }
    EXPECT_EQ(p.stages.back().layers.last, 22);
  }
  // e and f are left (f alone is too small, and nothing pairs with e but f, which fails).
  EXPECT_THAT(all->spares, ::testing::UnorderedElementsAre(4, 5));
  const std::string table = all->Table(TinyLlamaF16(), w);
  EXPECT_THAT(table, HasSubstr("replica 0:"));
  EXPECT_THAT(table, HasSubstr("replica 1:"));
  EXPECT_THAT(table, HasSubstr("spares: e, f"));

  auto one = MakeReplicaPlans(TinyLlamaF16(), w, Limits(), 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->replicas.size(), 1u);
  EXPECT_EQ(one->spares.size(), 4u);
  EXPECT_THAT(one->Table(TinyLlamaF16(), w), ::testing::Not(HasSubstr("replica 0")));

  auto three = MakeReplicaPlans(TinyLlamaF16(), w, Limits(), 3);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(three.status().message(), HasSubstr("3 replicas were asked for but the workers hold 2"));
}

TEST(Planner, ReplicasCountANodesSharedMemoryOverEveryWorker) {
  // Two workers on one 3 GiB node: 1.5 GiB each, even when each is planned apart, so no
  // single one of them holds a replica.
  auto w = Workers("a=3GiB,b=3GiB");
  for (WorkerSpec& s : w) {
    s.node_memory = true;
    s.node_id = "boot-1";
  }
  auto plans = MakeReplicaPlans(TinyLlamaF16(), w, Limits(), 0);
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->replicas.size(), 1u);
  EXPECT_EQ(plans->replicas[0].stages.size(), 2u);
}

// ---------------------------------------------------------------- weight types

TEST(Planner, ReadsLlamaCppFileTypes) {
  const auto q4km = ParseWeightType("q4_k_m");
  ASSERT_TRUE(q4km.has_value());
  EXPECT_EQ(q4km->type, TensorType::kQ4_K);
  EXPECT_EQ(q4km->name, "Q4_K_M");
  // A mix of Q4_K with some Q6_K: between the two in size.
  const auto q4k = ParseWeightType("Q4_K"), q6k = ParseWeightType("Q6_K");
  ASSERT_TRUE(q4k && q6k);
  EXPECT_GT(q4km->bits_per_weight, q4k->bits_per_weight);
  EXPECT_LT(q4km->bits_per_weight, q6k->bits_per_weight);
  const ModelShape shape = *FindModelShape("llama-3-8b");
  const uint64_t mixed = ProfileFromShape(shape, *q4km).total_bytes();
  EXPECT_GT(mixed, ProfileFromShape(shape, TensorType::kQ4_K).total_bytes());
  EXPECT_LT(mixed, ProfileFromShape(shape, TensorType::kQ6_K).total_bytes());
  // A tensor type is exact: the same profile as by TensorType.
  EXPECT_EQ(ProfileFromShape(shape, *ParseWeightType("Q8_0")).total_bytes(),
            ProfileFromShape(shape, TensorType::kQ8_0).total_bytes());
  for (const char* name : {"Q4_K_S", "Q5_K_M", "Q5_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q2_K",
                           "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "F16", "BF16", "F32"}) {
    EXPECT_TRUE(ParseWeightType(name).has_value()) << name;
    EXPECT_THAT(WeightTypeNames(), ::testing::Contains(name));
  }
  EXPECT_FALSE(ParseWeightType("Q4_K_X").has_value());
  EXPECT_FALSE(ParseWeightType("Q8_K").has_value());  // no kernel computes with it
}

}  // namespace
}  // namespace cascade
