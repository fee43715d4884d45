// The pre-tokenizer each GGUF tokenizer.ggml.pre value stands for: the regexes (in
// Hugging Face / Oniguruma syntax, applied one after another, each splitting with
// behavior Isolated) and the flags the original tokenizer.json implied.
//
// Contract: a static, immutable table; FindNamedPreTokenizer returns null for names it
// does not know (the caller reports Unimplemented with the name).
#ifndef CASCADE_MODEL_TOKENIZER_NAMED_PRETOKENIZERS_H_
#define CASCADE_MODEL_TOKENIZER_NAMED_PRETOKENIZERS_H_

#include <string>
#include <string_view>
#include <vector>

namespace cascade::tok {

struct NamedPreTokenizer {
  std::vector<std::string> regexes;
  bool ignore_merges = false;  // HF BPE ignore_merges (Llama-3 style vocabularies)
  bool add_bos = false;        // default for tokenizer.ggml.add_bos_token
};

// `name` is tokenizer.ggml.pre; empty means absent ("default").
const NamedPreTokenizer* FindNamedPreTokenizer(std::string_view name);

// Comma-separated list of the supported names, for error messages.
std::string SupportedPreTokenizerNames();

}  // namespace cascade::tok

#endif  // CASCADE_MODEL_TOKENIZER_NAMED_PRETOKENIZERS_H_
