#include "serving/scheduler_config.h"

#include "absl/strings/str_cat.h"

namespace cascade {

const char* SpeculativeName(Speculative s) {
  switch (s) {
    case Speculative::kOff:
      return "off";
    case Speculative::kNgram:
      return "ngram";
    case Speculative::kDraft:
      return "draft";
  }
  return "?";
}

absl::StatusOr<Speculative> SpeculativeFromName(std::string_view name) {
  for (Speculative s : {Speculative::kOff, Speculative::kNgram, Speculative::kDraft}) {
    if (name == SpeculativeName(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("speculative decoding '", std::string(name), "': off, ngram or draft"));
}

}  // namespace cascade
