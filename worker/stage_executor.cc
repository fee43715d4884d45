#include "worker/stage_executor.h"

#include <time.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "util/logging.h"
#include "worker/frame_cache_ops.h"

namespace cascade {
namespace {

// CPU time of the calling thread, in seconds.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

StageExecutor::StageExecutor(std::unique_ptr<Stage> stage, uint32_t stage_index, uint64_t plan_id,
                             std::unique_ptr<ActivationReceiver> in,
                             std::unique_ptr<ActivationSender> out,
                             std::shared_ptr<ResultSender> results)
    : stage_(std::move(stage)),
      stage_index_(stage_index),
      plan_id_(plan_id),
      in_(std::move(in)),
      out_(std::move(out)),
      results_(std::move(results)) {}

StageExecutor::~StageExecutor() { Stop(); }

void StageExecutor::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void StageExecutor::Stop(bool graceful) {
  if (in_) in_->Close();
  // Frames already queued still go to a live next stage (or their results to the
  // coordinator), but a send blocked on an unreachable one gives up at once.
  if (out_) out_->StopReconnecting();
  if (results_) results_->StopReconnecting();
  if (thread_.joinable()) thread_.join();
  if (graceful) {
    if (out_) out_->Close();
    if (results_) results_->Close();
  } else {
    if (out_) out_->Abort();
    if (results_) results_->Abort();
  }
}

std::unique_ptr<Stage> StageExecutor::ReleaseStage() {
  Stop(/*graceful=*/false);
  return std::move(stage_);
}

ExecutorStats StageExecutor::Stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

void StageExecutor::Loop() {
  while (std::optional<StageFrame> frame = in_->Receive()) Process(std::move(*frame));
}

void StageExecutor::Fail(const StageFrame& in, const std::string& error) {
  {
    absl::MutexLock lock(&stats_mu_);
    ++stats_.failed_batches;
  }
  spdlog::warn("stage {}: batch {} failed: {}", stage_index_, in.batch_id, error);
  if (stage_->is_last()) {
    StepResult r;
    r.plan_id = plan_id_;
    r.batch_id = in.batch_id;
    r.error = error;
    if (absl::Status st = results_->Send(std::move(r)); !st.ok()) {
      spdlog::warn("stage {}: cannot report to the coordinator: {}", stage_index_, st.message());
    }
    return;
  }
  StageFrame f;
  f.plan_id = plan_id_;
  f.batch_id = in.batch_id;
  f.stage = stage_index_ + 1;
  f.release = in.release;
  f.evict = in.evict;
  f.error = error;
  if (absl::Status st = out_->Send(std::move(f)); !st.ok()) {
    spdlog::warn("stage {}: cannot reach the next stage: {}", stage_index_, st.message());
  }
}

void StageExecutor::Process(StageFrame frame) {
  FrameStats fs;
  fs.t0 = std::chrono::steady_clock::now();
  fs.cpu0 = ThreadCpuSeconds();
  fs.hop = SecondsSince(frame.sent_unix_ns);
  fs.bytes_in = frame.hidden.size() * sizeof(float);
  Handle(std::move(frame), &fs);
  Account(fs);
}

void StageExecutor::Handle(StageFrame frame, FrameStats* fs) {
  if (mirror_ != nullptr) {
    if (absl::Status st = mirror_->Mirror(frame); !st.ok()) {
      Fail(frame, absl::StrCat("stage ", stage_index_, ": ", st.message()));
      return;
    }
  }
  if (!frame.release.empty() || !frame.evict.empty()) {
    ReleaseAndEvict(frame, stage_->kv_cache());
    if (stage_->is_last()) samplers_.Release(frame.release);
    fs->kv_released = true;
  }
  if (!frame.error.empty()) {
    Fail(frame, frame.error);
    return;
  }
  if (frame.slots.empty()) {  // release-only frame: pass the releases on
    if (stage_->is_last()) return;
    frame.stage = stage_index_ + 1;
    if (absl::Status st = out_->Send(std::move(frame)); !st.ok()) {
      spdlog::warn("stage {}: cannot reach the next stage: {}", stage_index_, st.message());
    }
    return;
  }
  if (stage_->is_last()) {
    absl::Status known = samplers_.Admit(frame.admit);
    if (known.ok()) known = samplers_.Observe(frame.slots);
    if (!known.ok()) {
      Fail(frame, absl::StrCat("stage ", stage_index_, ": ", known.message()));
      return;
    }
  }
  absl::Status st = AttachPrefixes(frame, stage_->kv_cache());
  if (st.ok()) st = stage_->Forward(frame.slots, frame.hidden, &buffer_);
  if (st.ok()) st = stage_->backend().Health();
  if (!st.ok()) {
    Fail(frame, absl::StrCat("stage ", stage_index_, ": ", st.message()));
    return;
  }
  PublishBlocks(frame, stage_->kv_cache());
  if (!stage_->is_last()) {
    StageFrame next;
    next.plan_id = plan_id_;
    next.batch_id = frame.batch_id;
    next.stage = stage_index_ + 1;
    next.slots = std::move(frame.slots);
    next.hidden.swap(buffer_);
    next.admit = std::move(frame.admit);
    next.release = std::move(frame.release);
    next.evict = std::move(frame.evict);
    next.attach = std::move(frame.attach);
    next.publish = std::move(frame.publish);
    fs->tokens = next.slots.size();
    fs->bytes_out = next.hidden.size() * sizeof(float);
    next.sent_unix_ns = UnixNanos();
    if (absl::Status s = out_->Send(std::move(next)); !s.ok()) {
      spdlog::warn("stage {}: cannot reach the next stage: {}", stage_index_, s.message());
    }
    fs->computed = true;
    return;
  }
  // Last stage: sample each sequence that wants a token, in slot order.
  StepResult result;
  result.plan_id = plan_id_;
  result.batch_id = frame.batch_id;
  const int64_t vocab = stage_->config().vocab_size;
  int64_t row = 0;
  for (const TokenSlot& slot : frame.slots) {
    if (!slot.want_logits) continue;
    std::span<const float> logits(buffer_.data() + row * vocab, vocab);
    ++row;
    result.tokens.push_back(samplers_.Sample(slot, logits));
  }
  result.sent_unix_ns = UnixNanos();
  if (absl::Status s = results_->Send(std::move(result)); !s.ok()) {
    spdlog::warn("stage {}: cannot report to the coordinator: {}", stage_index_, s.message());
  }
  fs->tokens = frame.slots.size();
  fs->computed = true;
}

void StageExecutor::Account(const FrameStats& fs) {
  double busy = 0, cpu = 0;
  if (fs.computed) {
    busy = std::chrono::duration<double>(std::chrono::steady_clock::now() - fs.t0).count();
    cpu = ThreadCpuSeconds() - fs.cpu0;
  }
  const int64_t kv_total = stage_->kv_cache().num_blocks();
  const int64_t kv_used = kv_total - stage_->kv_cache().free_blocks();
  absl::MutexLock lock(&stats_mu_);
  if (fs.hop) stats_.hop_in_seconds.Observe(*fs.hop);
  stats_.activation_bytes_in += fs.bytes_in;
  stats_.activation_bytes_out += fs.bytes_out;
  if (fs.kv_released || fs.computed) {  // the cache's use changed
    stats_.kv_blocks_used = kv_used;
    stats_.kv_blocks_total = kv_total;
  }
  if (fs.computed) {
    ++stats_.frames;
    stats_.tokens += fs.tokens;
    stats_.busy_seconds += busy;
    stats_.cpu_seconds += cpu;
  }
}

}  // namespace cascade
