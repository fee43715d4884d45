// The architectures beyond Llama and Qwen2 (Mixtral: Llama with experts, and Qwen2-MoE
// included) against the tiny reference models of
// ../shared/models/arch (README there: what each one exercises, float64 NumPy references
// cross-checked with llama.cpp), and Qwen3-MoE against engine/testdata/qwen3moe (a model
// written here from a formula, its float64 NumPy reference made by the script there): all
// rows of logits (prompt + greedy path) within 1e-4
// at F32 on every CPU kernel table, the same greedy ids, a two-stage pipeline bit for
// bit the whole model, and a sequence's logits bit for bit alone or batched with another
// (small KV blocks, so that sliding windows start inside blocks and skip whole ones).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/stage.h"
#include "engine/stage_test_util.h"
#include "engine/testdata/script_models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/gguf_writer.h"
#include "model/memory.h"
#include "model/tensor_parallel.h"
#include "model/test_util.h"
#include "nlohmann/json.hpp"
#include "util/npy.h"

namespace cascade {
namespace {

using testing::AllLogits;
using testing::GreedyDecode;
using testing::MaxAbsDiff;
using testing::ReadIds;
using testing::MiniGemma3;
using testing::MiniMistralSwa;
using testing::MiniPhi3LongRope;
using testing::MiniQwen3Moe;

std::string ArchPath(const std::string& rel) { return testing::SharedPath("models/arch/" + rel); }

// The test's largest |logit - reference|, as a property of its XML report.
void RecordDiff(double diff) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", diff);
  ::testing::Test::RecordProperty("max_abs_logit_diff", text);
}

std::string SourcePath(const std::string& rel) {
  return std::string(CASCADE_SOURCE_DIR) + "/" + rel;
}

// Each model's file, reference ids (prompt, then the greedy path) and logits (a row per id).
class ArchModels : public ::testing::TestWithParam<std::string> {
 protected:
  bool Generated() const { return GetParam() == "qwen3moe"; }
  std::string Model() const {
    return Generated() ? MiniQwen3Moe() : ArchPath("mini-" + GetParam() + "-f32.gguf");
  }
  std::vector<int32_t> Ids() const {
    return ReadIds(Generated() ? SourcePath("engine/testdata/qwen3moe/mini-qwen3moe.ids")
                               : ArchPath("mini-" + GetParam() + "-f32.greedy32.ids"));
  }
  std::vector<int32_t> Prompt() const {
    if (!Generated()) return ReadIds(ArchPath("prompt.ids"));
    const auto ids = Ids();
    return std::vector<int32_t>(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 10));
  }
  absl::StatusOr<NpyArray> Logits() const {
    return ReadNpyF32(Generated() ? SourcePath("engine/testdata/qwen3moe/mini-qwen3moe.logits.npy")
                                  : ArchPath("mini-" + GetParam() + "-f32.logits.npy"));
  }
  bool Moe() const {
    return GetParam() != "qwen3" && GetParam() != "phi3" && GetParam() != "gemma2";
  }
  // general.architecture: Mixtral is GGUF "llama" with experts.
  std::string GgufArch() const { return GetParam() == "mixtral" ? "llama" : GetParam(); }
};

TEST_P(ArchModels, LogitsAndGreedyIdsMatchTheReferenceOnEveryKernelTable) {
  CASCADE_REQUIRE_SHARED(Model());
  auto src = ModelSource::Open(Model());
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->config().arch, GgufArch());
  const auto ids = Ids();
  const auto prompt = Prompt();
  ASSERT_EQ(ids.size(), Generated() ? 24u : 45u);
  ASSERT_EQ(prompt.size(), Generated() ? 10u : 13u);
  auto want = Logits();
  ASSERT_TRUE(want.ok()) << want.status();
  double worst = 0;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    CpuBackendOptions bo;
    bo.threads = 2;
    bo.max_isa = isa;
    StageOptions opt;
    opt.threads = 2;
    auto stage = Stage::Create(**src, opt, std::make_unique<CpuBackend>(bo));
    ASSERT_TRUE(stage.ok()) << stage.status();
    const double diff = MaxAbsDiff(AllLogits(**stage, ids), want->data);
    EXPECT_LT(diff, 1e-4) << "max |logit - reference|, ISA cap " << CpuIsaName(isa);
    worst = std::max(worst, diff);
    EXPECT_EQ(GreedyDecode(**stage, prompt, ids.size()), ids) << "ISA cap " << CpuIsaName(isa);
  }
  RecordDiff(worst);
}

