// MpiCollective: a tensor-parallel group of CPU processes over MPI (one rank per process),
// the group being an MPI communicator (the ranks of one stage on one node, see
// launch/topology.h).
//
// Contract: as parallel/collective.h, host memory. The collective works on its own
// duplicate of the communicator (errors returned, not fatal), so its messages never mix
// with other traffic. Operations are non-blocking MPI collectives (MPI_Iallgather,
// MPI_Ibcast) waited on with MpiWait: spinning briefly, then sleeping, so a follower
// waiting for the next step does not hold a core. AllReduceSum is MPI_Iallgather plus the
// fixed-order sum, never MPI_Allreduce. Abort() makes a waiting operation and every later
// one fail (the group cannot be used again). Needs MPI_THREAD_MULTIPLE when other threads
// of the process use MPI.
#ifndef CASCADE_PARALLEL_MPI_COLLECTIVE_H_
#define CASCADE_PARALLEL_MPI_COLLECTIVE_H_

#include <mpi.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/collective.h"

namespace cascade {

class MpiCollective : public Collective {
 public:
  // `comm` is duplicated; the caller keeps its own. `name` is used in messages.
  static absl::StatusOr<std::unique_ptr<MpiCollective>> Create(MPI_Comm comm, std::string name);
  ~MpiCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }
  std::string name() const override { return name_; }
  absl::Status AllGather(const void* send, size_t bytes, void* recv) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status AllReduceSum(float* data, int64_t count) override;
  void Abort(const std::string& reason);
  MPI_Comm comm() const { return comm_; }

 private:
  MpiCollective() = default;
  absl::Status Check() const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::string name_;
  std::string all_gather_what_, broadcast_what_;  // what errors of each call name (made once)
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // written before aborted_ is set
  absl::Status broken_;
  std::vector<float> scratch_;
};

}  // namespace cascade

#endif  // CASCADE_PARALLEL_MPI_COLLECTIVE_H_
