// The corrupted-file suite: every kind of broken model file must give an error that names
// the file and the problem, never a crash or an out-of-bounds read. CI also runs this
// suite in the sanitizer build (scripts/test.sh), under ASan and UBSan.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "engine/stage.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf_writer.h"
#include "model/model_source.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace cascade {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Loads a model the way the engine does: open, bind all layers, build a stage, and read
// its tokenizer. Returns the first error.
absl::Status LoadEverything(const std::string& path) {
  auto src = ModelSource::Open(path);
  if (!src.ok()) return src.status();
  StageOptions opt;
  auto stage = Stage::Create(**src, opt);
  if (!stage.ok()) return stage.status();
  if ((*src)->gguf() != nullptr) {
    auto tok = Tokenizer::FromGguf(*(*src)->gguf());
    if (!tok.ok()) return tok.status();
  }
  return absl::OkStatus();
}

class CorruptGguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // ctest runs tests of this suite in parallel processes: keep their files apart.
    const std::string dir = ::testing::TempDir() + "/corrupt_" + std::to_string(::getpid());
    ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
    dir_ = new std::string(dir);
    // A small SentencePiece-style vocabulary for the model to carry.
    GgufWriter v;
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      tokens.push_back(buf);
      scores.push_back(0);
      types.push_back(6);
    }
    while (tokens.size() < 512) {
      tokens.push_back("\xe2\x96\x81w" + std::to_string(tokens.size()));
      scores.push_back(-static_cast<float>(tokens.size()));
      types.push_back(1);
    }
    v.SetString("general.architecture", "llama");
    v.SetString("tokenizer.ggml.model", "llama");
    v.SetStringArray("tokenizer.ggml.tokens", tokens);
    v.SetFloat32Array("tokenizer.ggml.scores", scores);
    v.SetInt32Array("tokenizer.ggml.token_type", types);
    v.SetUint32("tokenizer.ggml.bos_token_id", 1);
    v.SetUint32("tokenizer.ggml.eos_token_id", 2);
    const std::string vocab = dir + "/corrupt_vocab.gguf";
    ASSERT_TRUE(v.WriteFile(vocab).ok());
    SyntheticOptions so;
    so.type = TensorType::kF32;
    so.tokenizer_gguf = vocab;
    const std::string path = dir + "/corrupt_base.gguf";
    ASSERT_TRUE(WriteSyntheticModel(*FindModelShape("tiny"), so, path).ok());
    base_ = new std::vector<uint8_t>(ReadAll(path));
  }
  static void TearDownTestSuite() {
    std::system(("rm -rf " + *dir_).c_str());
    delete base_;
    delete dir_;
  }

  // Position of the tensor info of `name` (just after its name string).
  static size_t TensorInfo(const std::vector<uint8_t>& b, const std::string& name) {
    std::vector<uint8_t> needle(8);
    uint64_t len = name.size();
    std::memcpy(needle.data(), &len, 8);
    needle.insert(needle.end(), name.begin(), name.end());
    auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
    EXPECT_NE(it, b.end()) << name;
    return static_cast<size_t>(it - b.begin()) + needle.size();
  }
  template <typename T>
  static void Poke(std::vector<uint8_t>& b, size_t at, T value) {
    std::memcpy(b.data() + at, &value, sizeof(T));
  }

  // Writes the variant and checks that loading it fails, naming the file and `problem`.
  static void ExpectError(const std::string& label, const std::vector<uint8_t>& bytes,
                          const std::string& problem) {
    const std::string path = *dir_ + "/" + label + ".gguf";
    WriteAll(path, bytes);
    absl::Status st = LoadEverything(path);
    ASSERT_FALSE(st.ok()) << label << " loaded without error";
    EXPECT_THAT(std::string(st.message()), HasSubstr(path)) << label;
    EXPECT_THAT(std::string(st.message()), HasSubstr(problem)) << label << ": " << st;
  }

  static std::vector<uint8_t>* base_;
  static std::string* dir_;
};
std::vector<uint8_t>* CorruptGguf::base_ = nullptr;
std::string* CorruptGguf::dir_ = nullptr;

TEST_F(CorruptGguf, BaseFileLoads) {
  const std::string path = *dir_ + "/ok.gguf";
  WriteAll(path, *base_);
  EXPECT_TRUE(LoadEverything(path).ok()) << LoadEverything(path);
}

TEST_F(CorruptGguf, Truncated) {
  for (size_t keep :
       {size_t{0}, size_t{3}, size_t{20}, size_t{200}, base_->size() / 2, base_->size() - 40}) {
    std::vector<uint8_t> b(base_->data(), base_->data() + keep);
    const std::string path = *dir_ + "/truncated.gguf";
    WriteAll(path, b);
    absl::Status st = LoadEverything(path);
    ASSERT_FALSE(st.ok()) << "truncated to " << keep;
    EXPECT_THAT(std::string(st.message()), HasSubstr(path));
    EXPECT_THAT(std::string(st.message()),
                ::testing::ContainsRegex("truncated|past the end|cannot fit|too short"))
        << st;
  }
}

