#include "client/resuming_stream.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "absl/strings/str_cat.h"
#include "cascade/v1/inference.grpc.pb.h"
#include "transport/grpc_util.h"

namespace cascade {
namespace {

bool Retryable(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return true;
    default:
      return false;
  }
}

// Cancels a call that makes no progress for `timeout` (on a thread of its own).
class StallWatch {
 public:
  StallWatch(grpc::ClientContext* ctx, std::chrono::milliseconds timeout)
      : ctx_(ctx), timeout_(timeout), thread_([this] { Run(); }) {}
  ~StallWatch() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    thread_.join();
  }
  void Progress() {
    absl::MutexLock lock(&mu_);
    last_ = std::chrono::steady_clock::now();
  }
  bool fired() const { return fired_.load(); }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    for (;;) {
      const auto remaining = last_ + timeout_ - std::chrono::steady_clock::now();
      if (remaining <= std::chrono::steady_clock::duration::zero()) {
        fired_.store(true);
        ctx_->TryCancel();
        return;
      }
      if (mu_.AwaitWithTimeout(absl::Condition(&done_), absl::FromChrono(remaining))) return;
    }
  }
  grpc::ClientContext* const ctx_;
  const std::chrono::milliseconds timeout_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_ ABSL_GUARDED_BY(mu_) =
      std::chrono::steady_clock::now();
  std::atomic<bool> fired_{false};
  std::thread thread_;  // last: starts once the rest is made
};

}  // namespace

absl::Status GenerateResuming(const std::vector<std::string>& servers, v1::GenerateRequest request,
                              const std::function<bool(const v1::GenerateResponse&)>& on_message,
                              const ResumeOptions& options, ResumeStats* stats) {
  using Clock = std::chrono::steady_clock;
  if (servers.empty()) return absl::InvalidArgumentError("no server given");
  ResumeStats local;
  ResumeStats& st = stats != nullptr ? *stats : local;
  std::vector<std::unique_ptr<v1::Inference::Stub>> stubs;
  for (const std::string& s : servers) stubs.push_back(v1::Inference::NewStub(MakeChannel(s)));
  const int32_t already = request.resume_after_tokens();
  int32_t received = 0;  // token ids received, across resumes
  size_t current = 0;
  std::chrono::milliseconds backoff{50};
  Clock::time_point last_message = Clock::now();
  bool broke = false;  // a stream broke after messages: the next message ends a resume
  for (;;) {
    grpc::ClientContext ctx;
    if (!options.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + options.api_key);
    request.set_resume_after_tokens(already + received);
    ++st.attempts;
    auto reader = stubs[current]->Generate(&ctx, request);
    StallWatch watch(&ctx, options.stall_timeout);
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
      watch.Progress();
      const Clock::time_point now = Clock::now();
      if (broke) {
        st.longest_resume_s = std::max(
            st.longest_resume_s, std::chrono::duration<double>(now - last_message).count());
        broke = false;
      }
      last_message = now;
      backoff = std::chrono::milliseconds(50);
      // The first run's seed: what a resumed request must sample with.
      if (!request.sampling().has_seed() && !r.request_id().empty()) {
        request.mutable_sampling()->set_seed(r.seed());
        request.mutable_sampling()->set_has_seed(true);
      }
      received += r.token_ids_size();
      if (!on_message(r)) {
        ctx.TryCancel();
        reader->Finish();
        return absl::CancelledError("cancelled by the caller");
      }
    }
    const grpc::Status done = reader->Finish();
    if (done.ok()) return absl::OkStatus();
    st.last_error = absl::StrCat(servers[current], ": ",
                                 watch.fired() ? "the stream stalled" : done.error_message());
    if (!Retryable(done.error_code()) || Clock::now() - last_message > options.give_up_after) {
      return absl::Status(static_cast<absl::StatusCode>(done.error_code()), st.last_error);
    }
    // A coordinator that refused before streaming anything (a standby) is passed by at
    // once; a stream that broke is resumed on the next coordinator after a pause.
    if (!broke && received > 0) {
      broke = true;
      ++st.resumes;
    }
    current = (current + 1) % stubs.size();
    if (current == 0 || broke) {
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }
}

}  // namespace cascade
