#include "model/tokenizer/pretokenizer.h"

#include <algorithm>
#include <utility>

#include "model/tokenizer/nfc.h"
#include "model/tokenizer/text_util.h"
#include "util/status_macros.h"

namespace cascade::tok {

std::vector<Span> SplitByMatches(size_t text_size, const std::vector<Span>& matches,
                                 SplitBehavior behavior, bool invert) {
  // 1. Alternate gaps and matches over the whole text, as (span, is_match).
  std::vector<std::pair<Span, bool>> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const Span& m : matches) {
    if (m.begin > prev) parts.push_back({Span{prev, m.begin}, invert});
    parts.push_back({m, !invert});
    prev = m.end;
  }
  if (prev < text_size) parts.push_back({Span{prev, text_size}, invert});

  // 2. Apply the delimiter behavior (a "match" here is a delimiter).
  std::vector<Span> out;
  out.reserve(parts.size());
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& [span, is_match] : parts) {
        if (!is_match) out.push_back(span);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const auto& [span, is_match] : parts) out.push_back(span);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& [span, is_match] : parts) {
        if (is_match && !previous_match && !out.empty()) {
          out.back().end = span.end;
        } else {
          out.push_back(span);
        }
        previous_match = is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        const auto& [span, is_match] = *it;
        if (is_match && !previous_match && !out.empty()) {
          out.back().begin = span.begin;
        } else {
          out.push_back(span);
        }
        previous_match = is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      bool first = true;
      for (const auto& [span, is_match] : parts) {
        if (!first && is_match == previous_match) {
          out.back().end = span.end;
        } else {
          out.push_back(span);
        }
        previous_match = is_match;
        first = false;
      }
      break;
    }
  }
  // 3. Drop empty pieces.
  std::erase_if(out, [](const Span& s) { return s.begin == s.end; });
  return out;
}

absl::Status PreTokenizer::AddSplit(std::string_view pattern, SplitBehavior behavior, bool invert) {
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, Regex::Compile(pattern));
  Step step;
  step.kind = Step::kSplit;
  step.regex = std::move(re);
  step.behavior = behavior;
  step.invert = invert;
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status PreTokenizer::AddLiteralSplit(std::string_view literal, SplitBehavior behavior,
                                           bool invert) {
  return AddSplit(Regex::Escape(literal), behavior, invert);
}

absl::Status PreTokenizer::AddByteLevel(bool add_prefix_space, bool use_regex) {
  Step step;
  step.kind = Step::kByteLevel;
  step.add_prefix_space = add_prefix_space;
  if (use_regex) {
    CASCADE_ASSIGN_OR_RETURN(step.regex, Regex::Compile(kGpt2Pattern));
  }
  steps_.push_back(std::move(step));
  byte_level_ = true;
  return absl::OkStatus();
}

void PreTokenizer::AddMetaspace(std::string replacement, PrependScheme scheme, bool split) {
  Step step;
  step.kind = Step::kMetaspace;
  step.replacement = std::move(replacement);
  step.scheme = scheme;
  step.split = split;
  steps_.push_back(std::move(step));
}

