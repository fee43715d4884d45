// UTF-8 helpers for the tokenizer and the streaming detokenizer.
//
// Contract: pure functions on byte strings; never read past the given view. Invalid
// sequences are reported, not repaired, except by the functions that say they replace.
#ifndef CASCADE_UTIL_UTF8_H_
#define CASCADE_UTIL_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cascade {

// Length of the UTF-8 sequence that starts with `lead` (1..4), or 1 for a byte that
// cannot start one (continuation bytes, 0xF8..0xFF).
int Utf8SequenceLength(uint8_t lead);

// Decodes one code point at text[pos]; sets *len to the bytes consumed (>= 1). Returns
// -1 and *len = 1 for an invalid or truncated sequence.
int32_t DecodeUtf8(std::string_view text, size_t pos, int* len);

// Appends the UTF-8 encoding of `cp` (U+0000..U+10FFFF, not a surrogate) to *out.
void AppendUtf8(int32_t cp, std::string* out);

// Number of bytes at the end of `text` that form the start of a UTF-8 sequence whose
// remaining bytes have not arrived yet (0..3). A streaming decoder holds these back.
size_t IncompleteUtf8Suffix(std::string_view text);

// Splits into code points as strings (an invalid byte becomes a one-byte string).
std::vector<std::string> SplitUtf8(std::string_view text);

bool IsValidUtf8(std::string_view text);

}  // namespace cascade

#endif  // CASCADE_UTIL_UTF8_H_
