// The two subword models behind Tokenizer: SentencePiece-style BPE (merge the adjacent
// pair whose concatenation is the highest-scoring vocabulary piece) and rank-based BPE
// (merge the pair with the lowest merge rank), each with byte fallback / unknown-token
// handling.
//
// Contract: built once from validated vocabulary data (every id given to them is in
// range; the loaders guarantee it), then immutable: Encode() is const and thread-safe and
// allocates its own scratch. Encode() fails only when a character can be neither encoded
// nor replaced by byte tokens or an unknown token (InvalidArgument).
#ifndef CASCADE_MODEL_TOKENIZER_MODELS_H_
#define CASCADE_MODEL_TOKENIZER_MODELS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace cascade::tok {

using TokenMap = absl::flat_hash_map<std::string, int32_t>;

// One merge rule: the tokens `left` and `right` become `result`.
struct MergeRule {
  int32_t left = -1;
  int32_t right = -1;
  int32_t result = -1;
};

struct BpeOptions {
  bool ignore_merges = false;  // a piece that is itself a token is not split (Llama-3)
  bool byte_fallback = false;  // unknown characters become <0xHH> tokens (HF)
  int32_t unk_id = -1;         // unknown characters otherwise become this token (HF)
  bool fuse_unk = false;       // consecutive unknown characters share one unknown token
  // GGUF byte-level vocabularies (llama.cpp): an unknown character becomes the tokens of
  // its single bytes, where those exist, and is dropped otherwise.
  bool single_byte_lookup = false;
};

class BpeModel {
 public:
  // `vocab` maps text to id for the model's pieces; `merges` are in rank order. When a
  // pair appears twice, the first rank is kept unless `later_merge_wins` (HF's behaviour).
  BpeModel(TokenMap vocab, const std::vector<MergeRule>& merges, bool later_merge_wins,
           const std::array<int32_t, 256>& byte_ids, const BpeOptions& options);

  absl::Status Encode(std::string_view piece, std::vector<int32_t>* out) const;
  const TokenMap& vocab() const { return vocab_; }

 private:
  struct Rank {
    int32_t rank;
    int32_t result;
  };
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  TokenMap vocab_;
  absl::flat_hash_map<uint64_t, Rank> merges_;
  std::array<int32_t, 256> byte_ids_;
  BpeOptions options_;
};

class SpmModel {
 public:
  // `pieces` maps text to id for the tokens merging may produce (normal, user-defined and
  // unused tokens); `scores` is indexed by id; `unused[id]` marks unused tokens, which are
  // split again into the pieces they were merged from (as SentencePiece does).
  SpmModel(TokenMap pieces, std::vector<float> scores, std::vector<bool> unused,
           const std::array<int32_t, 256>& byte_ids, int32_t unk_id);

  absl::Status Encode(std::string_view piece, std::vector<int32_t>* out) const;

 private:
  TokenMap pieces_;
  std::vector<float> scores_;
  std::vector<bool> unused_;
  std::array<int32_t, 256> byte_ids_;
  int32_t unk_id_;
};

}  // namespace cascade::tok

#endif  // CASCADE_MODEL_TOKENIZER_MODELS_H_
