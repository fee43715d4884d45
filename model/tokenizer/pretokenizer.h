// Pre-tokenization (splitting normalized text into the pieces the model encodes one by
// one) and normalization, following Hugging Face tokenizers' components: Split (regex or
// literal, every delimiter behavior, invert), ByteLevel, Metaspace; Prepend, Replace, NFC.
//
// Contract: built once by a vocabulary loader (Add* fail with the regex problem; the
// loader adds file/field context), then immutable: Run() is const and thread-safe. Run()
// fails only on invalid UTF-8 or a regex resource limit. Objects own their regexes.
#ifndef CASCADE_MODEL_TOKENIZER_PRETOKENIZER_H_
#define CASCADE_MODEL_TOKENIZER_PRETOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/regex.h"

namespace cascade::tok {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

// GPT-2's pre-tokenizer regex (HF ByteLevel with use_regex).
inline constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits `text` at `matches` (sorted, non-overlapping) the way HF's
// NormalizedString::split does; empty pieces are dropped.
std::vector<Span> SplitByMatches(size_t text_size, const std::vector<Span>& matches,
                                 SplitBehavior behavior, bool invert);

struct PreToken {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the original input (Metaspace "first")
};

class PreTokenizer {
 public:
  absl::Status AddSplit(std::string_view pattern, SplitBehavior behavior, bool invert);
  absl::Status AddLiteralSplit(std::string_view literal, SplitBehavior behavior, bool invert);
  absl::Status AddByteLevel(bool add_prefix_space, bool use_regex);
  void AddMetaspace(std::string replacement, PrependScheme scheme, bool split);

  bool empty() const { return steps_.empty(); }
  // True if a ByteLevel step maps bytes to GPT-2 characters.
  bool byte_level() const { return byte_level_; }

  // Splits one normalized chunk; appends its pieces to *out.
  absl::Status Run(std::string text, bool at_start, std::vector<PreToken>* out) const;

 private:
  struct Step {
    enum Kind { kSplit, kByteLevel, kMetaspace } kind = kSplit;
    std::unique_ptr<Regex> regex;  // kSplit; kByteLevel with use_regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
    std::string replacement;        // kMetaspace
    PrependScheme scheme = PrependScheme::kAlways;
    bool split = true;
  };
  absl::Status Apply(const Step& step, std::vector<PreToken>* pieces) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

class Normalizer {
 public:
  void AddPrepend(std::string prefix);
  absl::Status AddReplace(std::string_view pattern, bool is_regex, std::string content);
  void AddNfc();

  bool empty() const { return steps_.empty(); }
  absl::StatusOr<std::string> Run(std::string_view text) const;

 private:
  struct Step {
    enum Kind { kPrepend, kReplace, kNfc } kind = kPrepend;
    std::string text;              // prefix, or replacement content
    std::string literal;           // kReplace with a literal pattern
    std::unique_ptr<Regex> regex;  // kReplace with a regex
  };
  std::vector<Step> steps_;
};

}  // namespace cascade::tok

#endif  // CASCADE_MODEL_TOKENIZER_PRETOKENIZER_H_
