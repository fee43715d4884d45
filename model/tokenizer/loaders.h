// Vocabulary loaders: turn GGUF tokenizer metadata or a Hugging Face tokenizer.json (plus
// tokenizer_config.json) into a VocabSpec for PipelineTokenizer.
//
// Contract: every value read from the file is type- and range-checked; a malformed
// vocabulary gives InvalidArgument whose message names the file and the field (e.g.
// "x.gguf: tokenizer.ggml.merges[17]: ..."), a well-formed one that uses a feature this
// implementation lacks gives Unimplemented naming it. No exceptions escape (JSON is parsed
// with allow_exceptions=false and every type is checked before get<>). Thread-compatible:
// no shared state.
#ifndef CASCADE_MODEL_TOKENIZER_LOADERS_H_
#define CASCADE_MODEL_TOKENIZER_LOADERS_H_

#include <string>

#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "model/tokenizer/pipeline.h"

namespace cascade::tok {

absl::StatusOr<VocabSpec> LoadGgufVocab(const GgufFile& file);

// `config_path` may be empty. `tokenizer_json` / `config_json` are the file contents;
// the paths are used in messages.
absl::StatusOr<VocabSpec> LoadHfVocab(const std::string& tokenizer_path,
                                      const std::string& tokenizer_json,
                                      const std::string& config_path,
                                      const std::string& config_json);

}  // namespace cascade::tok

#endif  // CASCADE_MODEL_TOKENIZER_LOADERS_H_