TEST_F(CorruptGguf, WrongMagic) {
  auto b = *base_;
  std::memcpy(b.data(), "GGML", 4);
  ExpectError("magic", b, "not a GGUF file");
}

TEST_F(CorruptGguf, UnsupportedVersion) {
  auto b = *base_;
  Poke<uint32_t>(b, 4, 7);
  ExpectError("version", b, "unsupported version 7");
}

TEST_F(CorruptGguf, AbsurdCounts) {
  auto b = *base_;
  Poke<uint64_t>(b, 8, uint64_t{1} << 62);
  ExpectError("tensor_count", b, "exceed the limit");
  b = *base_;
  Poke<uint64_t>(b, 16, uint64_t{1} << 40);
  ExpectError("kv_count", b, "metadata_kv_count");
  // The first key's string length (right after the header).
  b = *base_;
  Poke<uint64_t>(b, 24, ~uint64_t{0});
  ExpectError("key_length", b, "exceeds the limit");
  // The token array's element count.
  b = *base_;
  const std::string key = "tokenizer.ggml.tokens";
  auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
  ASSERT_NE(it, b.end());
  const size_t count_at = static_cast<size_t>(it - b.begin()) + key.size() + 4 + 4;
  Poke<uint64_t>(b, count_at, uint64_t{1} << 60);
  ExpectError("array_count", b, "exceeds the limit");
  Poke<uint64_t>(b, count_at, uint64_t{1} << 25);
  ExpectError("array_count_fit", b, "cannot fit");
}

TEST_F(CorruptGguf, OffsetPastTheEnd) {
  auto b = *base_;
  const size_t info = TensorInfo(b, "blk.1.ffn_down.weight");
  // n_dims(4) + 2 dims(16) + type(4), then the offset
  Poke<uint64_t>(b, info + 4 + 16 + 4, uint64_t{1} << 40);
  ExpectError("offset", b, "lies past the end");
  Poke<uint64_t>(b, info + 4 + 16 + 4, 12345);
  ExpectError("misaligned", b, "not a multiple of the alignment");
}

TEST_F(CorruptGguf, SizeOverflow) {
  auto b = *base_;
  const size_t info = TensorInfo(b, "blk.0.attn_q.weight");
  Poke<uint64_t>(b, info + 4, uint64_t{1} << 39);
  Poke<uint64_t>(b, info + 12, uint64_t{1} << 39);
  ExpectError("overflow", b, "element count overflows");
  Poke<uint64_t>(b, info + 4, ~uint64_t{0});
  ExpectError("absurd_dim", b, "absurd size");
  b = *base_;
  Poke<uint32_t>(b, info, 9);
  ExpectError("n_dims", b, "n_dims 9");
}

TEST_F(CorruptGguf, UnknownAndUnsupportedTypes) {
  auto b = *base_;
  const size_t info = TensorInfo(b, "blk.0.attn_k.weight");
  Poke<uint32_t>(b, info + 4 + 16, 999);
  ExpectError("unknown_type", b, "unknown tensor type 999");
  // A known type the kernels cannot use (MXFP4) with a row length that is a valid multiple.
  Poke<uint32_t>(b, info + 4 + 16, 39);
  ExpectError("unsupported_type", b, "MXFP4");
}

TEST_F(CorruptGguf, MissingTensor) {
  auto b = *base_;
  const size_t info = TensorInfo(b, "blk.1.ffn_up.weight");
  b[info - 2] = 'X';  // rename to blk.1.ffn_up.weigXt
  ExpectError("missing", b, "tensor 'blk.1.ffn_up.weight' is missing");
}

TEST_F(CorruptGguf, WrongShape) {
  auto b = *base_;
  const size_t info = TensorInfo(b, "blk.0.attn_output.weight");
  // Swap [64, 64] for [32, 128]: same byte size, wrong shape.
  Poke<uint64_t>(b, info + 4, 32);
  Poke<uint64_t>(b, info + 12, 128);
  ExpectError("shape", b, "has shape [32, 128] F32, expected [64, 64]");
}

TEST_F(CorruptGguf, InsaneHyperparameters) {
  auto b = *base_;
  const std::string key = "llama.attention.head_count_kv";
  auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
  ASSERT_NE(it, b.end());
  Poke<uint32_t>(b, static_cast<size_t>(it - b.begin()) + key.size() + 4, 3);
  ExpectError("heads", b, "not a multiple of 3 kv heads");
  b = *base_;
  const std::string ctx = "llama.context_length";
  it = std::search(b.begin(), b.end(), ctx.begin(), ctx.end());
  Poke<uint32_t>(b, static_cast<size_t>(it - b.begin()) + ctx.size() + 4, 0);
  ExpectError("context", b, "context length = 0");
}

TEST_F(CorruptGguf, MetadataOfTheWrongType) {
  GgufWriter w;
  w.SetUint32("general.architecture", 3);
  auto bytes = w.Serialize();
  ASSERT_TRUE(bytes.ok());
  ExpectError("arch_type", *bytes, "'general.architecture' has type uint32, expected string");
  GgufWriter g;
  g.SetString("general.architecture", "gptj");
  bytes = g.Serialize();
  ExpectError("arch_unknown", *bytes, "architecture 'gptj' is not supported");
}

