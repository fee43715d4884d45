// Whole models on the GPU (ctest label "gpu"; each test skips, saying so, without a CUDA
// device): the CUDA backend's logits against the CPU backend's on the shared reference
// models, and a 2-stage pipeline with both stages on the one GPU giving the CPU's greedy
// text. Run by tests/gpu/device-check.sh.
#include <string>
#include <vector>

#include "engine/stage.h"
#include "engine/stage_test_util.h"
#include "gtest/gtest.h"
#include "kernels/gpu_test_util.h"
#include "kernels/gpu.h"
#include "model/test_util.h"
#include "model/tokenizer.h"
#include "local/local_engine.h"

namespace cascade {
namespace {

struct ModelCase {
  std::string model, prompt;
};

class GpuModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(GpuModel, LogitsMatchTheCpuBackend) {
  REQUIRE_GPU();
  const std::string path = testing::SharedPath(GetParam().model);
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok());
  StageOptions o;
  o.quantized_activations = false;
  auto cpu = Stage::Create(**src, o);
  auto be = CreateCudaBackend({});
  ASSERT_TRUE(be.ok()) << be.status();
  auto gpu = Stage::Create(**src, o, std::move(*be));
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status();
  const auto ids = testing::ReadIds(testing::SharedPath(GetParam().prompt));
  const double d = testing::MaxAbsDiff(testing::AllLogits(**gpu, ids), testing::AllLogits(**cpu, ids));
  EXPECT_LT(d, 1e-3);
  RecordProperty("max_abs_logit_diff", std::to_string(d));
  EXPECT_EQ(testing::GreedyDecode(**gpu, ids, ids.size() + 16),
            testing::GreedyDecode(**cpu, ids, ids.size() + 16));
}

INSTANTIATE_TEST_SUITE_P(
    Models, GpuModel,
    ::testing::Values(ModelCase{"models/stories260K/stories260K.gguf", "models/stories260K/prompt.ids"},
                      ModelCase{"models/tiny-llama/tiny-llama-f16.gguf", "models/tiny-llama/prompt.ids"}));

// Two pipeline stages, both on GPU 0, through the scheduler: the CPU's greedy ids.
TEST(GpuPipeline, TwoStagesOnOneGpuGiveTheCpuText) {
  REQUIRE_GPU();
  const std::string path = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  CASCADE_REQUIRE_SHARED(path);
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok());
  auto tok = Tokenizer::FromSource(**src);
  ASSERT_TRUE(tok.ok());
  auto run = [&](DeviceSpec device, int stages) {
    LocalEngineOptions eo;
    eo.stages = EvenLayerRanges(static_cast<int>((*src)->config().n_layers), stages);
    eo.stage.quantized_activations = false;
    eo.device = device;
    auto engine = LocalEngine::Create(**src, **tok, eo);
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<int32_t> ids;
    if (!engine.ok()) return ids;
    SequenceRequest r;
    r.prompt = testing::ReadIds(testing::SharedPath("models/tiny-llama/prompt.ids"));
    r.max_tokens = 24;
    r.ignore_eos = true;
    r.sampling = SamplingParams::Greedy();
    auto stream = (*engine)->scheduler().Submit(std::move(r));
    EXPECT_TRUE(stream.ok());
    if (!stream.ok()) return ids;
    for (;;) {
      auto e = (*stream)->Next(std::chrono::seconds(120));
      if (!e) break;
      ids.insert(ids.end(), e->ids.begin(), e->ids.end());
      if (e->last) break;
    }
    return ids;
  };
  const std::vector<int32_t> cpu = run({DeviceKind::kCpu, 0}, 1);
  ASSERT_EQ(cpu.size(), 24u);
  EXPECT_EQ(run({DeviceKind::kCuda, 0}, 2), cpu);
}

}  // namespace
}  // namespace cascade
