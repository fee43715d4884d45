#include "serving/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "serving/ngram_drafter.h"
#include "util/logging.h"
#include "util/status_macros.h"

namespace cascade {

Scheduler::Scheduler(const SchedulerConfig& config, const Tokenizer& tokenizer,
                     int64_t context_length, int64_t vocab_size, SchedulerTimeouts timeouts)
    : config_(config),
      tokenizer_(tokenizer),
      context_length_(context_length),
      vocab_size_(vocab_size),
      timeouts_(timeouts) {
  if (config.speculative == Speculative::kNgram) drafter_ = std::make_unique<NgramDrafter>();
}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Scheduler::Stop() {
  std::shared_ptr<ActivationSender> link;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    link = link_;
  }
  // Nothing is sent after a stop; closing the link first also ends a send that is stuck
  // (e.g. reconnecting to a dead first stage), so the join below does not wait for it.
  if (link) link->Close();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::Attach(PipelineSpec pipeline) {
  absl::MutexLock lock(&mu_);
  inbox_.attach = std::move(pipeline);
}

void Scheduler::Detach(const absl::Status& why) {
  std::shared_ptr<ActivationSender> link;
  {
    absl::MutexLock lock(&mu_);
    inbox_.detach = why.ok() ? absl::UnavailableError("the pipeline was detached") : why;
    inbox_.attach.reset();
    attached_ = false;
    link = std::move(link_);
  }
  // A send stuck connecting to a dead stage gives up now.
  if (link) link->StopReconnecting();
}

void Scheduler::FailAll(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  inbox_.fail_all = status;
}

void Scheduler::StopAdmitting(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  not_admitting_ = why.ok() ? absl::UnavailableError("the server is not admitting requests") : why;
}

void Scheduler::HandOver(std::shared_ptr<Scheduler> to) {
  if (to == nullptr || to.get() == this) return;
  absl::MutexLock lock(&mu_);
  inbox_.hand_over = std::move(to);
}

void Scheduler::Adopt(std::vector<Carried> carried) {
  absl::MutexLock lock(&mu_);
  for (Carried& c : carried) inbox_.adopted.push_back(std::move(c));
  if (stop_) EndWaiting(absl::UnavailableError("the server is shutting down"));
}

void Scheduler::ApplyHandOver(std::shared_ptr<Scheduler> to) {
  if (pipeline_) ApplyDetach(absl::UnavailableError("handed over to another replica"));
  std::vector<Carried> out;
  for (auto& [id, s] : running_) {
    if (drafter_) drafter_->Forget(id);
    if (s.stream == nullptr) continue;
    DoneComputing(s, nullptr);
    Carried c;
    c.running = std::move(s);
    c.running.Rewind();
    out.push_back(std::move(c));
  }
  running_.clear();
  {
    absl::MutexLock lock(&mu_);
    for (Carried& c : carried_) out.push_back(std::move(c));
    carried_.clear();
    for (Pending& p : waiting_) {
      Carried c;
      c.pending = std::move(p);
      out.push_back(std::move(c));
    }
    waiting_.clear();
    blocks_reserved_ = 0;
    running_count_ = 0;
    stats_.handed_over += out.size();
  }
  if (!out.empty()) {
    spdlog::warn("scheduler: {} sequence(s) and request(s) handed over to another replica",
                 out.size());
  }
  to->Adopt(std::move(out));
}

void Scheduler::ApplyAdopt(std::vector<Carried> carried) {
  absl::MutexLock lock(&mu_);
  std::deque<Pending> requests;
  for (Carried& c : carried) {
    if (c.is_sequence()) {
      carried_.push_back(std::move(c));
    } else {
      requests.push_back(std::move(c.pending));
    }
  }
  // They waited longer than anything here: ahead of this scheduler's own requests.
  waiting_.insert(waiting_.begin(), std::make_move_iterator(requests.begin()),
                  std::make_move_iterator(requests.end()));
  admission_held_ = false;
}

bool Scheduler::AdmitCarried() {
  while (!carried_.empty() && running_count_ < config_.max_running) {
    Running& c = carried_.front().running;
    const int64_t blocks = BlocksFor(c.seq->prompt_len(), c.seq->max_tokens());
    if (blocks > kv_blocks_ || c.stream->cancelled()) {
      StreamEvent e;
      e.last = true;
      e.finish = FinishReason::kCancelled;
      if (!c.stream->cancelled()) {
        e.status = absl::ResourceExhaustedError(absl::StrCat(
            "the sequence needs ", blocks, " KV blocks; the replica it moved to holds ",
            kv_blocks_));
        ++stats_.failed;
      }
      metrics_.RecordEnded(
          c.stream->cancelled() ? RequestOutcome::kCancelled : RequestOutcome::kFailed, -1);
      c.stream->Push(std::move(e));
      carried_.pop_front();
      continue;
    }
    if (!MakeRoom(blocks)) return false;
    Running s = std::move(c);
    s.id = next_seq_++;
    s.blocks = blocks;
    carried_.pop_front();
    blocks_reserved_ += blocks;
    ++stats_.resumed;
    const SeqId id = s.id;
    running_.emplace(id, std::move(s));
    ++running_count_;
  }
  return carried_.empty();
}

int64_t Scheduler::BlocksFor(int32_t prompt_len, int32_t max_tokens) const {
  const int64_t total = std::min<int64_t>(int64_t{prompt_len} + max_tokens, context_length_);
  return (total + kv_block_size_ - 1) / kv_block_size_;
}

absl::StatusOr<std::shared_ptr<RequestStream>> Scheduler::Submit(SequenceRequest req) {
  auto stream = Enqueue(std::move(req));
  if (!stream.ok()) metrics_.RecordEnded(RequestOutcome::kRejected, -1);
  return stream;
}

absl::StatusOr<std::shared_ptr<RequestStream>> Scheduler::Enqueue(SequenceRequest req) {
  if (absl::Status st = ValidateSequenceRequest(req, vocab_size_, context_length_); !st.ok()) {
    return st;
  }
  Pending p;
  p.stream = std::make_shared<RequestStream>();
  p.submitted = Clock::now();
  p.req = std::move(req);
  std::shared_ptr<RequestStream> stream = p.stream;
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::UnavailableError("the server is shutting down");
  if (!not_admitting_.ok()) return not_admitting_;
  if (attached_) CASCADE_RETURN_IF_ERROR(MaxTokensFor(p.req).status());
  if (static_cast<int>(waiting_.size()) >= config_.max_waiting) {
    ++stats_.rejected;
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request queue is full (", config_.max_waiting, " waiting); retry later"));
  }
  waiting_.push_back(std::move(p));
  admission_held_ = false;  // this one may fit
  return stream;
}

void Scheduler::OnResult(StepResult result) {
  if (std::optional<double> hop = SecondsSince(result.sent_unix_ns)) metrics_.RecordResultHop(*hop);
  absl::MutexLock lock(&mu_);
  inbox_.results.push_back(std::move(result));
}

SchedulerStats Scheduler::Stats() const {
  absl::MutexLock lock(&mu_);
  SchedulerStats s = stats_;
  s.waiting = static_cast<int64_t>(waiting_.size() + carried_.size());
  s.running = running_count_;
  s.kv_blocks_reserved = blocks_reserved_;
  s.kv_blocks_total = kv_blocks_;
  return s;
}

bool Scheduler::Idle() const {
  absl::MutexLock lock(&mu_);
  return waiting_.empty() && carried_.empty() && inbox_.adopted.empty() && running_count_ == 0;
}

bool Scheduler::HasWork() const {
  return stop_ || !inbox_.results.empty() || !inbox_.fail_all.ok() || !inbox_.detach.ok() ||
         inbox_.attach.has_value() || inbox_.hand_over != nullptr || !inbox_.adopted.empty() ||
         (attached_ && (!waiting_.empty() || !carried_.empty()) &&
          running_count_ < config_.max_running && !admission_held_);
}

absl::StatusOr<int32_t> Scheduler::MaxTokensFor(const SequenceRequest& req) const {
  const int64_t cache_tokens = kv_blocks_ * kv_block_size_;
  const int32_t prompt = static_cast<int32_t>(req.prompt.size());
  if (prompt >= cache_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt,
                                                   " tokens exceeds the KV cache of ",
                                                   cache_tokens, " tokens"));
  }
  return cache_tokens < context_length_
             ? ResolveMaxTokens(req.max_tokens, prompt, cache_tokens, kKvCacheRoom)
             : ResolveMaxTokens(req.max_tokens, prompt, context_length_, kContextRoom);
}

