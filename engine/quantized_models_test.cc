// Quantized models end to end: the engine's logits on ../shared/models/tiny-llama-q against
// the float64 reference (exact path: weights dequantized, float activations, within 1e-4;
// 8-bit activations as llama.cpp does, within 5e-2 max abs), batch invariance on quantized
// weights (each sequence of a batch bit-identical to the same sequence alone, at any
// thread count), and `cascade quantize` (QuantizeModel) output loading in the engine with
// every matrix equal to the reference quantize-then-dequantize of its source rows.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/stage.h"
#include "engine/stage_test_util.h"
#include "gtest/gtest.h"
#include "model/gguf.h"
#include "tensor/quant.h"
#include "model/quantize.h"
#include "model/test_util.h"
#include "util/npy.h"

namespace cascade {
namespace {

using testing::AllLogits;
using testing::MaxAbsDiff;
using testing::ReadIds;

std::string QPath(const std::string& name) {
  return testing::SharedPath("models/tiny-llama-q/" + name);
}

class TinyLlamaQ : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyLlamaQ, LogitsMatchTheReference) {
  const std::string type = GetParam();
  const std::string model = QPath("tiny-llama-q-" + type + ".gguf");
  CASCADE_REQUIRE_SHARED(model);
  auto src = ModelSource::Open(model);
  ASSERT_TRUE(src.ok()) << src.status();
  const auto prompt = ReadIds(QPath("prompt.ids"));
  auto want = ReadNpyF32(QPath(type + ".logits.npy"));
  ASSERT_TRUE(want.ok()) << want.status();
  for (bool quantized : {false, true}) {
    StageOptions opt;
    opt.threads = 2;
    opt.quantized_activations = quantized;
    auto stage = Stage::Create(**src, opt);
    ASSERT_TRUE(stage.ok()) << stage.status();
    const double diff = MaxAbsDiff(AllLogits(**stage, prompt), want->data);
    const double bound = quantized ? 5e-2 : 1e-4;
    EXPECT_LT(diff, bound) << type << (quantized ? ", 8-bit activations" : ", float activations");
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3g", diff);
    RecordProperty(quantized ? "max_abs_diff_q8_activations" : "max_abs_diff_f32_activations", buf);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, TinyLlamaQ,
                         ::testing::Values("Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K"));

// Each sequence of a mixed batch (prefill chunks and single decode tokens of several
// sequences) gives bit for bit the logits it gives alone, on 1 or 3 threads.
TEST(QuantizedBatchInvariance, SequencesAloneEqualSequencesInABatch) {
  for (const std::string type : {"Q4_K_M", "Q8_0", "Q6_K"}) {
    const std::string model = QPath("tiny-llama-q-" + type + ".gguf");
    CASCADE_REQUIRE_SHARED(model);
    auto src = ModelSource::Open(model);
    ASSERT_TRUE(src.ok());
    const auto prompt = ReadIds(QPath("prompt.ids"));
    // The last sequence (the prompt twice) is computed alone one token at a time (the
    // decode tiles) and in the batch with the others (over 32 tokens: the prefill panels).
    std::vector<int32_t> twice = prompt;
    twice.insert(twice.end(), prompt.begin() + 1, prompt.end());
    const std::vector<std::vector<int32_t>> seqs = {
        prompt, {1, 450, 4996}, std::vector<int32_t>(prompt.begin(), prompt.begin() + 9), twice};
    std::vector<std::vector<float>> alone;
    {
      StageOptions opt;
      opt.kv_sequences = 4;
      auto stage = Stage::Create(**src, opt);
      ASSERT_TRUE(stage.ok());
      for (size_t s = 0; s + 1 < seqs.size(); ++s) alone.push_back(AllLogits(**stage, seqs[s], s));
      std::vector<float> step_by_step;
      for (size_t i = 0; i < twice.size(); ++i) {
        std::vector<float> out;
        const Batch b = {{twice[i], 3, static_cast<int32_t>(i), true}};
        ASSERT_TRUE((*stage)->Forward(b, {}, &out).ok());
        step_by_step.insert(step_by_step.end(), out.begin(), out.end());
      }
      alone.push_back(std::move(step_by_step));
    }
    for (int threads : {1, 3}) {
      StageOptions opt;
      opt.kv_sequences = 4;
      opt.threads = threads;
      auto stage = Stage::Create(**src, opt);
      ASSERT_TRUE(stage.ok());
      // Step 1: the first 2 tokens of each sequence together; step 2: the rest together.
      std::vector<std::vector<float>> got(seqs.size());
      for (int step = 0; step < 2; ++step) {
        Batch b;
        std::vector<size_t> owner;
        for (size_t s = 0; s < seqs.size(); ++s) {
          const size_t lo = step == 0 ? 0 : 2, hi = step == 0 ? 2 : seqs[s].size();
          for (size_t i = lo; i < hi; ++i) {
            b.push_back({seqs[s][i], static_cast<SeqId>(s), static_cast<int32_t>(i), true});
            owner.push_back(s);
          }
        }
        std::vector<float> out;
        ASSERT_TRUE((*stage)->Forward(b, {}, &out).ok());
        const size_t V = (*src)->config().vocab_size;
        for (size_t i = 0; i < owner.size(); ++i) {
          got[owner[i]].insert(got[owner[i]].end(), out.begin() + i * V, out.begin() + (i + 1) * V);
        }
      }
      for (size_t s = 0; s < seqs.size(); ++s) {
        ASSERT_EQ(got[s].size(), alone[s].size());
        EXPECT_EQ(std::memcmp(got[s].data(), alone[s].data(), got[s].size() * sizeof(float)), 0)
            << type << ": sequence " << s << " in a batch on " << threads << " threads";
      }
    }
  }
}

// QuantizeModel (what `cascade quantize` runs) on tiny-llama-f16: every matrix of the output
// equals the reference quantization of its source rows (rows of 688 are not a multiple of
// 32, so ffn_down falls back to F16), and the file runs in the engine.
TEST(QuantizeModel, OutputLoadsAndEqualsTheReferenceQuantization) {
  const std::string in = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  CASCADE_REQUIRE_SHARED(in);
  auto src_file = GgufFile::Open(in);
  ASSERT_TRUE(src_file.ok());
  const auto prompt = ReadIds(testing::SharedPath("models/tiny-llama/prompt.ids"));
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_K,
                          TensorType::kQ5_K, TensorType::kQ6_K}) {
    const std::string out = ::testing::TempDir() + "/cascade_quantize_" +
                            std::to_string(::getpid()) + "_" + TensorTypeName(type) + ".gguf";
    QuantizeReport report;
    ASSERT_TRUE(QuantizeModel(in, out, type, &report).ok());
    auto q = GgufFile::Open(out);
    ASSERT_TRUE(q.ok()) << q.status();
    int checked = 0;
    for (const GgufTensorInfo& t : (*src_file)->tensors()) {
      const GgufTensorInfo* o = nullptr;
      for (const GgufTensorInfo& c : (*q)->tensors()) {
        if (c.name == t.name) o = &c;
      }
      ASSERT_NE(o, nullptr) << t.name;
      if (t.n_dims != 2) {  // norms keep their type and bytes
        ASSERT_EQ(o->nbytes, t.nbytes);
        EXPECT_EQ(std::memcmp(o->data, t.data, t.nbytes), 0) << t.name;
        continue;
      }
      ++checked;
      // The target type, or Q8_0 (F16 when even that does not divide the rows) as fallback.
      const int64_t cols = t.ne[0];
      TensorType want_type = type;
      if (cols % Traits(type).block_elems != 0) {
        want_type = cols % kQK == 0 ? TensorType::kQ8_0 : TensorType::kF16;
      }
      EXPECT_EQ(o->type, want_type) << t.name;
      uint64_t in_rb = 0, out_rb = 0;
      ASSERT_TRUE(RowBytes(t.type, cols, &in_rb) && RowBytes(o->type, cols, &out_rb));
      std::vector<float> row(cols), want(cols), got(cols);
      std::vector<uint8_t> qrow(out_rb);
      for (uint64_t r = 0; r < t.nbytes / in_rb; ++r) {
        ASSERT_TRUE(DequantizeRow(t.type, t.data + r * in_rb, cols, row.data()));
        ASSERT_TRUE(QuantizeRow(o->type, row.data(), cols, qrow.data()));
        ASSERT_TRUE(DequantizeRow(o->type, qrow.data(), cols, want.data()));
        ASSERT_TRUE(DequantizeRow(o->type, o->data + r * out_rb, cols, got.data()));
        ASSERT_EQ(std::memcmp(got.data(), want.data(), cols * sizeof(float)), 0)
            << t.name << " row " << r;
      }
    }
    EXPECT_EQ(checked, report.matrices) << TensorTypeName(type);
    auto src = ModelSource::Open(out);
    ASSERT_TRUE(src.ok()) << src.status();
    StageOptions opt;
    opt.threads = 2;
    auto stage = Stage::Create(**src, opt);
    ASSERT_TRUE(stage.ok()) << stage.status();
    const auto logits = AllLogits(**stage, prompt);
    ASSERT_EQ(logits.size(), prompt.size() * 32000);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    std::remove(out.c_str());
  }
}

}  // namespace
}  // namespace cascade
