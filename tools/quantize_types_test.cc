// `cascade quantize --type T` (QuantizeModel) for the types llama.cpp's mixes fall back to
// (Q4_1, Q5_0, Q5_1), the 3- and 2-bit K-quants (Q3_K, Q2_K) and IQ4_NL/IQ4_XS, end to end: tiny-llama-q's Q8_0
// file (every row a multiple of 256) rewritten with every matrix as T, then run by the engine. Its
// logits at 64 sampled vocabulary ids (every 500th) of every prompt position are checked against
// references committed in tools/testdata/quantize/, made from the same file (the test writes it the
// way reference.py's docstring says):
// - TYPE.numpy.npy: reference.py, a float64 NumPy forward pass over the weights that NumPy
//   dequantizes from the block formats itself. Float activations (the exact path) must be
//   within 1e-4 of it, 8-bit activations within 5e-2 (tiny-llama-q's README bounds);
// - TYPE.llamacpp.npy, where present: llama.cpp's logits on that file (llamacpp.sh), within
//   5e-2 with 8-bit activations, as llama.cpp computes.
// A change to the quantizer changes the file, and the references must then be made again.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/stage.h"
#include "engine/stage_test_util.h"
#include "gtest/gtest.h"
#include "model/gguf.h"
#include "model/quantize.h"
#include "model/test_util.h"
#include "util/npy.h"

namespace cascade {
namespace {

using testing::AllLogits;
using testing::ReadIds;

constexpr int64_t kVocab = 32000, kSampleStride = 500;

std::string TestData(const std::string& name) {
  return std::string(CASCADE_SOURCE_DIR) + "/tools/testdata/quantize/" + name;
}

// Max abs difference of the sampled columns of logits [T, kVocab] against want [T, 64].
double SampledDiff(const std::vector<float>& logits, const std::vector<float>& want) {
  const int64_t samples = kVocab / kSampleStride;
  EXPECT_EQ(logits.size() / kVocab * samples, want.size());
  double m = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t t = static_cast<int64_t>(i) / samples, s = static_cast<int64_t>(i) % samples;
    m = std::max(m,
                 std::fabs(static_cast<double>(logits[t * kVocab + s * kSampleStride]) - want[i]));
  }
  return m;
}

class QuantizeTypes : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizeTypes, EngineLogitsMatchTheReferences) {
  const std::string name = GetParam();
  const TensorType type = *ParseTensorTypeName(name);
  const std::string in = testing::SharedPath("models/tiny-llama-q/tiny-llama-q-Q8_0.gguf");
  CASCADE_REQUIRE_SHARED(in);
  const std::string out = ::testing::TempDir() + "/cascade_quantize_types_" +
                          std::to_string(::getpid()) + "_" + name + ".gguf";
  QuantizeReport report;
  ASSERT_TRUE(QuantizeModel(in, out, type, &report).ok());
  EXPECT_EQ(report.fallbacks, 0);
  {
    auto file = GgufFile::Open(out);
    ASSERT_TRUE(file.ok()) << file.status();
    for (const GgufTensorInfo& t : (*file)->tensors()) {
      if (t.n_dims == 2) {
        EXPECT_EQ(t.type, type) << t.name;
      }
    }
  }
  auto src = ModelSource::Open(out);
  ASSERT_TRUE(src.ok()) << src.status();
  const auto prompt = ReadIds(testing::SharedPath("models/tiny-llama-q/prompt.ids"));
  auto numpy = ReadNpyF32(TestData(name + ".numpy.npy"));
  ASSERT_TRUE(numpy.ok()) << numpy.status();
  auto llamacpp = ReadNpyF32(TestData(name + ".llamacpp.npy"));
  for (bool quantized : {false, true}) {
    StageOptions opt;
    opt.threads = 2;
    opt.quantized_activations = quantized;
    auto stage = Stage::Create(**src, opt);
    ASSERT_TRUE(stage.ok()) << stage.status();
    const std::vector<float> got = AllLogits(**stage, prompt);
    ASSERT_EQ(got.size(), prompt.size() * kVocab);
    const double diff = SampledDiff(got, numpy->data);
    EXPECT_LT(diff, quantized ? 5e-2 : 1e-4)
        << name << (quantized ? ", 8-bit" : ", float") << " activations vs NumPy float64";
    std::printf("[ %s ] %s activations: max abs %.3g vs the NumPy float64 reference", name.c_str(),
                quantized ? "8-bit" : "float", diff);
    if (quantized && llamacpp.ok()) {
      const double d = SampledDiff(got, llamacpp->data);
      EXPECT_LT(d, 5e-2) << name << ", 8-bit activations vs llama.cpp";
      std::printf(", %.3g vs llama.cpp (llama.cpp vs NumPy: %.3g)", d,
                  testing::MaxAbsDiff(llamacpp->data, numpy->data));
    }
    std::printf("\n");
  }
  std::filesystem::remove(out);
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizeTypes,
                         ::testing::Values("Q4_1", "Q5_0", "Q5_1", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace cascade