void Scheduler::Admit() {
  if (!AdmitCarried()) {  // carried sequences first: they streamed already
    admission_held_ = true;
    return;
  }
  bool held = false;  // a request waits that nothing but a later event can admit
  for (auto it = waiting_.begin(); it != waiting_.end() && running_count_ < config_.max_running;) {
    Pending& p = *it;
    const int32_t prompt = static_cast<int32_t>(p.req.prompt.size());
    const absl::StatusOr<int32_t> fits = MaxTokensFor(p.req);
    if (p.stream->cancelled() || !fits.ok()) {
      StreamEvent e;
      e.last = true;
      e.finish = FinishReason::kCancelled;
      if (!p.stream->cancelled()) {
        e.status = fits.status();
        ++stats_.failed;
      }
      metrics_.RecordEnded(
          p.stream->cancelled() ? RequestOutcome::kCancelled : RequestOutcome::kFailed, -1);
      p.stream->Push(std::move(e));
      it = waiting_.erase(it);
      continue;
    }
    const int32_t max_tokens = *fits;
    const int64_t blocks = BlocksFor(prompt, max_tokens);
    PrefixLookup found;
    if (prefix_) {
      found = PrefixFor(p, blocks);
      if (found.outcome == PrefixLookup::kComputing) {  // admitted once that block is cached
        held = true;
        ++it;
        continue;
      }
      if (found.outcome == PrefixLookup::kNoRoom) {
        held = true;
        break;
      }
      stats_.prefix_queried_tokens += static_cast<uint64_t>(prompt);
    } else if (blocks_reserved_ + blocks > kv_blocks_) {
      held = true;
      break;
    }
    Running s;
    s.id = next_seq_++;
    s.seq = std::make_unique<Sequence>(tokenizer_, std::move(p.req), max_tokens, context_length_);
    s.blocks = blocks - found.hits;
    s.processed = static_cast<int32_t>(found.hits) * kv_block_size_ + found.partial.rows;
    if (prefix_) {  // the prompt's names: the cached ones, then those it computes
      s.names = std::move(p.names);
      s.prefix.assign(s.names.begin(), s.names.begin() + found.hits);
      s.partial = found.partial;
      s.cached_tokens = s.processed;
      s.uses = s.prefix;
      if (s.partial.rows > 0) s.uses.push_back(s.partial.name);
      s.computing.assign(s.names.begin() + found.hits, s.names.end());
      for (const BlockName& name : s.computing) ++computing_[name];
    }
    s.stream = std::move(p.stream);
    // Speculating sequences start with one draft a step and earn more (see HandleResult):
    // a draft that fails costs a position's compute.
    s.spec_k = drafter_ != nullptr && s.seq->request().speculate ? 1 : 0;
    s.submitted = p.submitted;
    s.admitted = Clock::now();
    metrics_.RecordAdmitted(std::chrono::duration<double>(s.admitted - s.submitted).count());
    it = waiting_.erase(it);
    blocks_reserved_ += s.blocks;
    stats_.prompt_tokens += static_cast<uint64_t>(prompt);
    stats_.prefix_hit_tokens += static_cast<uint64_t>(s.processed);
    const SeqId id = s.id;
    running_.emplace(id, std::move(s));
    ++running_count_;
  }
  admission_held_ = held;
}

