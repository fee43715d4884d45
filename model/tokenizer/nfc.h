// Unicode NFC normalization (canonical decomposition, canonical ordering, canonical
// composition), for tokenizer.json files whose normalizer is NFC (e.g. Qwen2).
//
// Contract: pure function; tables are compiled in (nfc_data.inc, Unicode 14.0.0, the
// version Debian 12's PCRE2 uses) and indexed on first use (thread-safe). Fails only on
// invalid UTF-8 (InvalidArgument).
#ifndef CASCADE_MODEL_TOKENIZER_NFC_H_
#define CASCADE_MODEL_TOKENIZER_NFC_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cascade::tok {

absl::StatusOr<std::string> NfcNormalize(std::string_view text);

}  // namespace cascade::tok

#endif  // CASCADE_MODEL_TOKENIZER_NFC_H_
