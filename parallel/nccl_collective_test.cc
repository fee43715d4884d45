// The NCCL collective on one GPU (label "gpu"; skipped without one): a group of one rank
// gathers, broadcasts and sums device memory, and a tensor-parallel stage of one rank on
// the CUDA backend gives the unsplit CUDA stage's logits. Run by tests/gpu/device-check.sh.
#include "parallel/nccl_collective.h"

#include <cuda_runtime.h>

#include <vector>

#include "engine/tp_test_util.h"
#include "gtest/gtest.h"
#include "kernels/gpu_test_util.h"
#include "kernels/gpu.h"
#include "model/test_util.h"
#include "parallel/inproc_collective.h"

namespace cascade {
namespace {

TEST(NcclCollective, OneRankGathersBroadcastsAndSums) {
  REQUIRE_GPU();
  InProcessGroup control(1);
  auto c = NcclCollective::Create(control.rank(0), 0, "NCCL test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->memory_kind(), MemoryKind::kDevice);
  const std::vector<float> host = {1.5f, -2.0f, 3.25f, 1e8f};
  float* d = nullptr;
  float* g = nullptr;
  ASSERT_EQ(cudaMalloc(&d, host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&g, host.size() * sizeof(float)), cudaSuccess);
  cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  ASSERT_TRUE((*c)->AllGather(d, host.size() * sizeof(float), g).ok());
  ASSERT_TRUE((*c)->Broadcast(d, host.size() * sizeof(float), 0).ok());
  ASSERT_TRUE((*c)->AllReduceSum(d, static_cast<int64_t>(host.size())).ok());
  std::vector<float> back(host.size()), gathered(host.size());
  cudaMemcpy(back.data(), d, back.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(gathered.data(), g, gathered.size() * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(back, host);
  EXPECT_EQ(gathered, host);
  cudaFree(d);
  cudaFree(g);
}

TEST(NcclCollective, ASplitStageOfOneRankOnTheGpuGivesTheUnsplitLogits) {
  REQUIRE_GPU();
  const std::string path = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok());
  InProcessGroup control(1);
  auto c = NcclCollective::Create(control.rank(0), 0, "NCCL test");
  ASSERT_TRUE(c.ok()) << c.status();
  auto whole_be = CreateCudaBackend({});
  auto split_be = CreateCudaBackend({});
  ASSERT_TRUE(whole_be.ok() && split_be.ok());
  auto whole = Stage::Create(**src, testing::TpOptions(nullptr), std::move(*whole_be));
  auto split = Stage::Create(**src, testing::TpOptions(c->get()), std::move(*split_be));
  ASSERT_TRUE(whole.ok() && split.ok()) << split.status();
  const auto ids = testing::ReadIds(testing::SharedPath("models/tiny-llama/prompt.ids"));
  const double d = testing::MaxAbsDiff(testing::AllLogits(**split, ids), testing::AllLogits(**whole, ids));
  EXPECT_LT(d, 1e-4);
}

}  // namespace
}  // namespace cascade
