// The data plane's two directions, as every transport implements them: activation frames
// go from the coordinator to stage 0 and from each stage to the next (ActivationSender ->
// ActivationReceiver), sampled tokens go from the last stage to the coordinator
// (ResultSender). Transports: in-process (transport/inproc.h), gRPC streams
// (transport/grpc_link.h), length-prefixed frames on TCP (transport/tcp_link.h), MPI
// point-to-point (transport/mpi_link.h); transport/factory.h picks one by address scheme.
//
// Contract:
// - Frames arrive in the order they were sent; a link never reorders or duplicates.
// - Send blocks while the link's buffer is full (backpressure) and fails with Unavailable
//   naming the peer when the link is closed or broken; a failed Send may or may not have
//   delivered its frame, and the sender never sends it again by itself.
// - Receive blocks for the next frame and returns nullopt once the link is closed and
//   drained. Frames from a network peer are validated (DecodeFrame) before they are
//   returned; invalid frames are rejected with a logged reason and never returned.
// - Send, Close and StopReconnecting may be called from any thread; Receive from one.
#ifndef CASCADE_TRANSPORT_LINK_H_
#define CASCADE_TRANSPORT_LINK_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "transport/frame.h"

namespace cascade {

// How a sender is made.
struct SenderOptions {
  // How long a send waits for the peer to accept a connection.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(10);
  // The link's key (LoadStageRequest.outbound_key): every frame or result carries it, and
  // the receiver drops what does not.
  std::string link_key;
};

class ActivationSender {
 public:
  virtual ~ActivationSender() = default;
  virtual absl::Status Send(StageFrame frame) = 0;
  // Ends the link: what was sent is delivered to a live peer (bounded wait), then every
  // Send fails at once.
  virtual void Close() = 0;
  // From now on a Send that would have to (re)connect fails at once, and one waiting to
  // connect gives up; a link that is up keeps working until Close. Lets a stopping stage
  // drain its queue to a live neighbour without waiting on a dead one.
  virtual void StopReconnecting() {}
  // Drops the link at once, without waiting for the peer (one that is dead or stopped);
  // frames not yet read by the peer may be lost. Every later Send fails.
  virtual void Abort() { Close(); }
  // Frames the peer refused (answered with a rejection), for statistics.
  virtual uint64_t rejected() const { return 0; }
};

class ActivationReceiver {
 public:
  virtual ~ActivationReceiver() = default;
  virtual std::optional<StageFrame> Receive() = 0;
  virtual void Close() = 0;
};

// Where the last stage reports sampled tokens (the coordinator). StopReconnecting and
// Close as for ActivationSender.
class ResultSender {
 public:
  virtual ~ResultSender() = default;
  virtual absl::Status Send(StepResult result) = 0;
  virtual void Close() {}
  virtual void StopReconnecting() {}
  virtual void Abort() { Close(); }
};

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_LINK_H_
