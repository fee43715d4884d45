#include "transport/frame.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "util/checked_math.h"
#include "util/secret.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

absl::Status Bad(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("activation frame: ", field, ": ", problem));
}

void EncodeSequenceSampling(const SequenceSampling& s, v1::SequenceSampling* o) {
  const SamplingParams& p = s.params;
  o->set_seq_id(s.seq);
  o->set_temperature(p.temperature);
  o->set_top_k(p.top_k);
  o->set_top_p(p.top_p);
  o->set_min_p(p.min_p);
  o->set_repetition_penalty(p.repetition_penalty);
  o->set_frequency_penalty(p.frequency_penalty);
  o->set_presence_penalty(p.presence_penalty);
  o->set_penalty_last_n(p.penalty_last_n);
  o->set_seed(p.seed);
  for (const auto& [token, bias] : p.logit_bias) {
    v1::TokenBias* b = o->add_logit_bias();
    b->set_token(token);
    b->set_bias(bias);
  }
  o->set_logprobs(s.logprobs);
  o->set_top_logprobs(s.top_logprobs);
}

// One admitted sequence's sampling, checked: the values as SamplingParams::Validate wants
// them, tokens in the vocabulary, the sequence present in the frame.
absl::StatusOr<SequenceSampling> DecodeSequenceSampling(const v1::SequenceSampling& in,
                                                        int64_t vocab_size) {
  const std::string field = absl::StrCat("admit[seq ", in.seq_id(), "]");
  if (in.logit_bias_size() > static_cast<int>(kMaxLogitBias)) {
    return Bad(field, absl::StrCat(in.logit_bias_size(), " logit biases"));
  }
  if (in.top_logprobs() < 0 || in.top_logprobs() > kMaxTopLogprobs) {
    return Bad(field, absl::StrCat("top_logprobs ", in.top_logprobs()));
  }
  SequenceSampling o;
  o.seq = in.seq_id();
  SamplingParams& p = o.params;
  p.temperature = in.temperature();
  p.top_k = in.top_k();
  p.top_p = in.top_p();
  p.min_p = in.min_p();
  p.repetition_penalty = in.repetition_penalty();
  p.frequency_penalty = in.frequency_penalty();
  p.presence_penalty = in.presence_penalty();
  p.penalty_last_n = in.penalty_last_n();
  p.seed = in.seed();
  for (const v1::TokenBias& b : in.logit_bias()) {
    if (b.token() >= vocab_size) {
      return Bad(field, absl::StrCat("logit_bias token ", b.token(), " is outside the vocabulary"));
    }
    p.logit_bias.emplace_back(b.token(), b.bias());
  }
  if (absl::Status st = p.Validate(); !st.ok()) return Bad(field, std::string(st.message()));
  o.logprobs = in.logprobs();
  o.top_logprobs = in.top_logprobs();
  return o;
}

void EncodeName(const BlockName& n, v1::BlockName* out) {
  out->set_hi(n.hi);
  out->set_lo(n.lo);
}

BlockName DecodeName(const v1::BlockName& in) { return {in.hi(), in.lo()}; }

void EncodeCacheOps(const StageFrame& f, v1::ActivationFrame* out) {
  for (const BlockName& n : f.evict) EncodeName(n, out->add_evict());
  for (const PrefixAttach& a : f.attach) {
    v1::PrefixAttach* o = out->add_attach();
    o->set_seq_id(a.seq);
    for (const BlockName& n : a.blocks) EncodeName(n, o->add_blocks());
    if (a.partial_rows > 0) {
      EncodeName(a.partial, o->mutable_partial());
      o->set_partial_rows(a.partial_rows);
    }
  }
  for (const BlockPublish& p : f.publish) {
    v1::BlockPublish* o = out->add_publish();
    o->set_seq_id(p.seq);
    o->set_block(p.block);
    EncodeName(p.name, o->mutable_name());
  }
}