TEST_P(ArchModels, TwoStagesGiveTheWholeModelsLogitsBitForBit) {
  CASCADE_REQUIRE_SHARED(Model());
  auto src = ModelSource::Open(Model());
  ASSERT_TRUE(src.ok()) << src.status();
  const auto ids = Ids();
  auto whole = Stage::Create(**src, {});
  ASSERT_TRUE(whole.ok()) << whole.status();
  const auto want = AllLogits(**whole, ids);
  const int L = static_cast<int>((*src)->config().n_layers);
  for (int k : {1, L / 2 + 1, L - 1}) {
    if (k <= 0 || k >= L) continue;
    StageOptions a, b;
    a.layers = {0, k};
    b.layers = {k, L};
    auto s0 = Stage::Create(**src, a);
    auto s1 = Stage::Create(**src, b);
    ASSERT_TRUE(s0.ok() && s1.ok());
    Batch batch;
    for (size_t i = 0; i < ids.size(); ++i) {
      batch.push_back({ids[i], 3, static_cast<int32_t>(i), true});
    }
    std::vector<float> hidden, logits;
    ASSERT_TRUE((*s0)->Forward(batch, {}, &hidden).ok());
    ASSERT_TRUE((*s1)->Forward(batch, hidden, &logits).ok());
    ASSERT_EQ(logits.size(), want.size());
    EXPECT_EQ(std::memcmp(logits.data(), want.data(), want.size() * sizeof(float)), 0)
        << "split at layer " << k;
  }
}

TEST_P(ArchModels, SequencesDoNotAffectEachOther) {
  CASCADE_REQUIRE_SHARED(Model());
  auto src = ModelSource::Open(Model());
  ASSERT_TRUE(src.ok()) << src.status();
  StageOptions opt;
  opt.kv_sequences = 4;
  opt.kv_block_size = 4;  // windows of 5 and 6 begin inside blocks and pass whole ones
  opt.threads = 2;
  auto stage = Stage::Create(**src, opt);
  ASSERT_TRUE(stage.ok()) << stage.status();
  const auto ids = Ids();
  const std::vector<int32_t> a(ids.begin(), ids.begin() + 21);
  const std::vector<int32_t> b(ids.begin() + (ids.size() >= 45 ? 20 : 3), ids.end());
  const auto alone_a = AllLogits(**stage, a, 10);
  const auto alone_b = AllLogits(**stage, b, 11);
  // The two interleaved in one batch, b's prefill in two chunks.
  Batch batch;
  for (size_t i = 0; i < 9; ++i) batch.push_back({b[i], 11, static_cast<int32_t>(i), true});
  for (size_t i = 0; i < a.size(); ++i) batch.push_back({a[i], 10, static_cast<int32_t>(i), true});
  std::vector<float> mixed;
  ASSERT_TRUE((*stage)->Forward(batch, {}, &mixed).ok());
  Batch rest;
  for (size_t i = 9; i < b.size(); ++i) rest.push_back({b[i], 11, static_cast<int32_t>(i), true});
  std::vector<float> tail;
  ASSERT_TRUE((*stage)->Forward(rest, {}, &tail).ok());
  const size_t row = static_cast<size_t>((*src)->config().vocab_size) * sizeof(float);
  const size_t V = row / sizeof(float);
  EXPECT_EQ(std::memcmp(mixed.data() + 9 * V, alone_a.data(), a.size() * row), 0);
  EXPECT_EQ(std::memcmp(mixed.data(), alone_b.data(), 9 * row), 0);
  EXPECT_EQ(std::memcmp(tail.data(), alone_b.data() + 9 * V, (b.size() - 9) * row), 0);
}

