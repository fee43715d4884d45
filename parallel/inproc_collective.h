// InProcessGroup: a tensor-parallel group whose ranks are threads of one process (tests,
// and a CPU node served by one process). Rank r's Collective is rank(r); each rank's
// thread calls only its own.
//
// Contract: as parallel/collective.h. Data goes through buffers the group owns: a rank
// copies its part in, waits until every rank has (a condition variable, no spinning), and
// copies out; consecutive operations use two alternating slots so that a fast rank never
// overwrites a part a slow one has not read. Abort(reason) fails every waiting and later
// operation of every rank with Unavailable(reason). Host memory only. The group must
// outlive the ranks' use of it.
#ifndef CASCADE_PARALLEL_INPROC_COLLECTIVE_H_
#define CASCADE_PARALLEL_INPROC_COLLECTIVE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "parallel/collective.h"

namespace cascade {

class InProcessGroup {
 public:
  explicit InProcessGroup(int size);
  ~InProcessGroup();
  int size() const { return size_; }
  Collective& rank(int r);
  void Abort(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Rank;
  friend class Rank;
  // One round: every rank puts `bytes` (root only, for a broadcast: from == root) and
  // reads back what `read` selects. `epoch` is the caller's own operation counter.
  absl::Status Round(int rank, uint64_t epoch, const void* send, size_t bytes, int from,
                     void* recv) ABSL_LOCKS_EXCLUDED(mu_);

  struct Slot {
    uint64_t epoch = 0;  // the operation this slot serves now
    int arrived = 0;
    int departed = 0;
    std::vector<std::string> parts;
  };

  const int size_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  absl::Mutex mu_;
  Slot slots_[2] ABSL_GUARDED_BY(mu_);
  std::string aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade

#endif  // CASCADE_PARALLEL_INPROC_COLLECTIVE_H_