Scheduler::PrefixLookup Scheduler::PrefixFor(Pending& p, int64_t blocks) {
  const std::vector<int32_t>& prompt = p.req.prompt;
  // Named once per request and block size (a held request is looked up again each time
  // the loop admits). At least the prompt's last token is computed: its logits give the
  // first sample.
  if (p.names_block_size != kv_block_size_) {
    const int64_t usable = (static_cast<int64_t>(prompt.size()) - 1) / kv_block_size_;
    p.names = PrefixCache::ChainNames(prompt, kv_block_size_, usable);
    p.names_block_size = kv_block_size_;
  }
  PrefixLookup out;
  out.hits = prefix_->Match(prompt, p.names);
  const std::span<const BlockName> hits(p.names.data(), static_cast<size_t>(out.hits));
  // A running sequence computing the next block will publish it soon; this request then
  // starts after it (a burst of requests with one new system prompt computes it once).
  if (out.hits < static_cast<int64_t>(p.names.size()) && computing_.contains(p.names[out.hits])) {
    prefix_->Release(hits);
    return {PrefixLookup::kComputing, 0, {}};
  }
  // Where the prompt parts from a cached block: the rows before that, copied (at least the
  // last prompt token is still computed).
  const int64_t start = out.hits * kv_block_size_;
  const int64_t room = static_cast<int64_t>(prompt.size()) - 1 - start;
  if (room > 0) {  // MatchPartial keeps it within the block
    out.partial = prefix_->MatchPartial(out.hits == 0 ? BlockName{} : p.names[out.hits - 1],
                                        std::span(prompt).subspan(static_cast<size_t>(start)),
                                        static_cast<int32_t>(room));
  }
  if (!MakeRoom(blocks - out.hits)) {
    if (out.partial.rows > 0) {  // its source block may be the one that must make room
      prefix_->Release({&out.partial.name, 1});
      out.partial = {};
      if (MakeRoom(blocks - out.hits)) return out;
    }
    prefix_->Release(hits);
    return {PrefixLookup::kNoRoom, 0, {}};
  }
  return out;
}

bool Scheduler::MakeRoom(int64_t blocks) {
  const int64_t over = blocks_reserved_ + (prefix_ ? prefix_->blocks() : 0) + blocks - kv_blocks_;
  if (over <= 0) return true;
  if (!prefix_ || over > prefix_->idle_blocks()) return false;
  const std::vector<BlockName> evicted = prefix_->EvictIdle(over);
  evict_.insert(evict_.end(), evicted.begin(), evicted.end());
  return true;
}

void Scheduler::DoneComputing(Running& s, const BlockName* name) {
  for (auto it = s.computing.begin(); it != s.computing.end();) {
    if (name != nullptr && *it != *name) {
      ++it;
      continue;
    }
    if (auto c = computing_.find(*it); c != computing_.end() && --c->second == 0) {
      computing_.erase(c);
    }
    it = s.computing.erase(it);
  }
}

void Scheduler::EndWaiting(const absl::Status& why) {
  // Carried sequences (admitted or posted) end as waiting requests do.
  for (Carried& c : inbox_.adopted) {
    if (c.is_sequence()) {
      carried_.push_back(std::move(c));
    } else {
      waiting_.push_back(std::move(c.pending));
    }
  }
  inbox_.adopted.clear();
  for (Carried& c : carried_) {
    StreamEvent e;
    e.last = true;
    e.status = why;
    c.running.stream->Push(std::move(e));
    ++stats_.failed;
    metrics_.RecordEnded(RequestOutcome::kFailed, -1);
  }
  carried_.clear();
  while (!waiting_.empty()) {
    StreamEvent e;
    e.last = true;
    e.status = why;
    waiting_.front().stream->Push(std::move(e));
    waiting_.pop_front();
    ++stats_.failed;
    metrics_.RecordEnded(RequestOutcome::kFailed, -1);
  }
}

