// The NCCL data plane between the GPU stages of one node: nccl://RANK (a rank of
// MPI_COMM_WORLD on the same node). A frame's activations go GPU to GPU with
// ncclSend/ncclRecv over the node's NCCL communicator (NVLink or PCIe peer to peer); the
// rest of the frame (its ActivationFrame without the payload) goes first as an MPI message
// on the MPI data plane (MpiTag::kNcclHeader), which also carries the results and the
// rejection notices, as for mpi://. Stages hand their activations over as host vectors,
// so the payload is staged through a device buffer at each end.
//
// Built with CUDA and NCCL (CASCADE_WITH_NCCL); compiled in CI, run on GPUs only
// (tests/gpu/device-check.sh).
//
// Contract:
// - The receiver checks the header (shape against the payload size it implies, which must
//   be within the MPI plane's message limit) before it sizes the staging buffer, then
//   receives exactly that many floats; the frame is then validated like any other
//   (FrameRouter).
// - A send waits until NCCL has handed the payload over; errors break the link (every
//   later Send fails with the reason).
// - Thread-safe: sends and the receive are serialized on the plane's own CUDA stream.
#ifndef CASCADE_TRANSPORT_NCCL_LINK_H_
#define CASCADE_TRANSPORT_NCCL_LINK_H_

#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/collective.h"
#include "transport/mpi_link.h"

namespace cascade {

class NcclDataPlane {
 public:
  // `node` is a host-memory group of this node's ranks, in `node_world_ranks` order (the
  // NCCL unique id travels over it); `device` is this rank's CUDA ordinal.
  static absl::StatusOr<std::unique_ptr<NcclDataPlane>> Start(MpiDataPlane* mpi, Collective& node,
                                                             std::vector<int> node_world_ranks,
                                                             int device);
  ~NcclDataPlane();
  // Registers nccl:// with the transport factory (senders; results go over MPI).
  void RegisterWithFactory();

  // Sends `frame` to world rank `to` (on this node).
  absl::Status SendFrame(int to, StageFrame frame, const std::string& link_key);

 private:
  struct Impl;
  NcclDataPlane() = default;
  void OnHeader(int source, std::string body);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_NCCL_LINK_H_
