// The MPI collective, run under mpirun (ctest: mpirun -np 2 and -np 4, label "mpi"): the
// same behaviour as the in-process group, and tensor-parallel stages over MPI that match
// the unsplit stage (engine/tp_test_util.h) with the world as the group.
#include "parallel/mpi_collective.h"

#include <mpi.h>

#include <memory>

#include "engine/tp_test_util.h"
#include "generation/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_util.h"

namespace cascade {
namespace {

std::unique_ptr<MpiCollective> World() {
  auto c = MpiCollective::Create(MPI_COMM_WORLD, "MPI world");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(MpiCollective, AllGatherBroadcastAndStrings) {
  auto c = World();
  ASSERT_NE(c, nullptr);
  const int n = c->size();
  int mine[2] = {c->rank() * 10, c->rank() * 10 + 1};
  std::vector<int> all(2 * n);
  ASSERT_TRUE(c->AllGather(mine, sizeof(mine), all.data()).ok());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(all[2 * r], r * 10);
    EXPECT_EQ(all[2 * r + 1], r * 10 + 1);
  }
  int v = c->rank() == n - 1 ? 42 : -1;
  ASSERT_TRUE(c->Broadcast(&v, sizeof(v), n - 1).ok());
  EXPECT_EQ(v, 42);
  auto strings = AllGatherStrings(*c, std::string(static_cast<size_t>(c->rank()) * 3, 'x'));
  ASSERT_TRUE(strings.ok());
  for (int r = 0; r < n; ++r) EXPECT_EQ((*strings)[r].size(), static_cast<size_t>(3 * r));
  std::string s = c->rank() == 0 ? std::string(100000, 'y') : "";
  ASSERT_TRUE(BroadcastString(*c, &s, 0).ok());
  EXPECT_EQ(s, std::string(100000, 'y'));
}

// Rank order, whatever the count: ((1e8 + 1) - 1e8) + 1 + ... = 1 + (n - 3) in float.
TEST(MpiCollective, AllReduceSumsInRankOrderWhateverTheCount) {
  auto c = World();
  ASSERT_NE(c, nullptr);
  if (c->size() < 3) GTEST_SKIP() << "needs 3 ranks or more";
  const float parts[3] = {1e8f, 1.0f, -1e8f};
  const float value = c->rank() < 3 ? parts[c->rank()] : 1.0f;
  for (int64_t count : {1, 5, 100000}) {
    std::vector<float> x(count, value);
    ASSERT_TRUE(c->AllReduceSum(x.data(), count).ok());
    const float want = static_cast<float>(c->size() - 3);
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(x[i], want) << "count " << count;
  }
}

struct MpiCase {
  std::string name, model;
};

class MpiTensorParallel : public ::testing::TestWithParam<MpiCase> {};

TEST_P(MpiTensorParallel, MatchesTheUnsplitStage) {
  auto c = World();
  ASSERT_NE(c, nullptr);
  const std::string path = testing::SharedPath(GetParam().model);
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<int32_t> ids = testing::ReadIds(testing::SharedPath(
      GetParam().model.find("tiny-llama") != std::string::npos ? "models/tiny-llama/prompt.ids"
                                                               : "models/stories260K/prompt.ids"));
  const double worst = testing::CheckTpMatchesUnsplit(*c, **src, ids, 24, 1e-4);
  testing::CheckTpBatchInvariance(*c, **src);
  if (c->rank() == 0) RecordProperty("max_abs_logit_diff", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Models, MpiTensorParallel,
    ::testing::Values(MpiCase{"stories260K", "models/stories260K/stories260K.gguf"},
                      // 2 KV heads: replicated when the world has 4 ranks.
                      MpiCase{"tinyllama_f16", "models/tiny-llama/tiny-llama-f16.gguf"}),
    [](const ::testing::TestParamInfo<MpiCase>& i) { return i.param.name; });

// Two pretend nodes of two ranks, each node one tensor-parallel stage, activations passed
// from node to node over MPI: teacher-forced logits within 1e-4 of the single process and
// the same greedy ids, token by token through the pipeline.
class MpiPipeline : public ::testing::TestWithParam<MpiCase> {};

TEST_P(MpiPipeline, TwoNodesOfTwoRanksMatchTheSingleProcess) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 4) GTEST_SKIP() << "needs 4 ranks";
  const std::string path = testing::SharedPath(GetParam().model);
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok());
  const int node = rank / 2;
  MPI_Comm node_comm;
  MPI_Comm_split(MPI_COMM_WORLD, node, rank, &node_comm);
  auto group = MpiCollective::Create(node_comm, "node " + std::to_string(node));
  ASSERT_TRUE(group.ok());
  const int L = static_cast<int>((*src)->config().n_layers);
  const int k = L / 2;
  auto stage = Stage::Create(**src, testing::TpOptions(group->get(), node == 0 ? LayerRange{0, k}
                                                                              : LayerRange{k, L}));
  auto whole = Stage::Create(**src, testing::TpOptions(nullptr));
  ASSERT_TRUE(stage.ok() && whole.ok());
  const int64_t dim = (*src)->config().dim;
  const int V = static_cast<int>((*src)->config().vocab_size);
  // One step: node 0 runs `batch`, rank 0 sends the activations to node 1, which returns
  // logits (node 1 only).
  auto step = [&](const Batch& batch, std::vector<float>* logits) {
    std::vector<float> hidden(batch.size() * dim);
    if (node == 0) {
      ASSERT_TRUE((*stage)->Forward(batch, {}, &hidden).ok());
      if (rank == 0) {
        for (int to : {2, 3}) {
          MPI_Send(hidden.data(), static_cast<int>(hidden.size()), MPI_FLOAT, to, 5, MPI_COMM_WORLD);
        }
      }
    } else {
      MPI_Recv(hidden.data(), static_cast<int>(hidden.size()), MPI_FLOAT, 0, 5, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      ASSERT_TRUE((*stage)->Forward(batch, hidden, logits).ok());
    }
  };
  std::vector<int32_t> ids = testing::ReadIds(testing::SharedPath(
      GetParam().model.find("tiny-llama") != std::string::npos ? "models/tiny-llama/prompt.ids"
                                                               : "models/stories260K/prompt.ids"));
  ASSERT_FALSE(ids.empty());
  Batch prefill;
  for (size_t i = 0; i < ids.size(); ++i) prefill.push_back({ids[i], 1, static_cast<int32_t>(i), true});
  std::vector<float> logits;
  step(prefill, &logits);
  const std::vector<float> want = testing::AllLogits(**whole, ids, 2);
  if (node == 1) {
    const double d = testing::MaxAbsDiff(logits, want);
    EXPECT_LT(d, 1e-4);
    if (rank == 2) RecordProperty("max_abs_logit_diff", std::to_string(d));
  }
  // Greedy decoding through the pipeline: node 1 samples and tells everyone.
  std::vector<int32_t> got = ids;
  for (int t = 0; t < 24; ++t) {
    int32_t next = 0;
    if (node == 1) {
      std::span<const float> last(logits.data() + logits.size() - V, V);
      next = Sample(last, SamplingParams::Greedy(), got, got.size()).token;
    }
    MPI_Bcast(&next, 1, MPI_INT, 2, MPI_COMM_WORLD);
    got.push_back(next);
    step({{next, 1, static_cast<int32_t>(got.size() - 1), true}}, &logits);
  }
  const std::vector<int32_t> prompt = ids;
  EXPECT_EQ(got, testing::GreedyDecode(**whole, prompt, got.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Models, MpiPipeline,
    ::testing::Values(MpiCase{"stories260K", "models/stories260K/stories260K.gguf"},
                      MpiCase{"tinyllama_f16", "models/tiny-llama/tiny-llama-f16.gguf"}),
    [](const ::testing::TestParamInfo<MpiCase>& i) { return i.param.name; });

}  // namespace
}  // namespace cascade

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    // One report: the other ranks print only failures.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    std::unique_ptr<::testing::TestEventListener> quiet(
        listeners.Release(listeners.default_result_printer()));
  }
  const int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