void Scheduler::Loop() {
  for (;;) {
    Inbox in;
    {
      absl::MutexLock lock(&mu_);
      absl::Time deadline = absl::InfiniteFuture();
      if (link_down_since_) {
        // Waiting to try the first stage again.
        deadline = absl::Now() + absl::FromChrono(std::max(retry_at_ - Clock::now(),
                                                           Clock::duration::zero()));
      } else if (!running_.empty() && flights_.empty()) {
        // Sequences none of which could be sent: look again every few ms (cancellations).
        deadline = absl::Now() + absl::Milliseconds(5);
      } else if (!flights_.empty()) {
        // Batches in flight end in a result or a failure, which wakes this loop, and
        // cancellations are handled at every result: the only timed wake-up is the
        // earliest batch's deadline (a 5 ms tick cost a stage computing beside it ~1 ms
        // a token at batch 1).
        auto earliest = Clock::time_point::max();
        for (const auto& [id, f] : flights_) earliest = std::min(earliest, f.deadline);
        deadline = absl::Now() + absl::FromChrono(earliest - Clock::now());
      }
      mu_.AwaitWithDeadline(absl::Condition(this, &Scheduler::HasWork), deadline);
      if (stop_) break;
      std::swap(in, inbox_);
    }
    if (!in.detach.ok()) ApplyDetach(in.detach);
    if (in.attach) ApplyAttach(std::move(*in.attach));
    if (!in.fail_all.ok()) ApplyFailAll(in.fail_all);
    if (in.hand_over) ApplyHandOver(std::move(in.hand_over));
    if (!in.adopted.empty()) ApplyAdopt(std::move(in.adopted));
    for (const StepResult& r : in.results) HandleResult(r);
    ExpireFlights(Clock::now());
    CheckCancellations();
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->second.stream != nullptr) {
        ++it;
        continue;
      }
      if (drafter_) drafter_->Forget(it->first);
      it = running_.erase(it);
    }
    {
      absl::MutexLock lock(&mu_);
      if (attached_) Admit();
      stats_.in_flight_batches = static_cast<int64_t>(flights_.size());
      NotePrefixBlocks();
    }
    LogThroughput(Clock::now());
    if (!pipeline_) continue;
    if (link_down_since_ && Clock::now() < retry_at_) continue;
    bool sent = false;
    while (static_cast<int>(flights_.size()) < pipeline_->num_stages && SendBatch()) sent = true;
    if (!sent && (!release_.empty() || !evict_.empty())) SendReleases();
  }
  // Shutting down: whoever still waits learns why (a failure posted just before the stop
  // says it best).
  absl::Status why = absl::UnavailableError("the server is shutting down");
  {
    absl::MutexLock lock(&mu_);
    if (!inbox_.fail_all.ok()) why = inbox_.fail_all;
  }
  for (auto& [id, s] : running_) {
    if (s.stream) Finish(s, FinishReason::kCancelled, why);
  }
  if (pipeline_ && pipeline_->first_stage) pipeline_->first_stage->Close();
  absl::MutexLock lock(&mu_);
  EndWaiting(why);
  running_count_ = 0;
}

void Scheduler::ApplyAttach(PipelineSpec p) {
  if (pipeline_) ApplyDetach(absl::UnavailableError("the pipeline was replaced"));
  uint64_t resumed = 0;  // sequences carried over from an earlier pipeline
  for (auto& [id, s] : running_) resumed += s.stream != nullptr ? 1 : 0;
  {
    absl::MutexLock lock(&mu_);
    kv_blocks_ = p.kv_blocks;
    kv_block_size_ = p.kv_block_size;
    attached_ = true;
    link_ = p.first_stage;
    stats_.resumed += resumed;
    // The new pipeline's cache may differ: reserve again, youngest sequences first to go
    // when it is smaller than what runs. Its stages cache nothing yet.
    ResetPrefixCache(config_.prefix_cache ? p.kv_block_size : 0);
    evict_.clear();
    computing_.clear();
    blocks_reserved_ = 0;
    for (auto& [id, s] : running_) {
      if (s.stream == nullptr) continue;
      s.Rewind();
      s.blocks = BlocksFor(s.seq->prompt_len(), s.seq->max_tokens());
      blocks_reserved_ += s.blocks;
    }
  }
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    int64_t reserved, total;
    {
      absl::MutexLock lock(&mu_);
      reserved = blocks_reserved_;
      total = kv_blocks_;
    }
    if (reserved <= total) break;
    if (it->second.stream != nullptr) {
      Finish(it->second, FinishReason::kCancelled,
             absl::UnavailableError("the cluster's KV cache shrank below what was running"));
    }
  }
  pipeline_ = std::move(p);
  link_down_since_.reset();
  if (resumed > 0) {
    spdlog::info("scheduler: {} sequence(s) resume on plan {}", resumed, pipeline_->plan_id);
  }
}

void Scheduler::ApplyDetach(const absl::Status& why) {
  if (pipeline_ && pipeline_->first_stage) pipeline_->first_stage->Abort();
  pipeline_.reset();
  link_down_since_.reset();
  flights_.clear();
  release_.clear();      // the stages that held them are gone
  ResetPrefixCache(0);  // and their caches with them
  for (auto& [id, s] : running_) s.Rewind();  // prefilled again on the next pipeline
  spdlog::warn("scheduler: pipeline detached ({}); {} sequence(s) wait for the next one",
               why.message(), running_.size());
}

