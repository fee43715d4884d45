// Pre-tokenizer regular expressions on PCRE2 (UTF + Unicode properties, JIT when the
// library has it).
//
// Contract:
// - Compile() takes a pattern in the syntax Hugging Face tokenizer.json files use
//   (Oniguruma, Ruby syntax) and translates the parts whose meaning differs in PCRE2:
//   \s/\S become Unicode White_Space, \d is \p{Nd}, \w is Oniguruma's word class, \h is a
//   hex digit, \uHHHH is \x{HHHH}, ^/$ match at line breaks. Constructs it cannot
//   translate give Unimplemented; a bad pattern gives InvalidArgument with PCRE2's message
//   and offset. The caller adds the file/field context.
// - A compiled Regex is immutable; FindAll allocates its own match data, so any number of
//   threads may use one Regex at once. The object owns the compiled code.
#ifndef CASCADE_MODEL_TOKENIZER_REGEX_H_
#define CASCADE_MODEL_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

struct pcre2_real_code_8;

namespace cascade::tok {

struct Span {
  size_t begin = 0;
  size_t end = 0;
};

class Regex {
 public:
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // A pattern matching `literal` exactly (HF Split's {"String": ...}).
  static std::string Escape(std::string_view literal);
  // The PCRE2 form of an Oniguruma-syntax pattern (exposed for tests).
  static absl::StatusOr<std::string> Translate(std::string_view pattern);

  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-overlapping match in `text` (valid UTF-8), leftmost first, empty
  // matches included. Fails (InvalidArgument) on invalid UTF-8, (ResourceExhausted) when
  // PCRE2's match limits are hit.
  absl::Status FindAll(std::string_view text, std::vector<Span>* out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;

  std::string pattern_;  // as given (Oniguruma syntax)
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace cascade::tok

#endif  // CASCADE_MODEL_TOKENIZER_REGEX_H_