TEST_F(CorruptGguf, BadVocabulary) {
  auto b = *base_;
  const std::string key = "tokenizer.ggml.bos_token_id";
  auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
  ASSERT_NE(it, b.end());
  Poke<uint32_t>(b, static_cast<size_t>(it - b.begin()) + key.size() + 4, 100000);
  ExpectError("bos", b, "bos");
}

// Hugging Face folders: config.json + model.safetensors.
class CorruptHf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/corrupt_hf_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string cmd = "mkdir -p '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    config_ = {{"architectures", {"LlamaForCausalLM"}},
               {"hidden_size", 8},
               {"intermediate_size", 16},
               {"num_attention_heads", 2},
               {"num_key_value_heads", 1},
               {"num_hidden_layers", 1},
               {"vocab_size", 10},
               {"max_position_embeddings", 32},
               {"rms_norm_eps", 1e-5},
               {"tie_word_embeddings", true}};
    // name -> shape (PyTorch order)
    shapes_ = {{"model.embed_tokens.weight", {10, 8}},
               {"model.norm.weight", {8}},
               {"model.layers.0.input_layernorm.weight", {8}},
               {"model.layers.0.post_attention_layernorm.weight", {8}},
               {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
               {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
               {"model.layers.0.self_attn.v_proj.weight", {4, 8}},
               {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
               {"model.layers.0.mlp.gate_proj.weight", {16, 8}},
               {"model.layers.0.mlp.up_proj.weight", {16, 8}},
               {"model.layers.0.mlp.down_proj.weight", {8, 16}}};
  }

  std::vector<uint8_t> Safetensors(const std::function<void(nlohmann::json&)>& edit = {}) {
    nlohmann::json header = nlohmann::json::object();
    uint64_t off = 0;
    for (const auto& [name, shape] : shapes_) {
      uint64_t n = 1;
      for (int64_t d : shape) n *= d;
      header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + 4 * n}}};
      off += 4 * n;
    }
    if (edit) edit(header);
    const std::string h = header.dump();
    const uint64_t len = h.size();
    std::vector<uint8_t> out(8 + h.size() + off, 0);
    std::memcpy(out.data(), &len, 8);
    std::memcpy(out.data() + 8, h.data(), h.size());
    return out;
  }

  void Write(const std::vector<uint8_t>& st, const std::string& config_text) {
    WriteAll(dir_ + "/model.safetensors", st);
    std::ofstream(dir_ + "/config.json") << config_text;
  }

  void ExpectError(const std::string& problem) {
    absl::Status st = LoadEverything(dir_);
    ASSERT_FALSE(st.ok());
    EXPECT_THAT(std::string(st.message()), HasSubstr(problem)) << st;
  }

  std::string dir_;
  nlohmann::json config_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes_;
};

TEST_F(CorruptHf, ValidFolderLoads) {
  Write(Safetensors(), config_.dump());
  EXPECT_TRUE(LoadEverything(dir_).ok()) << LoadEverything(dir_);
}

TEST_F(CorruptHf, ConfigProblems) {
  Write(Safetensors(), "{not json");
  ExpectError("config.json: not a JSON object");
  auto c = config_;
  c.erase("hidden_size");
  Write(Safetensors(), c.dump());
  ExpectError("'hidden_size' is missing");
  c = config_;
  c["num_hidden_layers"] = "five";
  Write(Safetensors(), c.dump());
  ExpectError("'num_hidden_layers' is not an integer");
  c = config_;
  c["architectures"] = {"GPTNeoXForCausalLM"};
  Write(Safetensors(), c.dump());
  ExpectError("architecture 'GPTNeoXForCausalLM' is not supported");
  c = config_;
  c["num_hidden_layers"] = 1000000;
  Write(Safetensors(), c.dump());
  ExpectError("layers = 1000000 is outside");
}

TEST_F(CorruptHf, SafetensorsProblems) {
  auto st = Safetensors();
  st.resize(st.size() - 10);
  Write(st, config_.dump());
  ExpectError("past the end of the data");
  Write(Safetensors([](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "F16"; }),
        config_.dump());
  ExpectError("holds 32 bytes but shape x dtype needs 16");
  Write(Safetensors([](nlohmann::json& h) {
          h["model.layers.0.self_attn.q_proj.weight"]["shape"] = {4, 16};
        }),
        config_.dump());
  ExpectError("tensor 'blk.0.attn_q.weight' has shape [16, 4] F32, expected [8, 8]");
  Write(Safetensors([](nlohmann::json& h) { h.erase("model.layers.0.mlp.up_proj.weight"); }),
        config_.dump());
  ExpectError("tensor 'blk.0.ffn_up.weight' is missing");
  Write(Safetensors([](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "I32"; }),
        config_.dump());
  ExpectError("dtype I32");
}

}  // namespace
}  // namespace cascade
