// Splitting text around added/special tokens (HF "added_tokens", GGUF control and
// user-defined tokens): leftmost-longest matching, with HF's lstrip / rstrip /
// single_word rules.
//
// Contract: filled once by the tokenizer under construction, then immutable; Split() is
// const and thread-safe. Split never fails: text it does not claim is returned as text.
#ifndef CASCADE_MODEL_TOKENIZER_ADDED_TOKENS_H_
#define CASCADE_MODEL_TOKENIZER_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace cascade::tok {

struct AddedTokenSpec {
  int32_t id = -1;
  std::string content;
  bool special = false;  // recognised only when the caller asks to parse special tokens
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;  // matched in normalized text (HF); GGUF tokens never are
};

struct Fragment {
  size_t begin = 0;  // byte range in the text given to Split
  size_t end = 0;
  int32_t token = -1;  // -1: plain text
};

class AddedTokenMatcher {
 public:
  // `content` must be non-empty; later duplicates of the same content are ignored.
  void Add(const AddedTokenSpec& token);
  bool empty() const { return tokens_.empty(); }

  // Partitions `text` into plain-text fragments and token fragments (in order, covering
  // the text; whitespace swallowed by lstrip/rstrip belongs to the token fragment).
  void Split(std::string_view text, bool parse_special, std::vector<Fragment>* out) const;

 private:
  struct Entry {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip, single_word;
  };
  std::vector<Entry> tokens_;
  absl::flat_hash_set<std::string> contents_;
  // For each first byte, indices into tokens_, longest content first.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
};

}  // namespace cascade::tok

#endif  // CASCADE_MODEL_TOKENIZER_ADDED_TOKENS_H_
