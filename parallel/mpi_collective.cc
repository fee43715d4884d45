#include "parallel/mpi_collective.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "parallel/mpi_util.h"
#include "util/status_macros.h"

namespace cascade {

absl::StatusOr<std::unique_ptr<MpiCollective>> MpiCollective::Create(MPI_Comm comm,
                                                                     std::string name) {
  std::unique_ptr<MpiCollective> c(new MpiCollective());
  CASCADE_RETURN_IF_ERROR(MpiError(MPI_Comm_dup(comm, &c->comm_), "MPI_Comm_dup"));
  MPI_Comm_set_errhandler(c->comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->comm_, &c->rank_);
  MPI_Comm_size(c->comm_, &c->size_);
  c->name_ = std::move(name);
  c->all_gather_what_ = c->name_ + ": all-gather";
  c->broadcast_what_ = c->name_ + ": broadcast";
  return c;
}

MpiCollective::~MpiCollective() {
  // A group that was aborted may still have operations in flight: leave its communicator
  // to the exiting process rather than block in MPI_Comm_free.
  if (comm_ != MPI_COMM_NULL && !aborted_.load()) MPI_Comm_free(&comm_);
}

void MpiCollective::Abort(const std::string& reason) {
  if (aborted_.load()) return;
  abort_reason_ = reason;
  aborted_.store(true);
}

absl::Status MpiCollective::Check() const {
  if (aborted_.load()) return absl::UnavailableError(abort_reason_);
  return broken_;
}

absl::Status MpiCollective::AllGather(const void* send, size_t bytes, void* recv) {
  CASCADE_RETURN_IF_ERROR(Check());
  if (bytes > static_cast<size_t>(INT_MAX) / static_cast<size_t>(size_)) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": an all-gather of ", bytes,
                                                   " bytes per rank is too large for MPI"));
  }
  MPI_Request req;
  const int n = static_cast<int>(bytes);
  absl::Status st = MpiError(
      MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_, &req), all_gather_what_);
  if (st.ok()) st = MpiWait(&req, all_gather_what_, &aborted_);
  if (!st.ok()) broken_ = st;
  return st;
}

absl::Status MpiCollective::Broadcast(void* data, size_t bytes, int root) {
  CASCADE_RETURN_IF_ERROR(Check());
  if (bytes > static_cast<size_t>(INT_MAX) || root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": a broadcast of ", bytes, " bytes from rank ", root, " of ", size_));
  }
  MPI_Request req;
  absl::Status st = MpiError(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &req),
                             broadcast_what_);
  if (st.ok()) st = MpiWait(&req, broadcast_what_, &aborted_);
  if (!st.ok()) broken_ = st;
  return st;
}

absl::Status MpiCollective::AllReduceSum(float* data, int64_t count) {
  return HostAllReduceSum(*this, data, count, &scratch_);
}

}  // namespace cascade