namespace {

// Splits every piece with `re` and `behavior`; the first sub-piece inherits at_start.
absl::Status SplitAll(const Regex& re, SplitBehavior behavior, bool invert,
                      std::vector<PreToken>* pieces) {
  std::vector<PreToken> out;
  out.reserve(pieces->size() * 2);
  std::vector<Span> matches;
  for (PreToken& piece : *pieces) {
    matches.clear();
    CASCADE_RETURN_IF_ERROR(re.FindAll(piece.text, &matches));
    const std::vector<Span> spans = SplitByMatches(piece.text.size(), matches, behavior, invert);
    for (size_t i = 0; i < spans.size(); ++i) {
      out.push_back(PreToken{piece.text.substr(spans[i].begin, spans[i].end - spans[i].begin),
                             piece.at_start && i == 0 && spans[i].begin == 0});
    }
  }
  *pieces = std::move(out);
  return absl::OkStatus();
}

void ReplaceAll(std::string* text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = text->find(from, pos);
    if (hit == std::string::npos) break;
    out.append(*text, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  if (pos == 0) return;
  out.append(*text, pos, std::string::npos);
  *text = std::move(out);
}

}  // namespace

absl::Status PreTokenizer::Apply(const Step& step, std::vector<PreToken>* pieces) const {
  switch (step.kind) {
    case Step::kSplit:
      return SplitAll(*step.regex, step.behavior, step.invert, pieces);
    case Step::kByteLevel: {
      if (step.add_prefix_space) {
        for (PreToken& p : *pieces) {
          if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
        }
      }
      if (step.regex != nullptr) {
        CASCADE_RETURN_IF_ERROR(SplitAll(*step.regex, SplitBehavior::kIsolated, false, pieces));
      }
      for (PreToken& p : *pieces) p.text = ByteLevelEncode(p.text);
      return absl::OkStatus();
    }
    case Step::kMetaspace: {
      for (PreToken& p : *pieces) {
        ReplaceAll(&p.text, " ", step.replacement);
        const bool starts = p.text.compare(0, step.replacement.size(), step.replacement) == 0;
        if (!starts && (step.scheme == PrependScheme::kAlways ||
                        (step.scheme == PrependScheme::kFirst && p.at_start))) {
          p.text.insert(0, step.replacement);
        }
      }
      if (step.split) {
        std::vector<PreToken> out;
        for (PreToken& p : *pieces) {
          std::vector<Span> matches;
          for (size_t pos = p.text.find(step.replacement); pos != std::string::npos;
               pos = p.text.find(step.replacement, pos + step.replacement.size())) {
            matches.push_back(Span{pos, pos + step.replacement.size()});
          }
          const std::vector<Span> spans =
              SplitByMatches(p.text.size(), matches, SplitBehavior::kMergedWithNext, false);
          for (size_t i = 0; i < spans.size(); ++i) {
            out.push_back(PreToken{p.text.substr(spans[i].begin, spans[i].end - spans[i].begin),
                                   p.at_start && i == 0});
          }
        }
        *pieces = std::move(out);
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status PreTokenizer::Run(std::string text, bool at_start, std::vector<PreToken>* out) const {
  std::vector<PreToken> pieces;
  pieces.push_back(PreToken{std::move(text), at_start});
  for (const Step& step : steps_) {
    CASCADE_RETURN_IF_ERROR(Apply(step, &pieces));
  }
  for (PreToken& p : pieces) {
    if (!p.text.empty()) out->push_back(std::move(p));
  }
  return absl::OkStatus();
}

void Normalizer::AddPrepend(std::string prefix) {
  Step step;
  step.kind = Step::kPrepend;
  step.text = std::move(prefix);
  steps_.push_back(std::move(step));
}

absl::Status Normalizer::AddReplace(std::string_view pattern, bool is_regex, std::string content) {
  Step step;
  step.kind = Step::kReplace;
  step.text = std::move(content);
  if (is_regex) {
    CASCADE_ASSIGN_OR_RETURN(step.regex, Regex::Compile(pattern));
  } else {
    step.literal = std::string(pattern);
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void Normalizer::AddNfc() {
  Step step;
  step.kind = Step::kNfc;
  steps_.push_back(std::move(step));
}

absl::StatusOr<std::string> Normalizer::Run(std::string_view input) const {
  std::string text(input);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::kPrepend:
        if (!text.empty()) text.insert(0, step.text);
        break;
      case Step::kReplace:
        if (step.regex == nullptr) {
          ReplaceAll(&text, step.literal, step.text);
        } else {
          std::vector<Span> matches;
          CASCADE_RETURN_IF_ERROR(step.regex->FindAll(text, &matches));
          std::string out;
          size_t prev = 0;
          for (const Span& m : matches) {
            if (m.begin == m.end) continue;
            out.append(text, prev, m.begin - prev);
            out += step.text;
            prev = m.end;
          }
          out.append(text, prev, std::string::npos);
          text = std::move(out);
        }
        break;
      case Step::kNfc: {
        CASCADE_ASSIGN_OR_RETURN(text, NfcNormalize(text));
        break;
      }
    }
  }
  return text;
}

}  // namespace cascade::tok