// A copy of a GGUF file without the tensor `drop`, with `extra` (a 1-D F32 tensor of 16
// zeros) when set, and the metadata `edit` sets; returns its path.
std::string CopyGguf(const GgufFile& f, const std::string& drop, const std::string& extra,
                     const std::function<void(GgufWriter&)>& edit = {}) {
  GgufWriter w;
  for (const auto& [key, value] : f.metadata()) w.SetValue(key, value);
  if (edit) edit(w);
  w.set_alignment(static_cast<uint32_t>(f.alignment()));
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name == drop) continue;
    w.AddTensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                std::span<const uint8_t>(t.data, t.nbytes));
  }
  static const float kZeros[16] = {};
  if (!extra.empty()) {
    w.AddTensor(extra, TensorType::kF32, {16},
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kZeros), sizeof(kZeros)));
  }
  static int copies = 0;  // one file per copy: an open source maps its file
  const std::string path = ::testing::TempDir() + "/arch_copy_" + std::to_string(::getpid()) + "_" +
                           std::to_string(copies++) + ".gguf";
  absl::Status st = w.WriteFile(path);
  EXPECT_TRUE(st.ok()) << st;
  return path;
}

// What the file lacks is named: a tensor the architecture needs, or a feature not
// implemented (Phi-3 LongRoPE).
TEST_P(ArchModels, AFileMissingATensorIsRefusedNamingIt) {
  CASCADE_REQUIRE_SHARED(Model());
  auto gguf = GgufFile::Open(Model());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const std::string drop = GetParam() == "qwen3"      ? "blk.1.attn_k_norm.weight"
                           : GetParam() == "phi3"     ? "blk.2.attn_qkv.weight"
                           : GetParam() == "mixtral"  ? "blk.2.ffn_down_exps.weight"
                           : GetParam() == "qwen3moe" ? "blk.1.ffn_gate_inp.weight"
                           : GetParam() == "qwen2moe" ? "blk.1.ffn_gate_inp_shexp.weight"
                                                      : "blk.3.post_ffw_norm.weight";
  const std::string path = CopyGguf(**gguf, drop, "");
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok()) << src.status();
  auto stage = Stage::Create(**src, {});
  EXPECT_THAT(stage.status().message(), ::testing::HasSubstr("'" + drop + "' is missing"));
  std::remove(path.c_str());
}

