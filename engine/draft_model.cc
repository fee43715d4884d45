#include "engine/draft_model.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/stage.h"
#include "kernels/cpu/cpu_backend.h"
#include "spdlog/spdlog.h"

namespace cascade {
namespace {

// The draft model's greedy continuation of each sequence it is asked about, from a KV
// cache that keeps what it fed each sequence (see the contract in draft_model.h).
class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::unique_ptr<Stage> stage, int32_t vocab, int sequences)
      : stage_(std::move(stage)), vocab_(vocab), capacity_(sequences) {}

  std::vector<int32_t> Draft(SeqId seq, std::span<const int32_t> tokens, int k) override;
  void Forget(SeqId seq) override {
    if (kept_.erase(seq) != 0) stage_->FreeSequence(seq);
  }

 private:
  struct Kept {
    std::vector<int32_t> fed;  // the tokens whose KV entries the stage holds, in order
    uint64_t used = 0;         // when it was last drafted for (the LRU clock)
  };

  Kept& Touch(SeqId seq);
  void Warn(const absl::Status& st) {
    if (warned_) return;
    spdlog::warn("draft model: cannot draft ({}); verifying fewer drafts",
                 std::string(st.message()));
    warned_ = true;
  }
  // Feeds `slots` (at most a batch; the last wants logits); returns the argmax over the
  // shared vocabulary of the last slot's logits.
  absl::StatusOr<int32_t> Step(std::span<const TokenSlot> slots);

  std::unique_ptr<Stage> stage_;
  const int32_t vocab_;
  const size_t capacity_;
  std::map<SeqId, Kept> kept_;
  uint64_t clock_ = 0;
  bool warned_ = false;
  std::vector<TokenSlot> slots_;
  std::vector<float> logits_;
};

ModelDrafter::Kept& ModelDrafter::Touch(SeqId seq) {
  auto it = kept_.find(seq);
  if (it == kept_.end()) {
    if (kept_.size() >= capacity_) {
      auto lru = std::min_element(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) {
        return a.second.used < b.second.used;
      });
      Forget(lru->first);
    }
    it = kept_.emplace(seq, Kept{}).first;
  }
  it->second.used = ++clock_;
  return it->second;
}

absl::StatusOr<int32_t> ModelDrafter::Step(std::span<const TokenSlot> slots) {
  if (absl::Status st = stage_->Forward(slots, {}, &logits_); !st.ok()) return st;
  // The only logits row is the last slot's.
  const auto row = std::span<const float>(logits_).first(static_cast<size_t>(vocab_));
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::vector<int32_t> ModelDrafter::Draft(SeqId seq, std::span<const int32_t> tokens, int k) {
  const int64_t context = stage_->config().context_length;
  k = static_cast<int>(std::min<int64_t>(k, context - static_cast<int64_t>(tokens.size())));
  if (k <= 0 || tokens.empty()) return {};
  Kept& kept = Touch(seq);
  // Feed from the first token the cache does not hold as it is now; at least the last
  // token, whose logits give the first draft.
  size_t common = std::mismatch(kept.fed.begin(), kept.fed.end(), tokens.begin(), tokens.end())
                      .first - kept.fed.begin();
  common = std::min(common, tokens.size() - 1);
  slots_.clear();
  for (size_t pos = common; pos < tokens.size(); ++pos) {
    slots_.push_back({tokens[pos], seq, static_cast<int32_t>(pos), pos + 1 == tokens.size()});
  }
  kept.fed.resize(common);
  // A long catch-up (a new sequence's prompt) goes in one chunk a call, drafting nothing
  // until it is done, so that the scheduler's thread, which calls this, is never held up
  // for more than a chunk's compute.
  const size_t chunk = static_cast<size_t>(stage_->options().max_batch_tokens);
  if (slots_.size() > chunk) {
    slots_.resize(chunk);
    slots_.back().want_logits = false;
    if (absl::Status st = stage_->Forward(slots_, {}, &logits_); !st.ok()) {
      Warn(st);
      Forget(seq);
      return {};
    }
    for (const TokenSlot& s : slots_) kept.fed.push_back(s.token);
    return {};
  }
  std::vector<int32_t> drafts;
  for (int i = 0; i < k; ++i) {
    absl::StatusOr<int32_t> next = Step(slots_);
    if (!next.ok()) {
      Warn(next.status());
      Forget(seq);
      return drafts;
    }
    for (const TokenSlot& s : slots_) kept.fed.push_back(s.token);
    drafts.push_back(*next);
    slots_.assign(1, {*next, seq, static_cast<int32_t>(tokens.size()) + i, true});
  }
  return drafts;
}

}  // namespace

absl::Status CompareVocabularies(const Tokenizer& target, const Tokenizer& draft) {
  if (target.vocab_size() != draft.vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the draft model's vocabulary has ", draft.vocab_size(),
                     " tokens and the model's ", target.vocab_size(),
                     ": a draft model must share the model's vocabulary"));
  }
  for (int32_t id = 0; id < target.vocab_size(); ++id) {
    if (target.TokenText(id) != draft.TokenText(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", id, " is '", draft.TokenText(id), "' in the draft model and '",
                       target.TokenText(id),
                       "' in the model: a draft model must share the model's vocabulary"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DraftModel>> DraftModel::Open(const std::string& path,
                                                             const Tokenizer& target,
                                                             const DraftModelOptions& options) {
  if (options.threads < 1 || options.sequences < 1 || options.max_batch_tokens < 1) {
    return absl::InvalidArgumentError(
        "a draft model needs at least one thread, one sequence and one token a batch");
  }
  auto source = ModelSource::Open(path);
  if (!source.ok()) {
    return absl::Status(source.status().code(),
                        absl::StrCat("draft model ", path, ": ", source.status().message()));
  }
  auto tokenizer = Tokenizer::FromSource(**source);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("draft model ", path, ": ", tokenizer.status().message()));
  }
  if (absl::Status st = CompareVocabularies(target, **tokenizer); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("draft model ", path, ": ", st.message()));
  }
  if ((*source)->config().vocab_size < target.vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft model ", path, ": its output head has ", (*source)->config().vocab_size,
        " rows for a vocabulary of ", target.vocab_size()));
  }
  std::unique_ptr<DraftModel> m(new DraftModel());
  m->source_ = std::move(*source);
  m->vocab_ = target.vocab_size();
  m->options_ = options;
  // Refuse now what a drafter could not run (an unsupported architecture or type).
  if (auto probe = m->NewDrafter(); !probe.ok()) return probe.status();
  return m;
}

absl::StatusOr<std::unique_ptr<Drafter>> DraftModel::NewDrafter() const {
  StageOptions so;
  so.threads = options_.threads;
  so.kv_sequences = options_.sequences;
  so.max_batch_tokens = options_.max_batch_tokens;
  // The weights are used in place (the mapped file): every drafter shares them.
  CpuBackendOptions bo;
  bo.threads = options_.threads;
  bo.quantized_activations = so.quantized_activations;
  bo.copy_weights = false;
  auto stage = Stage::Create(*source_, so, std::make_unique<CpuBackend>(bo));
  if (!stage.ok()) {
    return absl::Status(stage.status().code(),
                        absl::StrCat("draft model ", path(), ": ", stage.status().message()));
  }
  return std::make_unique<ModelDrafter>(std::move(*stage), vocab_, options_.sequences);
}

}  // namespace cascade
