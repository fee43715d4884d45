// FakePipeline: a stand-in for a pipeline of stages, for the scheduler's and the cluster
// controller's unit tests (no engine, no network). It takes frames on a thread of its own
// and answers each sequence that wants a token with a token that depends only on the
// sampling seed and the draw index, as a real pipeline's counter-based sampling does, so
// a sequence's text is the same however it is batched, interrupted or resumed.
//
// Test-only. Thread-safe.
#ifndef CASCADE_SERVING_FAKE_PIPELINE_H_
#define CASCADE_SERVING_FAKE_PIPELINE_H_

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "transport/link.h"
#include "util/bounded_queue.h"

namespace cascade::testing {

class FakePipeline {
 public:
  static constexpr int32_t kEos = 2;  // the bundled model's EOS
  // The token a sequence sampled with `seed` gets at `draw_index`. Seeds that are
  // multiples of 1000 draw EOS at draw index 20.
  static int32_t TokenFor(uint64_t seed, uint64_t draw_index) {
    if (seed % 1000 == 0 && seed > 0 && draw_index == 20) return kEos;
    return 3 + static_cast<int32_t>((draw_index * 7 + seed * 13) % 500);
  }

  explicit FakePipeline(std::function<void(StepResult)> on_result)
      : on_result_(std::move(on_result)), frames_(1024) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakePipeline() {
    frames_.Close();
    Resume();
    thread_.join();
  }

  // A link to the first stage, tagging results with `plan_id`.
  std::unique_ptr<ActivationSender> MakeSender(uint64_t plan_id) {
    return std::make_unique<Sender>(this, plan_id);
  }
  void Pause() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    paused_ = true;
  }
  void Resume() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    paused_ = false;
  }
  // Pauses by itself once it has answered `n` more frames that carry tokens (a test that
  // must interrupt a sequence before it can finish, however slowly the test runs).
  void PauseAfter(int n) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    pause_after_ = n;
  }
  // Sends through links of `plan_id` fail (the first stage's process is gone).
  void BreakPlan(uint64_t plan_id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    broken_plan_ = plan_id;
  }
  // The next `n` frames vanish (a lost batch).
  void Lose(int n) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    lose_ = n;
  }
  std::vector<StageFrame> frames() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return seen_;
  }
  std::set<SeqId> released() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return released_;
  }

 private:
  class Sender : public ActivationSender {
   public:
    Sender(FakePipeline* p, uint64_t plan_id) : p_(p), plan_id_(plan_id) {}
    absl::Status Send(StageFrame f) override {
      if (closed_.load()) return absl::UnavailableError("fake link is closed");
      if (p_->Broken(plan_id_)) return absl::UnavailableError("connection refused (fake)");
      f.plan_id = plan_id_;
      if (!p_->frames_.Push(std::move(f))) return absl::UnavailableError("fake pipeline is gone");
      return absl::OkStatus();
    }
    void Close() override { closed_.store(true); }

   private:
    FakePipeline* p_;
    const uint64_t plan_id_;
    std::atomic<bool> closed_{false};
  };

  bool Broken(uint64_t plan_id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return broken_plan_ == plan_id;
  }

  void Loop() {
    while (std::optional<StageFrame> f = frames_.Pop()) {
      {
        absl::MutexLock l(&mu_);
        auto running = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !paused_; };
        mu_.Await(absl::Condition(&running));
        seen_.push_back(*f);
        released_.insert(f->release.begin(), f->release.end());
        if (lose_ > 0) {
          --lose_;
          continue;
        }
      }
      // As the last stage does: sampling arrives once per sequence and plan, and goes
      // with the release.
      for (SeqId seq : f->release) seeds_.erase({f->plan_id, seq});
      for (const SequenceSampling& a : f->admit) seeds_[{f->plan_id, a.seq}] = a.params.seed;
      if (f->slots.empty()) continue;  // releases only
      StepResult r;
      r.plan_id = f->plan_id;
      r.batch_id = f->batch_id;
      for (const TokenSlot& s : f->slots) {
        if (!s.want_logits) continue;
        auto seed = seeds_.find({f->plan_id, s.seq});
        if (seed == seeds_.end()) {
          r.tokens.clear();
          r.error = "sequence " + std::to_string(s.seq) + " was never admitted";
          break;
        }
        const uint64_t draw = static_cast<uint64_t>(s.pos) + 1;
        r.tokens.push_back({s.seq, TokenFor(seed->second, draw), -0.5f, s.pos + 1, {}});
      }
      {
        // Before the result goes out: whoever sees it sees the pipeline paused.
        absl::MutexLock l(&mu_);
        if (pause_after_ > 0 && --pause_after_ == 0) paused_ = true;
      }
      on_result_(std::move(r));
    }
  }

  const std::function<void(StepResult)> on_result_;
  BoundedQueue<StageFrame> frames_;
  mutable absl::Mutex mu_;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  int lose_ ABSL_GUARDED_BY(mu_) = 0;
  int pause_after_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t broken_plan_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<StageFrame> seen_ ABSL_GUARDED_BY(mu_);
  std::set<SeqId> released_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<uint64_t, SeqId>, uint64_t> seeds_;  // (plan, sequence): seed; Loop's
  std::thread thread_;
};

}  // namespace cascade::testing

#endif  // CASCADE_SERVING_FAKE_PIPELINE_H_