// A formula-written model (engine/testdata/script_models.h) against its float64 NumPy
// reference (engine/testdata/<dir>/<name>.ids and .logits.npy): logits within 1e-4 and the
// greedy ids on every kernel table, with small KV blocks so that windows span blocks; then
// split into two stages at each layer boundary, bit for bit the whole model.
void ExpectScriptModelMatchesItsReference(const ModelSource& src, const std::string& dir,
                                          const std::string& name) {
  const auto ids = ReadIds(SourcePath("engine/testdata/" + dir + "/" + name + ".ids"));
  ASSERT_GT(ids.size(), 10u);
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 10);
  auto want = ReadNpyF32(SourcePath("engine/testdata/" + dir + "/" + name + ".logits.npy"));
  ASSERT_TRUE(want.ok()) << want.status();
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    CpuBackendOptions bo;
    bo.threads = 2;
    bo.max_isa = isa;
    StageOptions opt;
    opt.kv_block_size = 4;
    auto stage = Stage::Create(src, opt, std::make_unique<CpuBackend>(bo));
    ASSERT_TRUE(stage.ok()) << stage.status();
    EXPECT_LT(MaxAbsDiff(AllLogits(**stage, ids), want->data), 1e-4) << "ISA cap " << CpuIsaName(isa);
    EXPECT_EQ(GreedyDecode(**stage, prompt, ids.size()), ids) << "ISA cap " << CpuIsaName(isa);
  }
  auto whole = Stage::Create(src, {});
  ASSERT_TRUE(whole.ok()) << whole.status();
  const auto want_bits = AllLogits(**whole, ids);
  const int layers = static_cast<int>(src.config().n_layers);
  for (int k = 1; k < layers; ++k) {
    StageOptions a, b;
    a.layers = {0, k};
    b.layers = {k, layers};
    auto s0 = Stage::Create(src, a);
    auto s1 = Stage::Create(src, b);
    ASSERT_TRUE(s0.ok() && s1.ok());
    Batch batch;
    for (size_t i = 0; i < ids.size(); ++i) batch.push_back({ids[i], 3, static_cast<int32_t>(i), true});
    std::vector<float> hidden, logits;
    ASSERT_TRUE((*s0)->Forward(batch, {}, &hidden).ok());
    ASSERT_TRUE((*s1)->Forward(batch, hidden, &logits).ok());
    EXPECT_EQ(logits, want_bits) << "split at layer " << k;
  }
}

// Phi-3 LongRoPE with the long factors (a context stretched 4x) and the short ones.
TEST(Phi3, LongRopeMatchesTheReferenceWithLongAndShortFactors) {
  for (const auto& [name, context] : {std::pair<std::string, int64_t>{"long", 256}, {"short", 64}}) {
    SCOPED_TRACE(name);
    const std::string path = MiniPhi3LongRope(context);
    auto src = ModelSource::Open(path);
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_EQ((*src)->config().rope_scaling.type, RopeScalingType::kLongRope);
    ExpectScriptModelMatchesItsReference(**src, "phi3longrope", "mini-phi3-" + name);
    std::remove(path.c_str());
  }
}

// A Mistral-style window on a llama file (24 positions over a window of 5).
TEST(MistralSlidingWindow, MatchesTheReference) {
  const std::string path = MiniMistralSwa();
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->config().WindowOf(1), 5);
  ExpectScriptModelMatchesItsReference(**src, "mistralswa", "mini-mistral-swa");
  std::remove(path.c_str());
}

// Gemma 3: windowed layers with their local RoPE base, a global one with the scaled base.
TEST(Gemma3, MatchesTheReferenceAndSplitsBitForBit) {
  const std::string path = MiniGemma3();
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok()) << src.status();
  const ModelConfig& c = (*src)->config();
  EXPECT_EQ(c.WindowOf(4), 4);
  EXPECT_EQ(c.WindowOf(5), 0);
  EXPECT_TRUE(c.UsesLocalRope(0));
  EXPECT_FALSE(c.UsesLocalRope(5));
  ExpectScriptModelMatchesItsReference(**src, "gemma3", "mini-gemma3");
  std::remove(path.c_str());
}

// A LongRoPE file needs both factor tensors; one alone is refused, naming the other.
TEST(Phi3, LongRopeWithOneFactorTensorIsRefusedNamingTheOther) {
  const std::string model = ArchPath("mini-phi3-f32.gguf");
  CASCADE_REQUIRE_SHARED(model);
  auto gguf = GgufFile::Open(model);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const std::string path = CopyGguf(**gguf, "", "rope_factors_long.weight");
  auto src = ModelSource::Open(path);
  EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(src.status().message(), ::testing::HasSubstr("'rope_factors_short.weight' is missing"));
  std::remove(path.c_str());
}

