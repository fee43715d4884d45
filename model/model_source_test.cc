#include "model/model_source.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/arch.h"
#include "model/test_util.h"
#include "model/weights.h"
#include "nlohmann/json.hpp"

namespace cascade {
namespace {

using ::testing::HasSubstr;

TEST(CanonicalTensorName, MapsHuggingFaceNames) {
  EXPECT_EQ(CanonicalTensorName("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(CanonicalTensorName("model.layers.12.self_attn.k_proj.bias"), "blk.12.attn_k.bias");
  EXPECT_EQ(CanonicalTensorName("model.layers.3.mlp.down_proj.weight"), "blk.3.ffn_down.weight");
  EXPECT_EQ(CanonicalTensorName("model.layers.5.self_attn.q_norm.weight"),
            "blk.5.attn_q_norm.weight");
  EXPECT_EQ(CanonicalTensorName("model.layers.2.self_attn.qkv_proj.weight"),
            "blk.2.attn_qkv.weight");
  // Gemma 2's own meaning of post_attention_layernorm (the Llama map's FFN pre-norm).
  EXPECT_EQ(CanonicalTensorName("model.layers.1.post_attention_layernorm.weight"),
            "blk.1.ffn_norm.weight");
  EXPECT_EQ(CanonicalTensorName("model.layers.1.post_attention_layernorm.weight",
                                Gemma2Arch().hf_leaf_names),
            "blk.1.post_attention_norm.weight");
  EXPECT_EQ(
      CanonicalTensorName("model.layers.1.input_layernorm.weight", Gemma2Arch().hf_leaf_names),
      "blk.1.attn_norm.weight");
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

// ---- Sharded safetensors, written here from the format: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets: [begin, end)}} (offsets relative
// to the data section after the header), then the data.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses a safetensors file by hand (not with SafetensorsFile), in header order.
std::vector<RawTensor> ReadSafetensorsByHand(const std::string& path) {
  const std::string file = ReadFileBytes(path);
  EXPECT_GT(file.size(), 8u) << path;
  if (file.size() <= 8) return {};
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[i]);
  const auto header = nlohmann::ordered_json::parse(file.substr(8, n));
  std::vector<RawTensor> out;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    RawTensor t;
    t.name = name;
    t.dtype = v["dtype"].get<std::string>();
    t.shape = v["shape"].get<std::vector<int64_t>>();
    const uint64_t b = v["data_offsets"][0].get<uint64_t>(),
                   e = v["data_offsets"][1].get<uint64_t>();
    t.bytes = file.substr(8 + n + b, e - b);
    out.push_back(std::move(t));
  }
  return out;
}

// Writes `tensors` as one safetensors file; the header is padded with spaces to
// `header_multiple` bytes (8 is what the reference writer does; 1 leaves the data start,
// and so every tensor's data, at whatever alignment the header length gives).
void WriteSafetensors(const std::string& path, const std::vector<const RawTensor*>& tensors,
                      size_t header_multiple) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const RawTensor* t : tensors) {
    header[t->name] = {{"dtype", t->dtype},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % header_multiple != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out.put(static_cast<char>(n & 0xff));
  out << h;
  for (const RawTensor* t : tensors) out << t->bytes;
}

// A sharded copy of the Hugging Face folder `src`: model-00001-of-00002.safetensors holds
// the first half of the tensors (splitting a layer), model-00002-of-00002.safetensors the
// rest, with a header of odd length (its data starts misaligned for F32), and
// model.safetensors.index.json maps each tensor to its shard (23 tensors, then 24: layer 2
// is split across the shards). Config and tokenizer files
// are copied. Returns the tensors in source order.
std::vector<RawTensor> MakeShardedCopy(const std::string& src, const std::string& dst) {
  ::mkdir(dst.c_str(), 0755);
  for (const char* f : {"config.json", "generation_config.json", "special_tokens_map.json",
                        "tokenizer.json", "tokenizer_config.json"}) {
    std::ofstream(dst + "/" + f, std::ios::binary) << ReadFileBytes(src + "/" + f);
  }
  std::vector<RawTensor> all = ReadSafetensorsByHand(src + "/model.safetensors");
  const size_t half = all.size() / 2;
  std::vector<const RawTensor*> first, second;
  nlohmann::ordered_json index;
  uint64_t total = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool in_first = i < half;
    (in_first ? first : second).push_back(&all[i]);
    index["weight_map"][all[i].name] =
        in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    total += all[i].bytes.size();
  }
  index["metadata"] = {{"total_size", total}};
  WriteSafetensors(dst + "/model-00001-of-00002.safetensors", first, 8);
  // Pad the second header to 8k + 3 bytes: data at file offset 8 + 8k + 3.
  {
    WriteSafetensors(dst + "/model-00002-of-00002.safetensors", second, 1);
    const std::string bytes = ReadFileBytes(dst + "/model-00002-of-00002.safetensors");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
    std::string header = bytes.substr(8, n);
    while (header.size() % 8 != 3) header.push_back(' ');
    std::ofstream out(dst + "/model-00002-of-00002.safetensors", std::ios::binary);
    uint64_t m = header.size();
    for (int i = 0; i < 8; ++i, m >>= 8) out.put(static_cast<char>(m & 0xff));
    out << header << bytes.substr(8 + n);
  }
  std::ofstream(dst + "/model.safetensors.index.json") << index.dump(2);
  return all;
}

TEST(ModelSource, ShardedSafetensorsEqualTheSingleFile) {
  const std::string hf = testing::SharedPath("models/stories260K/hf");
  CASCADE_REQUIRE_SHARED(hf + "/model.safetensors");
  const std::string dir = ::testing::TempDir() + "/cascade_sharded_" + std::to_string(::getpid());
  const std::vector<RawTensor> raw = MakeShardedCopy(hf, dir);
  ASSERT_EQ(raw.size(), 47u);  // embeddings, 5 layers x 9, final norm (tied output)

  auto single = ModelSource::Open(hf);
  auto sharded = ModelSource::Open(dir);
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_EQ((*sharded)->format(), "safetensors");
  const ModelConfig& a = (*single)->config();
  const ModelConfig& b = (*sharded)->config();
  EXPECT_EQ(b.dim, a.dim);
  EXPECT_EQ(b.n_layers, a.n_layers);
  EXPECT_EQ(b.n_heads, a.n_heads);
  EXPECT_EQ(b.n_kv_heads, a.n_kv_heads);
  EXPECT_EQ(b.ffn_dim, a.ffn_dim);
  EXPECT_EQ(b.vocab_size, a.vocab_size);
  EXPECT_EQ(b.rope_layout, a.rope_layout);
  EXPECT_EQ(b.tied_embeddings, a.tied_embeddings);

  // The same tensors under the same names, byte for byte, each at its element alignment
  // (the second shard's data starts misaligned, so those were realigned copies).
  ASSERT_EQ((*sharded)->tensors().size(), (*single)->tensors().size());
  ASSERT_EQ((*sharded)->tensors().size(), raw.size());
  std::set<std::string> names;
  for (const TensorView& t : (*single)->tensors()) {
    names.insert(t.name);
    const TensorView* u = (*sharded)->Find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->type, t.type) << t.name;
    EXPECT_EQ(u->ShapeString(), t.ShapeString()) << t.name;
    ASSERT_EQ(u->nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.nbytes), 0) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(u->data) % 4, 0u) << t.name;
  }
  EXPECT_EQ(names.size(), raw.size());
  // And equal to the bytes read by hand from the original file.
  for (const RawTensor& r : raw) {
    const TensorView* u = (*sharded)->Find(CanonicalTensorName(r.name));
    ASSERT_NE(u, nullptr) << r.name;
    ASSERT_EQ(u->nbytes, r.bytes.size()) << r.name;
    EXPECT_EQ(std::memcmp(u->data, r.bytes.data(), r.bytes.size()), 0) << r.name;
  }
  auto w = ModelWeights::Bind(**sharded, {0, static_cast<int>(b.n_layers)});
  ASSERT_TRUE(w.ok()) << w.status();

  // A shard the index names but the folder lacks is reported by name.
  std::remove((dir + "/model-00002-of-00002.safetensors").c_str());
  auto broken = ModelSource::Open(dir);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr("model-00002-of-00002.safetensors"));
  for (const char* f : {"config.json", "generation_config.json", "special_tokens_map.json",
                        "tokenizer.json", "tokenizer_config.json",
                        "model-00001-of-00002.safetensors", "model.safetensors.index.json"}) {
    std::remove((dir + "/" + f).c_str());
  }
  ::rmdir(dir.c_str());
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