// Attach and publish entries: each about a sequence with tokens in this frame (in_frame),
// each sequence attached once, within the context.
absl::Status DecodeCacheOps(const v1::ActivationFrame& in, const FrameExpectations& e,
                            const std::set<SeqId>& in_frame, StageFrame* f) {
  std::set<SeqId> attached;
  for (const v1::PrefixAttach& a : in.attach()) {
    const std::string field = absl::StrCat("attach[seq ", a.seq_id(), "]");
    if (!in_frame.count(a.seq_id())) return Bad(field, "the sequence has no token in this frame");
    if (!attached.insert(a.seq_id()).second) return Bad(field, "duplicate");
    if (a.partial_rows() < 0 || a.partial_rows() >= e.context_length ||
        (a.partial_rows() > 0) != a.has_partial()) {
      return Bad(field, absl::StrCat(a.partial_rows(), " rows of ",
                                     a.has_partial() ? "a" : "no", " partial block"));
    }
    if ((a.blocks_size() == 0 && a.partial_rows() == 0) || a.blocks_size() >= e.context_length) {
      return Bad(field, absl::StrCat(a.blocks_size(), " blocks"));
    }
    PrefixAttach& o = f->attach.emplace_back();
    o.seq = a.seq_id();
    for (const v1::BlockName& n : a.blocks()) o.blocks.push_back(DecodeName(n));
    if (a.partial_rows() > 0) {
      o.partial = DecodeName(a.partial());
      o.partial_rows = a.partial_rows();
    }
  }
  if (in.publish_size() > static_cast<int>(f->slots.size())) {
    return Bad("publish", absl::StrCat(in.publish_size(), " blocks for ", f->slots.size(),
                                       " tokens"));
  }
  for (const v1::BlockPublish& p : in.publish()) {
    const std::string field = absl::StrCat("publish[seq ", p.seq_id(), "]");
    if (!in_frame.count(p.seq_id())) return Bad(field, "the sequence has no token in this frame");
    if (p.block() < 0 || p.block() >= e.context_length) {
      return Bad(field, absl::StrCat("block ", p.block(), " is outside the context"));
    }
    f->publish.push_back({p.seq_id(), p.block(), DecodeName(p.name())});
  }
  return absl::OkStatus();
}

}  // namespace

void EncodeFrame(const StageFrame& f, std::string_view link_key, v1::ActivationFrame* out) {
  out->Clear();
  out->set_version(kFrameVersion);
  out->set_link_key(link_key.data(), link_key.size());
  out->set_plan_id(f.plan_id);
  out->set_batch_id(f.batch_id);
  out->set_stage(f.stage);
  const int64_t n = static_cast<int64_t>(f.slots.size());
  out->mutable_seq_ids()->Reserve(static_cast<int>(n));
  for (const TokenSlot& s : f.slots) {
    out->add_seq_ids(s.seq);
    out->add_positions(s.pos);
    out->add_tokens(s.token);
    out->add_want_logits(s.want_logits);
  }
  if (!f.hidden.empty()) {
    out->set_dtype(v1::DTYPE_F32);
    out->add_shape(n);
    out->add_shape(n > 0 ? static_cast<int64_t>(f.hidden.size()) / n : 0);
    out->set_payload(f.hidden.data(), f.hidden.size() * sizeof(float));
  }
  for (const SequenceSampling& s : f.admit) EncodeSequenceSampling(s, out->add_admit());
  for (SeqId r : f.release) out->add_release_seq_ids(r);
  EncodeCacheOps(f, out);
  if (!f.error.empty()) out->set_error(f.error);
  out->set_sent_unix_ns(f.sent_unix_ns);
}

int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<double> SecondsSince(int64_t sent_unix_ns) {
  if (sent_unix_ns <= 0) return std::nullopt;
  const double s = static_cast<double>(UnixNanos() - sent_unix_ns) * 1e-9;
  if (!(s >= 0 && s < 3600)) return std::nullopt;
  return s;
}