// Gemma 2's query scale: 1/sqrt(head_dim) unless the file says otherwise (the 27B's
// query_pre_attn_scalar = dim / heads, here 16 instead of 32, moves the logits by ~0.1).
TEST(Gemma2, QueryPreAttnScalarFromTheFileScalesTheQueries) {
  const std::string model = ArchPath("mini-gemma2-f32.gguf");
  CASCADE_REQUIRE_SHARED(model);
  auto gguf = GgufFile::Open(model);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const std::string path = CopyGguf(**gguf, "", "", [](GgufWriter& w) {
    w.SetFloat32("gemma2.attention.query_pre_attn_scalar", 16.0f);
  });
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_FLOAT_EQ((*src)->config().AttentionScale(), 0.25f);
  // 46 layers, only the 27B's: dim / heads (64 / 4 = 16) without the key, as llama.cpp does.
  const std::string as_27b =
      CopyGguf(**gguf, "", "", [](GgufWriter& w) { w.SetUint32("gemma2.block_count", 46); });
  auto src_27b = ModelSource::Open(as_27b);
  ASSERT_TRUE(src_27b.ok()) << src_27b.status();
  EXPECT_FLOAT_EQ((*src_27b)->config().AttentionScale(), 0.25f);
  std::remove(as_27b.c_str());
  auto stage = Stage::Create(**src, {});
  ASSERT_TRUE(stage.ok()) << stage.status();
  auto want = ReadNpyF32(ArchPath("mini-gemma2-f32.logits.npy"));
  ASSERT_TRUE(want.ok()) << want.status();
  const auto ids = ReadIds(ArchPath("mini-gemma2-f32.greedy32.ids"));
  EXPECT_GT(MaxAbsDiff(AllLogits(**stage, ids), want->data), 1e-2);
  std::remove(path.c_str());
}

// The Hugging Face names of a GGUF gemma2 tensor ("" for none).
std::string Gemma2HfName(const std::string& gguf) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"}};
  for (const auto& [g, h] : kTop) {
    if (gguf == g) return h;
  }
  static const std::pair<const char*, const char*> kLeaf[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}};
  int layer = -1;
  char leaf[64] = {};
  if (std::sscanf(gguf.c_str(), "blk.%d.%63s", &layer, leaf) != 2) return "";
  for (const auto& [g, h] : kLeaf) {
    if (std::string(leaf) == g) return "model.layers." + std::to_string(layer) + "." + h;
  }
  return "";
}

// mini-gemma2 as a Hugging Face folder: config.json and one F32 model.safetensors, the norm
// weights stored as w (the GGUF holds 1 + w). Returns the folder.
std::string WriteGemma2AsHf(const GgufFile& f) {
  const std::string dir = ::testing::TempDir() + "/gemma2_hf_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string name = Gemma2HfName(t.name);
    if (name.empty()) continue;
    std::vector<float> v(t.elements());
    std::memcpy(v.data(), t.data, t.nbytes);
    if (name.find("norm") != std::string::npos) {
      for (float& x : v) x -= 1.0f;
    }
    std::vector<int64_t> shape(t.ne, t.ne + t.n_dims);
    std::reverse(shape.begin(), shape.end());
    header[name] = {{"dtype", "F32"},
                    {"shape", shape},
                    {"data_offsets", {data.size(), data.size() + t.nbytes}}};
    const auto* bytes = reinterpret_cast<const uint8_t*>(v.data());
    data.insert(data.end(), bytes, bytes + t.nbytes);
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  std::ofstream st(dir + "/model.safetensors", std::ios::binary);
  const uint64_t len = text.size();
  st.write(reinterpret_cast<const char*>(&len), 8);
  st.write(text.data(), static_cast<std::streamsize>(text.size()));
  st.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return dir;
}

