#include "parallel/mpi_util.h"

#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include "absl/strings/str_cat.h"

namespace cascade {

absl::Status MpiError(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return absl::UnavailableError(absl::StrCat(what, ": MPI error ", code, ": ", std::string(text, len)));
}

void MpiBackoff(std::chrono::steady_clock::duration waited, const MpiPollSchedule& s) {
  // Sleeps this short need a small timer slack (the default, 50 us, would double them);
  // it is a property of the calling thread.
  thread_local bool slack_set = [] {
    prctl(PR_SET_TIMERSLACK, 5000UL, 0, 0, 0);
    return true;
  }();
  (void)slack_set;
  const std::chrono::microseconds step = waited < s.hot_for      ? s.hot
                                         : waited < s.idle_after ? s.warm
                                                                 : s.idle;
  timespec ts{0, static_cast<long>(std::chrono::nanoseconds(step).count())};
  nanosleep(&ts, nullptr);
}

absl::Status MpiWait(MPI_Request* request, const std::string& what, const std::atomic<bool>* stop,
                     std::chrono::microseconds spin, MPI_Status* status) {
  const auto start = std::chrono::steady_clock::now();
  MPI_Status local;
  MPI_Status* st = status != nullptr ? status : &local;
  for (int i = 0;; ++i) {
    int done = 0;
    if (int rc = MPI_Test(request, &done, st); rc != MPI_SUCCESS) return MpiError(rc, what);
    if (done) return absl::OkStatus();
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
      return absl::CancelledError(absl::StrCat(what, ": stopped while waiting"));
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited < spin) {
      if (i % 64 == 63) sched_yield();  // let a rank sharing this core run
      continue;
    }
    MpiBackoff(waited);
  }
}

void MpiDiscard(MPI_Message* msg, int count) {
  static const MPI_Datatype sink = [] {
    MPI_Datatype t;
    MPI_Type_create_resized(MPI_BYTE, 0, 0, &t);
    MPI_Type_commit(&t);
    return t;
  }();
  char none = 0;
  MPI_Mrecv(&none, count < 0 ? 0 : count, sink, msg, MPI_STATUS_IGNORE);
}

void MpiSendQueue::Add(MPI_Request request, std::shared_ptr<const std::string> bytes) {
  absl::MutexLock lock(&mu_);
  sends_.push_back({request, std::move(bytes)});
}

void MpiSendQueue::Reap() {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < sends_.size();) {
    int done = 0;
    MPI_Test(&sends_[i].request, &done, MPI_STATUS_IGNORE);
    if (done) {
      sends_[i] = std::move(sends_.back());
      sends_.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace cascade
