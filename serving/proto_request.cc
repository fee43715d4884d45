#include "serving/proto_request.h"

#include <algorithm>

namespace cascade {

SamplingParams SamplingFromProto(const v1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.presence_penalty = p.presence_penalty();
  s.seed = p.seed();
  s.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
  std::sort(s.logit_bias.begin(), s.logit_bias.end());
  return s;
}

absl::StatusOr<GenerateSpec> SpecFromProto(const v1::GenerateRequest& req) {
  if (req.prompt().empty() && req.prompt_ids_size() == 0) {
    return absl::InvalidArgumentError("prompt is empty (give prompt or prompt_ids)");
  }
  if (!req.prompt().empty() && req.prompt_ids_size() > 0) {
    return absl::InvalidArgumentError("give either prompt or prompt_ids, not both");
  }
  GenerateSpec spec;
  spec.model = req.model();
  PromptInput prompt;
  prompt.text = req.prompt();
  prompt.ids.assign(req.prompt_ids().begin(), req.prompt_ids().end());
  spec.prompts.push_back(std::move(prompt));
  // The default instance when absent: the same as an empty message.
  spec.sampling = SamplingFromProto(req.sampling());
  if (req.sampling().has_seed()) spec.seed = req.sampling().seed();
  spec.max_tokens = req.max_tokens();
  spec.stop.assign(req.stop().begin(), req.stop().end());
  spec.ignore_eos = req.ignore_eos();
  spec.speculate = !req.no_speculation();
  spec.resume_after_tokens = req.resume_after_tokens();
  spec.logprobs = req.logprobs();
  spec.top_logprobs = req.top_logprobs();
  return spec;
}

void SpecToProto(const GenerateSpec& spec, v1::GenerateRequest* out) {
  out->Clear();
  out->set_model(spec.model);
  if (!spec.prompts.empty()) {
    out->set_prompt(spec.prompts.front().text);
    for (int32_t id : spec.prompts.front().ids) out->add_prompt_ids(id);
  }
  const SamplingParams& p = spec.sampling;
  v1::SamplingParams* s = out->mutable_sampling();
  s->set_temperature(p.temperature);
  s->set_top_k(p.top_k);
  s->set_top_p(p.top_p);
  s->set_min_p(p.min_p);
  s->set_repetition_penalty(p.repetition_penalty);
  s->set_frequency_penalty(p.frequency_penalty);
  s->set_presence_penalty(p.presence_penalty);
  for (const auto& [token, bias] : p.logit_bias) (*s->mutable_logit_bias())[token] = bias;
  if (spec.seed) {
    s->set_seed(*spec.seed);
    s->set_has_seed(true);
  }
  out->set_max_tokens(spec.max_tokens);
  for (const std::string& stop : spec.stop) out->add_stop(stop);
  out->set_ignore_eos(spec.ignore_eos);
  out->set_no_speculation(!spec.speculate);
  out->set_resume_after_tokens(spec.resume_after_tokens);
  out->set_logprobs(spec.logprobs);
  out->set_top_logprobs(spec.top_logprobs);
}

v1::FinishReason FinishReasonToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEndOfSequence:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kContextFull:
      return v1::FINISH_REASON_CONTEXT;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_UNSPECIFIED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace cascade