// mini-gemma2 from a Hugging Face folder (norms stored as w, the four norms under their HF
// names, query_pre_attn_scalar from config.json): the reference logits within 1e-4 and the
// same greedy ids, as from the GGUF file.
TEST(Gemma2, AHuggingFaceFolderGivesTheReferenceLogits) {
  const std::string model = ArchPath("mini-gemma2-f32.gguf");
  CASCADE_REQUIRE_SHARED(model);
  auto gguf = GgufFile::Open(model);
  auto from_gguf = ModelSource::Open(model);
  ASSERT_TRUE(gguf.ok() && from_gguf.ok());
  const ModelConfig& c = (*from_gguf)->config();
  const std::string dir = WriteGemma2AsHf(**gguf);
  const nlohmann::json config = {{"architectures", {"Gemma2ForCausalLM"}},
                                 {"hidden_size", c.dim},
                                 {"intermediate_size", c.ffn_dim},
                                 {"num_attention_heads", c.n_heads},
                                 {"num_key_value_heads", c.n_kv_heads},
                                 {"head_dim", c.head_dim},
                                 {"num_hidden_layers", c.n_layers},
                                 {"vocab_size", c.vocab_size},
                                 {"max_position_embeddings", c.context_length},
                                 {"rms_norm_eps", c.norm_eps},
                                 {"rope_theta", c.rope_theta},
                                 {"query_pre_attn_scalar", c.head_dim},
                                 {"attn_logit_softcapping", c.attn_softcap},
                                 {"final_logit_softcapping", c.final_softcap},
                                 {"sliding_window", c.sliding_window},
                                 {"hidden_activation", "gelu_pytorch_tanh"},
                                 {"tie_word_embeddings", true}};
  std::ofstream(dir + "/config.json") << config.dump();
  auto src = ModelSource::Open(dir);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->config().norm_weight_offset, 1.0);
  EXPECT_TRUE((*src)->config().tied_embeddings);
  auto stage = Stage::Create(**src, {});
  ASSERT_TRUE(stage.ok()) << stage.status();
  auto want = ReadNpyF32(ArchPath("mini-gemma2-f32.logits.npy"));
  ASSERT_TRUE(want.ok()) << want.status();
  const auto ids = ReadIds(ArchPath("mini-gemma2-f32.greedy32.ids"));
  const double diff = MaxAbsDiff(AllLogits(**stage, ids), want->data);
  EXPECT_LT(diff, 1e-4);
  RecordDiff(diff);
  EXPECT_EQ(GreedyDecode(**stage, ReadIds(ArchPath("prompt.ids")), ids.size()), ids);
  std::filesystem::remove_all(dir);
}

// The CPU backend saying it has none of the optional features (as the CUDA backend does):
// every operation forwarded, Supports false.
class WithoutFeatures final : public Backend {
 public:
  std::string name() const override { return "featureless"; }
  int num_threads() const override { return 1; }
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override { return cpu_.Allocate(bytes); }
  void CopyToDevice(void* d, const void* s, size_t b) override { cpu_.CopyToDevice(d, s, b); }
  void CopyToHost(void* d, const void* s, size_t b) override { cpu_.CopyToHost(d, s, b); }
  void CopyOnDevice(void* d, const void* s, size_t b) override { cpu_.CopyOnDevice(d, s, b); }
  absl::StatusOr<TensorView> UploadWeight(const TensorView& h) override {
    return cpu_.UploadWeight(h);
  }
  void MatMul(const TensorView& w, const float* x, int64_t n, float* y) override {
    cpu_.MatMul(w, x, n, y);
  }
  void GetRows(const TensorView& w, const int32_t* ids, int64_t n, float* out) override {
    cpu_.GetRows(w, ids, n, out);
  }
  void RmsNorm(const float* x, const float* w, int64_t n, int64_t d, float e, float* o) override {
    cpu_.RmsNorm(x, w, n, d, e, o);
  }
  void Rope(float* x, const int32_t* pos, int64_t n, int h, int hd, int rd, RopeLayout l,
            const float* f) override {
    cpu_.Rope(x, pos, n, h, hd, rd, l, f);
  }
  void SiluMul(const float* g, const float* u, int64_t c, float* o) override {
    cpu_.SiluMul(g, u, c, o);
  }
  bool Supports(BackendFeature) const override { return false; }
  void GeluMul(const float*, const float*, int64_t, float*) override { ADD_FAILURE(); }
  void Scale(float*, int64_t, float) override { ADD_FAILURE(); }
  void SoftCap(float*, int64_t, float) override { ADD_FAILURE(); }
  void Add(const float* x, int64_t c, float* y) override { cpu_.Add(x, c, y); }
  void AddBias(const float* b, int64_t n, int64_t d, float* x) override {
    cpu_.AddBias(b, n, d, x);
  }
  void StoreKv(const float* k, const float* v, const int64_t* rows, int64_t n, const KvLayout& l,
               void* kp, void* vp) override {
    cpu_.StoreKv(k, v, rows, n, l, kp, vp);
  }
  void GatherRows(const float* s, const int64_t* r, int64_t n, int64_t d, float* o) override {
    cpu_.GatherRows(s, r, n, d, o);
  }
  void Attention(const AttentionParams& p) override {
    EXPECT_EQ(p.window, 0);
    EXPECT_EQ(p.softcap, 0);
    cpu_.Attention(p);
  }
  void Softmax(float* x, int64_t n, int64_t d) override { cpu_.Softmax(x, n, d); }

