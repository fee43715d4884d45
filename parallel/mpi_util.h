// Small MPI helpers shared by the MPI collective (parallel/mpi_collective.h) and the MPI
// data plane (transport/mpi_link.h).
//
// Contract:
// - MpiWait waits for a request without holding a core: it tests it in a loop for
//   `spin` (a step of a running model is usually answered that fast), then sleeps
//   between tests, longer the longer the wait (50 us for the first 50 ms, then 200 us,
//   and 2 ms once idle for a second), so an idle rank costs almost no CPU. It returns the
//   request's error, or Cancelled when *stop becomes true (the request is then left to
//   MPI: the caller must keep its buffer alive or be exiting).
// - MpiError turns an MPI error code into a Status naming `what`.
// - Thread-safe when MPI was initialized with MPI_THREAD_MULTIPLE.
#ifndef CASCADE_PARALLEL_MPI_UTIL_H_
#define CASCADE_PARALLEL_MPI_UTIL_H_

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace cascade {

absl::Status MpiError(int code, const std::string& what);

absl::Status MpiWait(MPI_Request* request, const std::string& what,
                     const std::atomic<bool>* stop = nullptr,
                     std::chrono::microseconds spin = std::chrono::microseconds(200),
                     MPI_Status* status = nullptr);

// How long a poller sleeps between tests, by how long it has waited: `hot` until
// `hot_for`, then `warm` until `idle_after`, then `idle`. Each wake-up costs CPU (on a
// virtual machine a timer wake-up is ~10 us), each sleep adds latency.
struct MpiPollSchedule {
  std::chrono::microseconds hot{50};
  std::chrono::microseconds hot_for{50'000};
  std::chrono::microseconds warm{200};
  std::chrono::microseconds idle_after{1'000'000};
  std::chrono::microseconds idle{2'000};
};

// Sleeps for the back-off step of a wait that began `waited` ago (see MpiWait).
void MpiBackoff(std::chrono::steady_clock::duration waited, const MpiPollSchedule& s = {});

// Receives the probed message `msg` of `count` bytes (negative: more than 2^31) into
// nothing and drops it: for a message whose claimed size must not size a buffer. (Through
// a datatype of extent 0: Open MPI crashes on a truncated receive of a large message.)
void MpiDiscard(MPI_Message* msg, int count);

// Non-blocking sends nobody waits for (notices, acks, sends given up): each buffer lives
// until MPI is done with it. Thread-safe.
class MpiSendQueue {
 public:
  void Add(MPI_Request request, std::shared_ptr<const std::string> bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the sends MPI has finished.
  void Reap() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Send {
    MPI_Request request;
    std::shared_ptr<const std::string> bytes;
  };
  absl::Mutex mu_;
  std::vector<Send> sends_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade

#endif  // CASCADE_PARALLEL_MPI_UTIL_H_