void Scheduler::ApplyFailAll(const absl::Status& why) {
  for (auto& [id, s] : running_) {
    if (s.stream) Finish(s, FinishReason::kCancelled, why);
  }
  flights_.clear();
  absl::MutexLock lock(&mu_);
  EndWaiting(why);
}

void Scheduler::CheckCancellations() {
  for (auto& [id, s] : running_) {
    if (s.stream != nullptr && !s.in_flight && s.stream->cancelled()) {
      Finish(s, FinishReason::kCancelled, absl::CancelledError("request cancelled"));
    }
  }
}

void Scheduler::ExpireFlights(Clock::time_point now) {
  for (auto it = flights_.begin(); it != flights_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    spdlog::warn("scheduler: batch {} got no result within {} ms; sending its sequences again",
                 it->first, timeouts_.batch.count());
    for (const auto& [seq, processed] : it->second.seqs) {
      auto sit = running_.find(seq);
      if (sit != running_.end()) sit->second.in_flight = false;  // processed stays: resend
    }
    it = flights_.erase(it);
    absl::MutexLock lock(&mu_);
    ++stats_.lost_batches;
  }
}

void Scheduler::FailFlight(uint64_t batch_id, const absl::Status& status) {
  auto fit = flights_.find(batch_id);
  if (fit == flights_.end()) {
    spdlog::warn("scheduler: failure of unknown batch {} ignored: {}", batch_id, status.message());
    return;
  }
  Flight flight = std::move(fit->second);
  flights_.erase(fit);
  if (flight.attaches) {
    spdlog::warn("scheduler: batch {} failed ({}); its sequences go again, without a cached prefix",
                 batch_id, status.message());
  }
  for (const auto& [id, processed] : flight.seqs) {
    auto sit = running_.find(id);
    if (sit == running_.end() || sit->second.stream == nullptr) continue;
    Running& s = sit->second;
    s.in_flight = false;
    if (flight.attaches && !s.resent) {  // from s.processed, as after a lost batch
      s.resent = true;
      if (!s.announced && (!s.prefix.empty() || s.partial.rows > 0)) DropPrefix(id, s);
      continue;
    }
    Finish(s, FinishReason::kCancelled, status);
  }
}

void Scheduler::DropPrefix(SeqId id, Running& s) {
  release_.push_back(id);  // stages that attached it let go before it is sent again
  prefix_->Release(s.uses);
  // A stage may lack any block it attached, the partial one too.
  auto forget_unused = [&](const BlockName& name) {
    if (prefix_->RefCount(name) > 0) return;  // others use it: the stages hold it
    prefix_->Forget(name);
    evict_.push_back(name);
  };
  for (const BlockName& name : s.prefix) forget_unused(name);
  if (s.partial.rows > 0) forget_unused(s.partial.name);
  const int64_t grown = static_cast<int64_t>(s.prefix.size());
  s.blocks += grown;
  s.prefix.clear();
  s.partial = {};
  s.cached_tokens = 0;
  s.uses.clear();
  s.names.clear();
  s.processed = 0;
  absl::MutexLock lock(&mu_);
  blocks_reserved_ += grown;
}

void Scheduler::PublishFilled(SeqId id, Running& s, int32_t end, StageFrame& frame,
                              Flight& flight) {
  const int bs = prefix_->block_size();
  const std::vector<int32_t>& tokens = s.seq->tokens();
  // From the block it stopped offering at (after a rewind, where it is now): a step that
  // accepted drafts filled blocks before s.processed that are offered now.
  const int32_t first = std::max(static_cast<int32_t>(s.prefix.size()),
                                 std::min(s.publish_from, s.processed) / bs);
  s.publish_from = end;
  if (static_cast<int32_t>(s.names.size()) < end / bs) {  // blocks past the prompt's
    const size_t at = s.names.size();
    const std::vector<BlockName> more = PrefixCache::ChainNames(
        std::span(tokens).subspan(at * bs), bs, end / bs - static_cast<int64_t>(at),
        at == 0 ? BlockName{} : s.names.back());
    s.names.insert(s.names.end(), more.begin(), more.end());
  }
  for (int32_t b = first; b < end / bs; ++b) {
    const BlockPublish p{id, b, s.names[b]};
    frame.publish.push_back(p);
    flight.publish.push_back(p);
  }
}

void Scheduler::ResetPrefixCache(int block_size) {
  prefix_.reset();
  view_.Reset(0);
  if (block_size > 0) prefix_ = std::make_unique<PrefixCache>(block_size, &view_);
}

void Scheduler::NotePrefixBlocks() {
  stats_.prefix_blocks_cached = prefix_ ? prefix_->blocks() : 0;
  stats_.prefix_blocks_in_use = prefix_ ? prefix_->referenced_blocks() : 0;
}

void Scheduler::ApplyPublished(const Flight& flight) {
  if (!prefix_ || flight.publish.empty()) return;
  const int bs = prefix_->block_size();
  int64_t moved = 0;  // blocks that leave their sequence's reservation for the cache
  for (const BlockPublish& p : flight.publish) {
    auto sit = running_.find(p.seq);
    if (sit == running_.end()) continue;  // gone: the stages' copy is theirs to reclaim
    Running& s = sit->second;
    const bool live = s.stream != nullptr;
    const BlockName parent = p.block == 0 ? BlockName{} : s.names[p.block - 1];
    const auto tokens = std::span(s.seq->tokens()).subspan(static_cast<size_t>(p.block) * bs, bs);
    DoneComputing(s, &p.name);
    if (!prefix_->Insert(p.name, parent, tokens, live) || !live) continue;
    s.uses.push_back(p.name);
    --s.blocks;
    ++moved;
  }
  absl::MutexLock lock(&mu_);
  blocks_reserved_ -= moved;
}