 private:
  CpuBackend cpu_{CpuBackendOptions{}};
};

// A backend without a feature the model needs refuses it at Create, naming the feature;
// Qwen3 needs none.
TEST_P(ArchModels, ABackendWithoutAFeatureTheModelNeedsRefusesIt) {
  CASCADE_REQUIRE_SHARED(Model());
  auto src = ModelSource::Open(Model());
  ASSERT_TRUE(src.ok()) << src.status();
  auto stage = Stage::Create(**src, {}, std::make_unique<WithoutFeatures>());
  if (GetParam() == "qwen3") {
    EXPECT_TRUE(stage.ok()) << stage.status();
    return;
  }
  EXPECT_EQ(stage.status().code(), absl::StatusCode::kUnimplemented);
  const std::string feature = Moe() ? "mixture-of-experts routing" : "sliding-window attention";
  EXPECT_THAT(stage.status().message(),
              ::testing::HasSubstr("needs " + feature +
                                   ", which the featureless backend does not implement"));
}

INSTANTIATE_TEST_SUITE_P(Architectures, ArchModels,
                         ::testing::Values("qwen3", "phi3", "gemma2", "mixtral", "qwen2moe",
                                           "qwen3moe"));

class MoeModels : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Model() const { return ArchPath("mini-" + GetParam() + "-f32.gguf"); }
};

// Every expert is resident (ParameterCount: the file's tensors, element for element); a
// token uses n_experts_used of them (ActiveParameterCount).
TEST_P(MoeModels, TotalAndActiveParametersCountTheExperts) {
  CASCADE_REQUIRE_SHARED(Model());
  auto gguf = GgufFile::Open(Model());
  auto src = ModelSource::Open(Model());
  ASSERT_TRUE(gguf.ok() && src.ok());
  const ModelConfig& c = (*src)->config();
  int64_t elements = 0;
  for (const GgufTensorInfo& t : (*gguf)->tensors()) elements += static_cast<int64_t>(t.elements());
  EXPECT_EQ(c.ParameterCount(), elements);
  const int64_t idle = c.n_layers * (c.n_experts - c.n_experts_used) * 3 * c.dim * c.expert_ffn_dim;
  EXPECT_EQ(c.ActiveParameterCount(), elements - idle);
  // The planner's bytes: all experts resident, n_experts_used of them read per token.
  const LayerRange all{0, static_cast<int>(c.n_layers)};
  EXPECT_EQ(StageWeightBytes(**src, all), static_cast<uint64_t>(elements) * sizeof(float));
  EXPECT_EQ(StageActiveWeightBytes(**src, all),
            static_cast<uint64_t>(elements - idle) * sizeof(float));
  // Activations: the widest of the experts' and the shared expert's FFN, plus routing.
  ModelConfig dense = c;
  dense.n_experts = dense.n_experts_used = dense.shared_expert_ffn_dim = 0;
  dense.ffn_dim = c.max_ffn_dim();
  EXPECT_GT(EstimateStageMemory(c, all, 0, 0, 64).activations,
            EstimateStageMemory(dense, all, 0, 0, 64).activations);
}

