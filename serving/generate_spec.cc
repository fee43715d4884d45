#include "serving/generate_spec.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cascade {
namespace {

absl::StatusOr<std::vector<int32_t>> PromptIds(const PromptInput& p, size_t index, size_t count,
                                               const Tokenizer& tokenizer) {
  const std::string name = count > 1 ? absl::StrCat("prompt ", index) : "prompt";
  if (!p.text.empty() && !p.ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": give either text or ids, not both"));
  }
  if (p.text.size() > kMaxPromptBytes) {
    return absl::InvalidArgumentError(absl::StrCat(name, " of ", p.text.size(),
                                                   " bytes exceeds the limit of ",
                                                   kMaxPromptBytes));
  }
  if (p.ids.size() > static_cast<size_t>(kMaxPromptIds)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " of ", p.ids.size(),
                                                   " ids exceeds the limit of ", kMaxPromptIds));
  }
  if (!p.ids.empty()) return p.ids;
  auto ids = tokenizer.Encode(p.text, /*add_special=*/true, /*parse_special=*/true);
  if (!ids.ok()) return ids.status();
  // Empty text is the model's BOS alone, where it has one (generation from nothing).
  if (ids->empty()) return absl::InvalidArgumentError(absl::StrCat(name, " is empty"));
  return ids;
}

}  // namespace

absl::StatusOr<std::vector<ChoiceRequest>> ExpandSpec(const GenerateSpec& spec,
                                                      const Tokenizer& tokenizer) {
  if (spec.prompts.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (spec.n < 1 || static_cast<int64_t>(spec.n) * static_cast<int64_t>(spec.prompts.size()) >
                        kMaxChoices) {
    return absl::InvalidArgumentError(absl::StrCat("n (", spec.n, ") times the ",
                                                   spec.prompts.size(),
                                                   " prompt(s) must be in [1, ", kMaxChoices, "]"));
  }
  if (spec.resume_after_tokens < 0) {
    return absl::InvalidArgumentError("resume_after_tokens must not be negative");
  }
  if (spec.resume_after_tokens > 0) {
    if (spec.n * spec.prompts.size() != 1) {
      return absl::InvalidArgumentError("resume_after_tokens takes one prompt and one choice");
    }
    if (!spec.seed && spec.sampling.temperature > 0) {
      return absl::InvalidArgumentError(
          "resume_after_tokens needs the seed the stream's first response reported (a "
          "sampled text depends on it)");
    }
  }
  std::vector<ChoiceRequest> out;
  std::random_device random_seed;
  for (size_t p = 0; p < spec.prompts.size(); ++p) {
    const PromptInput& prompt = spec.prompts[p];
    auto ids = PromptIds(prompt, p, spec.prompts.size(), tokenizer);
    if (!ids.ok()) return ids.status();
    SequenceRequest base;
    base.prompt = std::move(*ids);
    base.sampling = spec.sampling;
    base.max_tokens = spec.max_tokens;
    base.stop = spec.stop;
    base.ignore_eos = spec.ignore_eos;
    base.speculate = spec.speculate;
    base.resume_after = spec.resume_after_tokens;
    base.logprobs = spec.logprobs || spec.top_logprobs > 0;
    base.top_logprobs = spec.top_logprobs;
    std::string echo;
    if (spec.echo) echo = prompt.ids.empty() ? prompt.text : tokenizer.Decode(prompt.ids);
    for (int32_t k = 0; k < spec.n; ++k) {
      ChoiceRequest c;
      c.prompt_index = static_cast<int>(p);
      c.choice = k;
      c.request = base;
      c.request.sampling.seed =
          spec.seed ? *spec.seed + static_cast<uint64_t>(p * spec.n + k) : random_seed();
      c.echo = echo;
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace cascade