absl::StatusOr<StageFrame> DecodeFrame(const v1::ActivationFrame& in, const FrameExpectations& e) {
  if (!SecretsEqual(in.link_key(), e.link_key)) {
    return absl::PermissionDeniedError(
        "activation frame: link_key is not the key of this stage's inbound link");
  }
  if (in.version() != kFrameVersion) {
    return Bad("version",
               absl::StrCat(in.version(), " is not the supported version ", kFrameVersion));
  }
  if (in.plan_id() != e.plan_id) {
    return Bad("plan_id", absl::StrCat(in.plan_id(), " is not the loaded plan ", e.plan_id));
  }
  if (in.stage() != e.stage) {
    return Bad("stage",
               absl::StrCat("frame is for stage ", in.stage(), ", this is stage ", e.stage));
  }
  const int64_t n = in.seq_ids_size();
  if (n > e.max_batch_tokens) {
    return Bad("seq_ids",
               absl::StrCat(n, " tokens exceed the batch limit of ", e.max_batch_tokens));
  }
  if (in.positions_size() != n || in.tokens_size() != n || in.want_logits_size() != n) {
    return Bad("per-token fields", absl::StrCat("seq_ids has ", n, " entries, positions ",
                                                in.positions_size(), ", tokens ", in.tokens_size(),
                                                ", want_logits ", in.want_logits_size()));
  }
  if (in.release_seq_ids_size() > kMaxReleasePerFrame) {
    return Bad("release_seq_ids", absl::StrCat(in.release_seq_ids_size(), " entries"));
  }
  if (in.evict_size() > kMaxReleasePerFrame) {
    return Bad("evict", absl::StrCat(in.evict_size(), " entries"));
  }
  StageFrame f;
  f.plan_id = in.plan_id();
  f.batch_id = in.batch_id();
  f.stage = in.stage();
  f.error = in.error();
  f.sent_unix_ns = in.sent_unix_ns();
  f.release.assign(in.release_seq_ids().begin(), in.release_seq_ids().end());
  for (const v1::BlockName& name : in.evict()) f.evict.push_back(DecodeName(name));
  if (!f.error.empty() || n == 0) {
    if (n == 0 && (in.shape_size() != 0 || !in.payload().empty())) {
      return Bad("payload", "a frame without tokens carries activations");
    }
    if (in.admit_size() != 0) return Bad("admit", "a frame without tokens admits sequences");
    if (in.attach_size() != 0 || in.publish_size() != 0) {
      return Bad("attach/publish", "a frame without tokens caches blocks");
    }
    return f;  // release-only or error frame
  }
  // Activations.
  if (e.first_stage) {
    if (in.dtype() != v1::DTYPE_UNSPECIFIED || in.shape_size() != 0 || !in.payload().empty()) {
      return Bad("payload", "the first stage takes token ids, not activations");
    }
  } else {
    if (in.dtype() != v1::DTYPE_F32) {
      return Bad("dtype", absl::StrCat("expected F32, got ", v1::DType_Name(in.dtype())));
    }
    if (in.shape_size() != 2 || in.shape(0) != n || in.shape(1) != e.dim) {
      std::string got;
      for (int i = 0; i < in.shape_size(); ++i) absl::StrAppend(&got, i ? ", " : "", in.shape(i));
      return Bad("shape", absl::StrCat("[", got, "] is not [", n, ", ", e.dim, "]"));
    }
    uint64_t bytes = 0;
    if (!CheckedProduct({static_cast<uint64_t>(n), static_cast<uint64_t>(e.dim), 4}, &bytes) ||
        in.payload().size() != bytes) {
      return Bad("payload", absl::StrCat(in.payload().size(), " bytes, shape needs ", bytes));
    }
    f.hidden.resize(static_cast<size_t>(n * e.dim));
    std::memcpy(f.hidden.data(), in.payload().data(), bytes);
  }
  // Tokens.
  f.slots.resize(n);
  std::set<SeqId> wanting;
  for (int64_t i = 0; i < n; ++i) {
    TokenSlot& s = f.slots[i];
    s.seq = in.seq_ids(static_cast<int>(i));
    s.pos = in.positions(static_cast<int>(i));
    s.token = in.tokens(static_cast<int>(i));
    s.want_logits = in.want_logits(static_cast<int>(i));
    if (s.pos < 0 || s.pos >= e.context_length) {
      return Bad(absl::StrCat("positions[", i, "]"),
                 absl::StrCat(s.pos, " is outside the context of ", e.context_length));
    }
    if (s.token < 0 || s.token >= e.vocab_size) {  // stage 0's input, the last's penalties
      return Bad(absl::StrCat("tokens[", i, "]"),
                 absl::StrCat(s.token, " is outside the vocabulary of ", e.vocab_size));
    }
    // A sequence samples at its last slot, or (verifying drafted tokens) at each of its
    // last few: once it samples, every later slot of it in the frame does too.
    if (s.want_logits) {
      wanting.insert(s.seq);
    } else if (wanting.contains(s.seq)) {
      return Bad("want_logits", absl::StrCat("sequence ", s.seq, " samples at a position before ",
                                             s.pos, " but not at ", s.pos));
    }
  }
  // Admissions and the prefix cache's attach and publish entries name sequences with a
  // token in this frame. A steady step has none and pays nothing here.
  if (in.admit_size() == 0 && in.attach_size() == 0 && in.publish_size() == 0) return f;
  std::set<SeqId> in_frame, admitted;
  for (const TokenSlot& s : f.slots) in_frame.insert(s.seq);
  CASCADE_RETURN_IF_ERROR(DecodeCacheOps(in, e, in_frame, &f));
  for (const v1::SequenceSampling& a : in.admit()) {
    const std::string field = absl::StrCat("admit[seq ", a.seq_id(), "]");
    if (!in_frame.count(a.seq_id())) return Bad(field, "the sequence has no token in this frame");
    if (!admitted.insert(a.seq_id()).second) return Bad(field, "duplicate");
    CASCADE_ASSIGN_OR_RETURN(SequenceSampling o, DecodeSequenceSampling(a, e.vocab_size));
    f.admit.push_back(std::move(o));
  }
  return f;
}