// A stacked expert tensor of the wrong shape is refused, naming it.
TEST_P(MoeModels, AnExpertTensorOfTheWrongShapeIsRefusedNamingIt) {
  CASCADE_REQUIRE_SHARED(Model());
  auto gguf = GgufFile::Open(Model());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const std::string name = "blk.1.ffn_up_exps.weight";
  const std::string path = CopyGguf(**gguf, name, name);  // now [16]
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok()) << src.status();
  auto stage = Stage::Create(**src, {});
  EXPECT_THAT(stage.status().message(), ::testing::HasSubstr("'" + name + "' has shape [16]"));
  std::remove(path.c_str());
}

// Experts are not split over ranks (no expert parallelism): tensor parallelism is refused,
// saying why, rather than computed wrongly.
// Expert parallelism needs a whole expert per rank: more ranks than experts are refused,
// naming both counts.
TEST_P(MoeModels, MoreRanksThanExpertsAreRefusedNamingBoth) {
  CASCADE_REQUIRE_SHARED(Model());
  auto src = ModelSource::Open(Model());
  ASSERT_TRUE(src.ok()) << src.status();
  const int64_t experts = (*src)->config().n_experts;
  auto shard = MakeTpShard((*src)->config(), 0, static_cast<int>(experts) + 1);
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shard.status().message(),
              ::testing::HasSubstr(absl::StrCat("tensor parallelism of ", experts + 1,
                                                " for a mixture of ", experts, " experts")));
  auto fits = MakeTpShard((*src)->config(), 2, 3);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->expert_begin, experts * 2 / 3);
  EXPECT_EQ(fits->expert_end, experts);
  EXPECT_FALSE(fits->shared_expert);
}

// Many sequences of different lengths in one batch (every expert gets a group of its own
// size): each sequence's logits are bit for bit its logits alone.
TEST_P(MoeModels, ABatchOfManySequencesGivesEachItsLogitsAlone) {
  CASCADE_REQUIRE_SHARED(Model());
  auto src = ModelSource::Open(Model());
  ASSERT_TRUE(src.ok()) << src.status();
  StageOptions opt;
  opt.kv_sequences = 12;
  opt.threads = 2;
  auto stage = Stage::Create(**src, opt);
  ASSERT_TRUE(stage.ok()) << stage.status();
  const auto ids = ReadIds(ArchPath("mini-" + GetParam() + "-f32.greedy32.ids"));
  Batch batch;
  std::vector<std::vector<float>> alone;
  for (int s = 0; s < 5; ++s) {
    const std::vector<int32_t> seq(ids.begin() + 5 * s, ids.begin() + 5 * s + 3 + 4 * s);
    alone.push_back(AllLogits(**stage, seq, 100 + s));
    for (size_t i = 0; i < seq.size(); ++i) {
      batch.push_back({seq[i], 200 + s, static_cast<int32_t>(i), true});
    }
  }
  std::vector<float> mixed;
  ASSERT_TRUE((*stage)->Forward(batch, {}, &mixed).ok());
  size_t offset = 0;
  for (int s = 0; s < 5; ++s) {
    EXPECT_EQ(std::memcmp(mixed.data() + offset, alone[s].data(), alone[s].size() * sizeof(float)),
              0)
        << "sequence " << s;
    offset += alone[s].size();
  }
}

INSTANTIATE_TEST_SUITE_P(Experts, MoeModels, ::testing::Values("mixtral", "qwen2moe"));

}  // namespace
}  // namespace cascade