void Scheduler::HandleResult(const StepResult& r) {
  if (!pipeline_ || r.plan_id != pipeline_->plan_id) {
    spdlog::debug("scheduler: result of plan {} ignored", r.plan_id);
    return;
  }
  if (!r.error.empty()) {
    FailFlight(r.batch_id, absl::InternalError(absl::StrCat("pipeline step failed: ", r.error)));
    return;
  }
  auto fit = flights_.find(r.batch_id);
  if (fit == flights_.end()) {
    spdlog::warn("scheduler: result for unknown batch {} ignored", r.batch_id);
    return;
  }
  Flight flight = std::move(fit->second);
  flights_.erase(fit);
  ApplyPublished(flight);
  // Each sequence's samples, in slot (position) order: its slots are contiguous, so are
  // they (a later run of a sequence already seen is not one the scheduler sent: ignored).
  std::map<SeqId, std::span<const SampledToken>> sampled;
  for (size_t i = 0; i < r.tokens.size();) {
    size_t end = i + 1;
    while (end < r.tokens.size() && r.tokens[end].seq == r.tokens[i].seq) ++end;
    sampled.try_emplace(r.tokens[i].seq, std::span(r.tokens).subspan(i, end - i));
    i = end;
  }
  ServingMetrics::Step times;
  uint64_t drafted = 0, accepted = 0;
  for (const auto& [id, processed] : flight.seqs) {
    auto sit = running_.find(id);
    if (sit == running_.end() || sit->second.stream == nullptr) continue;
    Running& s = sit->second;
    s.in_flight = false;
    s.announced = true;
    s.processed = processed;
    if (s.stream->cancelled()) {
      Finish(s, FinishReason::kCancelled, absl::CancelledError("request cancelled"));
      continue;
    }
    auto t = sampled.find(id);
    if (t == sampled.end()) continue;  // a prefill chunk that samples nothing yet
    auto d = flight.drafts.find(id);
    const std::vector<int32_t>* drafts = d == flight.drafts.end() ? nullptr : &d->second;
    const int took = AcceptSampled(s, t->second, drafts, times);
    if (drafts != nullptr) {
      drafted += drafts->size();
      accepted += static_cast<uint64_t>(took);
      s.spec_drafted += drafts->size();
      s.spec_accepted += static_cast<uint64_t>(took);
      // Longer drafts while they all pass, shorter when none does; off for a sequence
      // whose drafts (16 or more so far) pass less than one time in five: a rejected draft
      // costs a position's compute, which a compute-bound stage feels.
      if (took == static_cast<int>(drafts->size())) {
        s.spec_k = std::min(s.spec_k + 1, config_.spec_tokens);
      } else if (took == 0) {
        s.spec_k = std::max(1, s.spec_k / 2);
      }
      if (s.spec_drafted >= 16 && s.spec_accepted * 5 < s.spec_drafted) s.spec_k = 0;
    }
  }
  metrics_.RecordStep(times);
  absl::MutexLock lock(&mu_);
  stats_.generated_tokens += times.generated;
  stats_.spec_draft_tokens += drafted;
  stats_.spec_accepted_tokens += accepted;
}

int Scheduler::AcceptSampled(Running& s, std::span<const SampledToken> sampled,
                             const std::vector<int32_t>* drafts, ServingMetrics::Step& times) {
  int accepted = 0;
  for (size_t i = 0; i < sampled.size(); ++i) {
    const SampledToken& t = sampled[i];
    if (i > 0) {
      // The sample at a drafted position counts only when that draft was the token the
      // sequence really had there (the sample before it): then its KV entry stays too.
      if (drafts == nullptr || i > drafts->size() || (*drafts)[i - 1] != sampled[i - 1].token ||
          t.position != s.processed + 1) {  // not the sample after the kept ones: ignored
        break;
      }
      ++accepted;
      ++s.processed;
    }
    const Clock::time_point now = Clock::now();
    if (!s.got_first) {
      s.got_first = true;
      s.first_token = now;
      times.first_token_s.push_back(std::chrono::duration<double>(now - s.submitted).count());
    } else {
      times.inter_token_s.push_back(std::chrono::duration<double>(now - s.last_token).count());
    }
    s.last_token = now;
    const Sequence::Step step = s.seq->Accept(t.token);
    // A resumed stream's first tokens: generated again, the client has them already.
    if (step.appended && s.seq->generated() > s.seq->request().resume_after) {
      StreamEvent e;
      e.text = step.text;
      e.ids.push_back(t.token);
      if (s.seq->request().logprobs) {
        e.logprobs.push_back(t.logprob);
        if (s.seq->request().top_logprobs > 0) e.top_logprobs.push_back(t.top);
      }
      s.stream->Push(std::move(e));
      ++times.generated;
    }
    if (step.finished) {
      Finish(s, step.reason, absl::OkStatus());
      break;
    }
  }
  return accepted;
}

