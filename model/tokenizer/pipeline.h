// The concrete Tokenizer: added-token splitting -> normalizer -> pre-tokenizer -> model
// (SentencePiece-style or rank BPE), assembled from a VocabSpec that a loader (GGUF
// metadata or tokenizer.json) filled in.
//
// Contract: PipelineTokenizer::Create takes ownership of the spec, checks that every id in
// it is in range (InvalidArgument naming spec.source otherwise) and builds the lookup
// tables. The result is immutable; Encode/TokenToPiece are thread-safe.
#ifndef CASCADE_MODEL_TOKENIZER_PIPELINE_H_
#define CASCADE_MODEL_TOKENIZER_PIPELINE_H_

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer.h"
#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/models.h"
#include "model/tokenizer/pretokenizer.h"

namespace cascade::tok {

// How a token's text becomes bytes when decoding.
enum class PieceStyle {
  kSentencePiece,  // U+2581 is a space; <0xHH> byte tokens are that byte
  kByteLevel,      // GPT-2 byte-to-character table, reversed
  kRaw,            // the text as is
};

struct VocabSpec {
  std::string source;    // file name, used in messages
  std::string describe;  // Tokenizer::Describe()
  std::vector<std::string> tokens;
  std::vector<TokenKind> kinds;

  enum class Model { kSpm, kBpe } model = Model::kBpe;
  // Pieces the model may produce, text -> id. Empty: every token of kind normal,
  // user-defined, unused or undefined (SPM) / every token (BPE).
  std::optional<TokenMap> model_vocab;
  std::vector<float> scores;      // SPM, by id (empty: all 0)
  std::vector<MergeRule> merges;  // BPE, in rank order
  bool later_merge_wins = false;
  BpeOptions bpe;
  int32_t unk_id = -1;

  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null
  std::vector<AddedTokenSpec> added_tokens;

  PieceStyle piece_style = PieceStyle::kRaw;
  bool strip_leading_space = false;

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::vector<int32_t> eog_ids;  // beyond eos_id and the well-known names
};

class PipelineTokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(VocabSpec spec);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special,
                                              bool parse_special) const override;
  std::string TokenToPiece(int32_t id, bool render_special) const override;
  std::string Describe() const override { return describe_; }

 private:
  PipelineTokenizer() = default;
  absl::Status EncodeChunk(std::string_view text, bool at_start, std::vector<int32_t>* out) const;

  std::string describe_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  AddedTokenMatcher raw_tokens_;         // matched before normalization
  AddedTokenMatcher normalized_tokens_;  // matched after it
  std::unique_ptr<SpmModel> spm_;
  std::unique_ptr<BpeModel> bpe_;
  std::vector<std::string> pieces_;  // decoded bytes of every token
};

}  // namespace cascade::tok

#endif  // CASCADE_MODEL_TOKENIZER_PIPELINE_H_
