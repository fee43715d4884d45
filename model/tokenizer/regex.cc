#include "model/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "util/utf8.h"

namespace cascade::tok {
namespace {

constexpr char kWord[] = R"(\p{L}\p{M}\p{Nd}\p{Pc})";  // Oniguruma's Unicode \w
constexpr char kHex[] = "0-9a-fA-F";

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

absl::Status Untranslatable(std::string_view pattern, size_t pos, std::string_view what) {
  return absl::UnimplementedError(absl::StrCat("regex '", std::string(pattern),
                                               "': ", std::string(what), " at offset ", pos,
                                               " has no PCRE2 translation"));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

std::string Regex::Escape(std::string_view literal) {
  std::string out;
  out.reserve(literal.size() * 2);
  for (char c : literal) {
    const unsigned char u = static_cast<unsigned char>(c);
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, "\\x{", absl::Hex(u), "}");
    } else if (u < 0x80 && !alnum) {
      out.push_back('\\');
      out.push_back(c);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<std::string> Regex::Translate(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  size_t class_start = 0;  // position just after '[' or '[^'
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("regex '", std::string(p), "': trailing backslash"));
      }
      const char e = p[++i];
      switch (e) {
        case 's':
          out += "\\p{White_Space}";
          break;
        case 'S':
          out += "\\P{White_Space}";
          break;
        case 'd':
          out += "\\p{Nd}";
          break;
        case 'D':
          out += "\\P{Nd}";
          break;
        case 'w':
          out += in_class ? std::string(kWord) : absl::StrCat("[", kWord, "]");
          break;
        case 'W':
          if (in_class) return Untranslatable(p, i - 1, "\\W inside a character class");
          absl::StrAppend(&out, "[^", kWord, "]");
          break;
        case 'h':
          out += in_class ? std::string(kHex) : absl::StrCat("[", kHex, "]");
          break;
        case 'H':
          if (in_class) return Untranslatable(p, i - 1, "\\H inside a character class");
          absl::StrAppend(&out, "[^", kHex, "]");
          break;
        case 'u': {
          if (i + 4 >= p.size() || !IsHex(p[i + 1]) || !IsHex(p[i + 2]) || !IsHex(p[i + 3]) ||
              !IsHex(p[i + 4])) {
            return Untranslatable(p, i - 1, "\\u without four hex digits");
          }
          absl::StrAppend(&out, "\\x{", std::string(p.substr(i + 1, 4)), "}");
          i += 4;
          break;
        }
        default:
          out.push_back('\\');
          out.push_back(e);
          // Keep \p{..}, \x{..} and friends intact so their braces are not re-read.
          if ((e == 'p' || e == 'P' || e == 'x' || e == 'o' || e == 'k' || e == 'g') &&
              i + 1 < p.size() && p[i + 1] == '{') {
            const size_t close = p.find('}', i + 1);
            if (close == std::string_view::npos) {
              return absl::InvalidArgumentError(
                  absl::StrCat("regex '", std::string(p), "': unclosed '{' at offset ", i + 1));
            }
            out.append(p.substr(i + 1, close - i));
            i = close;
          }
          break;
      }
      continue;
    }
    if (in_class) {
      if (c == ']' && i > class_start) {
        in_class = false;
      } else if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {
          const size_t close = p.find(":]", i + 2);
          if (close == std::string_view::npos) {
            return Untranslatable(p, i, "nested character class");
          }
          out.append(p.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
        return Untranslatable(p, i, "nested character class");
      } else if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        return Untranslatable(p, i, "character class intersection (&&)");
      }
      out.push_back(c);
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      class_start = i + 1;  // a ']' right here is a literal
      continue;
    }
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      // Ruby's (?m) is dot-all, PCRE2's (?s).
      out += "(?";
      size_t j = i + 2;
      while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) {
        out.push_back(p[j] == 'm' ? 's' : p[j]);
        ++j;
      }
      i = j - 1;
      continue;
    }
    out.push_back(c);
  }
  if (in_class) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex '", std::string(p), "': unterminated character class"));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  if (!IsValidUtf8(pattern)) {
    return absl::InvalidArgumentError("regex is not valid UTF-8");
  }
  std::string translated;
  {
    auto t = Translate(pattern);
    if (!t.ok()) return t.status();
    translated = std::move(*t);
  }
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat("regex '", std::string(pattern), "' (PCRE2 form '", translated,
                     "'): ", reinterpret_cast<const char*>(message), " at offset ", offset));
  }
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  re->code_ = code;
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

Regex::~Regex() { pcre2_code_free(code_); }

absl::Status Regex::FindAll(std::string_view text, std::vector<Span>* out) const {
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError("text is not valid UTF-8");
  }
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code_, nullptr));
  if (md == nullptr) return absl::ResourceExhaustedError("PCRE2: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t len = text.size();
  size_t start = 0;
  bool after_empty = false;
  bool use_jit = jit_;
  while (start <= len) {
    uint32_t options = PCRE2_NO_UTF_CHECK;
    if (after_empty) options |= PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
    if (!use_jit) options |= PCRE2_NO_JIT;
    const int rc = pcre2_match(code_, subject, len, start, options, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (!after_empty || start == len) break;
      after_empty = false;
      int clen;
      DecodeUtf8(text, start, &clen);
      start += clen;
      continue;
    }
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && use_jit) {
      use_jit = false;  // the interpreter keeps its backtracking state on the heap
      continue;
    }
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return absl::ResourceExhaustedError(
          absl::StrCat("regex '", pattern_, "': ", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (ov[1] < ov[0]) {  // only possible with \K inside a lookahead; treat as no match
      break;
    }
    out->push_back(Span{ov[0], ov[1]});
    after_empty = ov[0] == ov[1];
    start = ov[1];
  }
  return absl::OkStatus();
}

}  // namespace cascade::tok