namespace {

// One line per finished request, at info (what vLLM users look for in the server's log).
void LogFinished(SeqId id, const StreamUsage& u, FinishReason reason, const absl::Status& status) {
  const double decode_s = u.total_time_s - u.time_to_first_token_s;
  const double decode_tps =
      u.completion_tokens > 1 && decode_s > 0 ? (u.completion_tokens - 1) / decode_s : 0.0;
  spdlog::info(
      "request {} finished: {} prompt + {} output tokens, TTFT {:.3f} s, {:.1f} tokens/s, "
      "{:.3f} s in all, finish {}{}{}",
      id, u.prompt_tokens, u.completion_tokens, u.time_to_first_token_s, decode_tps,
      u.total_time_s, status.ok() ? FinishReasonName(reason) : "error",
      status.ok() ? "" : ": ", status.ok() ? "" : status.message());
}

}  // namespace

void Scheduler::LogThroughput(Clock::time_point now) {
  if (now - throughput_log_.at < kThroughputLogInterval) return;
  const SchedulerStats st = Stats();
  const double seconds = std::chrono::duration<double>(now - throughput_log_.at).count();
  const uint64_t prompt = st.prompt_tokens - throughput_log_.prompt_tokens;
  const uint64_t generated = st.generated_tokens - throughput_log_.generated_tokens;
  if (prompt > 0 || generated > 0 || st.running > 0 || st.waiting > 0) {
    spdlog::info(
        "throughput: prompt {:.1f} tokens/s, generation {:.1f} tokens/s; {} running, {} "
        "waiting; KV cache {:.1f}% used",
        prompt / seconds, generated / seconds, st.running, st.waiting,
        100 * KvUsageRatio(st.kv_blocks_reserved, st.kv_blocks_total));
  }
  throughput_log_ = {now, st.prompt_tokens, st.generated_tokens};
}

void Scheduler::Finish(Running& s, FinishReason reason, const absl::Status& status) {
  if (s.stream == nullptr) return;
  StreamEvent e;
  e.last = true;
  e.finish = reason;
  e.status = status;
  if (status.ok() && reason != FinishReason::kStop && reason != FinishReason::kCancelled) {
    e.text = s.seq->Flush();
  }
  const auto now = Clock::now();
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  e.usage.prompt_tokens = s.seq->prompt_len();
  e.usage.completion_tokens = s.seq->generated();
  e.usage.cached_tokens = s.cached_tokens;
  e.usage.seed = s.seq->request().sampling.seed;
  e.usage.total_time_s = seconds(now - s.submitted);
  e.usage.queue_time_s = seconds(s.admitted - s.submitted);
  e.usage.time_to_first_token_s = s.got_first ? seconds(s.first_token - s.submitted) : 0.0;
  if (s.processed > 0 || s.in_flight) release_.push_back(s.id);
  if (prefix_) prefix_->Release(s.uses);
  s.uses.clear();
  DoneComputing(s, nullptr);
  LogFinished(s.id, e.usage, reason, status);
  {
    // Accounted before the client hears of it: whoever reads the last event sees the
    // scheduler's books already closed for it.
    absl::MutexLock lock(&mu_);
    blocks_reserved_ -= s.blocks;
    --running_count_;
    NotePrefixBlocks();
    if (status.ok() || reason == FinishReason::kCancelled) {
      ++stats_.completed;
    } else {
      ++stats_.failed;
    }
  }
  const bool cancelled = status.ok() ? reason == FinishReason::kCancelled
                                     : status.code() == absl::StatusCode::kCancelled;
  metrics_.RecordEnded(cancelled     ? RequestOutcome::kCancelled
                       : status.ok() ? RequestOutcome::kCompleted
                                     : RequestOutcome::kFailed,
                       e.usage.total_time_s);
  s.stream->Push(std::move(e));
  s.stream = nullptr;  // erased by the loop
}

namespace {

SequenceSampling SamplingOf(SeqId id, const SequenceRequest& req) {
  SequenceSampling s;
  s.seq = id;
  s.params = req.sampling;
  s.logprobs = req.logprobs;
  s.top_logprobs = req.top_logprobs;
  return s;
}

}  // namespace

std::vector<int32_t> Scheduler::Draft(const Running& s, int64_t active, int64_t budget) {
  if (s.spec_k <= 0 || active > kSpecMaxRunning || s.seq->generated() == 0) return {};
  // The drafts' positions stay within what admission reserved (prompt + max_tokens) and
  // the context; the last sample may complete the sequence.
  const int64_t room = std::min<int64_t>(
      int64_t{s.seq->max_tokens()} - s.seq->generated() - 1,
      context_length_ - static_cast<int64_t>(s.seq->tokens().size()));
  const int64_t k = std::min<int64_t>({s.spec_k, room, budget});
  if (k <= 0) return {};
  std::vector<int32_t> drafts = drafter_->Draft(s.id, s.seq->tokens(), static_cast<int>(k));
  // A drafter's ids are proposals: one the model could not take (outside its vocabulary)
  // would fail the whole batch, so the draft ends before it.
  const auto bad = std::find_if(drafts.begin(), drafts.end(),
                                [&](int32_t id) { return id < 0 || id >= vocab_size_; });
  drafts.erase(bad, drafts.end());
  return drafts;
}

