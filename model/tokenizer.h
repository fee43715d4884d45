// Tokenizers: SentencePiece-style ("llama" GGUF vocabularies, BPE tokenizer.json with
// byte fallback) and byte-level BPE with the pre-tokenizer a vocabulary names
// (GGUF tokenizer.ggml.pre, or tokenizer.json's pre_tokenizer).
//
// Contract:
// - Built from GGUF metadata (FromGguf) or from a Hugging Face tokenizer.json plus an
//   optional tokenizer_config.json (FromHfJson). Loading validates every id and string;
//   a malformed vocabulary yields InvalidArgument naming the file and field.
// - Encode() gives exactly the ids the reference tokenizer (SentencePiece / Hugging Face
//   tokenizers) gives for the same text and vocabulary; it fails only on inputs it cannot
//   represent (then with InvalidArgument), never aborts.
// - Immutable after construction: Encode/Decode/TokenToPiece are thread-safe.
// - StreamingDetokenizer turns a growing id sequence into text without ever emitting a
//   partial UTF-8 character; it is not thread-safe (one per sequence).
#ifndef CASCADE_MODEL_TOKENIZER_H_
#define CASCADE_MODEL_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf.h"

namespace cascade {

class ModelSource;

// Token kinds, numbered as GGUF tokenizer.ggml.token_type.
enum class TokenKind : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  // `config_path` may be empty (then add_bos etc. come from tokenizer.json's post_processor).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromHfJson(const std::string& tokenizer_path,
                                                               const std::string& config_path);
  // A .gguf file, or a folder holding tokenizer.json (and tokenizer_config.json).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromPath(const std::string& path);
  // The tokenizer of an opened model: its GGUF metadata or its folder's tokenizer.json.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSource(const ModelSource& source);

  virtual ~Tokenizer() = default;

  // Encodes UTF-8 text. add_special: add BOS/EOS as the vocabulary asks (add_bos_token /
  // add_eos_token). parse_special: text spelling a control token (e.g. "<s>") becomes
  // that token; user-defined tokens are always recognised.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special,
                                                      bool parse_special) const = 0;

  // The bytes one token stands for (possibly an incomplete UTF-8 sequence, e.g. <0xE2>).
  // Control/unknown tokens give "" unless render_special.
  virtual std::string TokenToPiece(int32_t id, bool render_special) const = 0;

  // Decodes a whole sequence: concatenated pieces, with the leading-space rule of the
  // vocabulary (SentencePiece drops the dummy-prefix space of the first text token) and
  // invalid UTF-8 replaced by U+FFFD.
  std::string Decode(std::span<const int32_t> ids, bool render_special = false) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& TokenText(int32_t id) const { return tokens_[id]; }
  TokenKind Kind(int32_t id) const { return kinds_[id]; }
  bool IsValid(int32_t id) const { return id >= 0 && id < vocab_size(); }
  int32_t bos_id() const { return bos_id_; }  // -1 if none
  int32_t eos_id() const { return eos_id_; }  // -1 if none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // True for ids that end generation (EOS, EOT, <|im_end|>, <|eot_id|>, ...).
  bool IsEndOfGeneration(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }
  // "spm" or "bpe" and, for BPE, the pre-tokenizer name.
  virtual std::string Describe() const = 0;
  // True when decoding drops one leading space from the first piece after BOS / start.
  bool strips_leading_space() const { return strip_leading_space_; }

 protected:
  Tokenizer() = default;

  std::vector<std::string> tokens_;  // token text as stored in the vocabulary
  std::vector<TokenKind> kinds_;
  std::vector<int32_t> eog_ids_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool strip_leading_space_ = false;
};

// Incremental detokenizer for streaming: Push(id) returns the newly complete text.
class StreamingDetokenizer {
 public:
  // `prev_ids` are ids already shown (e.g. the prompt); they set the leading-space state.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prev_ids = {});
  // Returns the text completed by `id` (may be empty while a UTF-8 character is pending).
  std::string Push(int32_t id);
  // Returns any held-back bytes at end of stream, invalid ones as U+FFFD.
  std::string Flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;  // bytes of an incomplete UTF-8 character
  bool first_ = true;    // next text piece is the first of the sequence
};

}  // namespace cascade

#endif  // CASCADE_MODEL_TOKENIZER_H_