void EncodeResult(const StepResult& r, std::string_view link_key, v1::StepResult* out) {
  out->Clear();
  out->set_link_key(link_key.data(), link_key.size());
  out->set_plan_id(r.plan_id);
  out->set_batch_id(r.batch_id);
  for (const SampledToken& t : r.tokens) {
    v1::SampledToken* o = out->add_tokens();
    o->set_seq_id(t.seq);
    o->set_token(t.token);
    o->set_logprob(t.logprob);
    o->set_position(t.position);
    for (const TokenLogprob& a : t.top) {
      o->add_top_tokens(a.token);
      o->add_top_logprobs(a.logprob);
    }
  }
  if (!r.error.empty()) out->set_error(r.error);
  out->set_sent_unix_ns(r.sent_unix_ns);
}

absl::StatusOr<StepResult> DecodeResult(const v1::StepResult& in, const std::string& link_key,
                                        uint64_t plan_id, int64_t vocab_size) {
  if (!SecretsEqual(in.link_key(), link_key)) {
    return absl::PermissionDeniedError("step result: link_key is not the results link's key");
  }
  if (in.plan_id() != plan_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("step result: plan_id ", in.plan_id(), " is not the current plan ", plan_id));
  }
  StepResult r;
  r.plan_id = in.plan_id();
  r.batch_id = in.batch_id();
  r.error = in.error();
  r.sent_unix_ns = in.sent_unix_ns();
  for (const v1::SampledToken& t : in.tokens()) {
    if (t.token() < 0 || t.token() >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("step result: token ", t.token(), " is outside the vocabulary"));
    }
    if (t.top_tokens_size() != t.top_logprobs_size() || t.top_tokens_size() > kMaxTopLogprobs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step result: ", t.top_tokens_size(), " top tokens with ", t.top_logprobs_size(),
          " logprobs (at most ", kMaxTopLogprobs, ", one each)"));
    }
    SampledToken o{t.seq_id(), t.token(), t.logprob(), t.position(), {}};
    for (int i = 0; i < t.top_tokens_size(); ++i) {
      if (t.top_tokens(i) < 0 || t.top_tokens(i) >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("step result: top token ", t.top_tokens(i), " is outside the vocabulary"));
      }
      o.top.push_back({t.top_tokens(i), t.top_logprobs(i)});
    }
    r.tokens.push_back(std::move(o));
  }
  return r;
}

}  // namespace cascade