bool Scheduler::SendBatch() {
  std::vector<std::pair<SeqId, Running*>> ready;
  int64_t active = 0;
  for (auto& [id, s] : running_) {
    if (s.stream == nullptr) continue;
    ++active;
    if (!s.in_flight && s.processed < static_cast<int32_t>(s.seq->tokens().size())) {
      ready.emplace_back(id, &s);
    }
  }
  if (ready.empty()) return false;
  const PipelineSpec& p = *pipeline_;
  // Spread the running sequences over S micro-batches so every stage has work.
  const int64_t per_batch = std::max<int64_t>(1, (active + p.num_stages - 1) / p.num_stages);
  StageFrame frame;
  frame.plan_id = p.plan_id;
  frame.batch_id = next_batch_++;
  frame.stage = 0;
  Flight flight;
  flight.deadline = Clock::now() + timeouts_.batch;
  int64_t budget = p.max_batch_tokens;
  const size_t start = rr_cursor_ % ready.size();
  for (size_t k = 0; k < ready.size() && static_cast<int64_t>(flight.seqs.size()) < per_batch;
       ++k) {
    const auto& [id, sp] = ready[(start + k) % ready.size()];
    Running& s = *sp;
    const std::vector<int32_t>& tokens = s.seq->tokens();
    const int32_t pending = static_cast<int32_t>(tokens.size()) - s.processed;
    const int32_t chunk =
        static_cast<int32_t>(std::min<int64_t>({pending, config_.prefill_chunk, budget}));
    if (chunk <= 0) break;
    const int32_t end = s.processed + chunk;
    const bool samples = end == static_cast<int32_t>(tokens.size());
    // A sequence's first frame to this pipeline (new, or prefilled again on a new plan)
    // carries its sampling, which the last stage keeps until the sequence is released,
    // and the cached blocks it starts from; sent again until a result confirms them.
    if (!s.announced) {
      frame.admit.push_back(SamplingOf(id, s.seq->request()));
      if (!s.prefix.empty() || s.partial.rows > 0) {
        frame.attach.push_back({id, s.prefix, s.partial.name, s.partial.rows});
        flight.attaches = true;
      }
    }
    for (int32_t pos = s.processed; pos < end; ++pos) {
      frame.slots.push_back({tokens[pos], id, pos, samples && pos + 1 == end});
    }
    if (prefix_) PublishFilled(id, s, end, frame, flight);  // confirmed tokens only
    budget -= chunk;
    if (samples) {  // drafted tokens after it, each sampled too
      std::vector<int32_t> drafts = Draft(s, active, budget);
      for (size_t i = 0; i < drafts.size(); ++i) {
        frame.slots.push_back({drafts[i], id, end + static_cast<int32_t>(i), true});
      }
      budget -= static_cast<int64_t>(drafts.size());
      if (!drafts.empty()) flight.drafts.emplace(id, std::move(drafts));
    }
    s.in_flight = true;
    flight.seqs.emplace_back(id, end);
  }
  rr_cursor_ = start + flight.seqs.size();
  if (flight.seqs.empty()) return false;
  frame.release.swap(release_);
  frame.evict.swap(evict_);
  const uint64_t batch_id = frame.batch_id;
  flights_.emplace(batch_id, std::move(flight));
  {
    absl::MutexLock lock(&mu_);
    ++stats_.batches;
    stats_.in_flight_batches = static_cast<int64_t>(flights_.size());
  }
  frame.sent_unix_ns = UnixNanos();
  if (absl::Status st = p.first_stage->Send(std::move(frame)); !st.ok()) {
    OnSendFailed(batch_id, st);
    return false;
  }
  link_down_since_.reset();
  return true;
}

void Scheduler::OnSendFailed(uint64_t batch_id, const absl::Status& st) {
  const auto now = Clock::now();
  if (!link_down_since_) link_down_since_ = now;
  retry_at_ = now + timeouts_.link_retry;
  // The batch went nowhere: its sequences are as they were, and wait to be sent again.
  if (auto fit = flights_.find(batch_id); fit != flights_.end()) {
    for (const auto& [id, processed] : fit->second.seqs) {
      if (auto sit = running_.find(id); sit != running_.end()) sit->second.in_flight = false;
    }
    flights_.erase(fit);
  }
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
  }
  if (on_link_error_) on_link_error_(st);
  if (now - *link_down_since_ < timeouts_.link_grace) {
    spdlog::warn("scheduler: cannot send batch {} to the first stage ({}); trying again",
                 batch_id, st.message());
    return;
  }
  const absl::Status why =
      absl::UnavailableError(absl::StrCat("cannot reach the first stage: ", st.message()));
  spdlog::error("scheduler: {} for {} ms; failing the requests", why.message(),
                timeouts_.link_grace.count());
  ApplyFailAll(why);
  link_down_since_.reset();
}

void Scheduler::SendReleases() {
  StageFrame frame;
  frame.plan_id = pipeline_->plan_id;
  frame.batch_id = next_batch_++;
  frame.stage = 0;
  frame.release.swap(release_);
  frame.evict.swap(evict_);
  if (absl::Status st = pipeline_->first_stage->Send(std::move(frame)); !st.ok()) {
    absl::MutexLock lock(&mu_);
    if (!stop_) spdlog::warn("scheduler: cannot send releases to the first stage: {}", st.message());
  }
}

}  // namespace cascade
