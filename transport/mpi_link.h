// The MPI data plane: activation frames and step results between the ranks of one MPI job
// as point-to-point messages, behind the same ActivationSender / ResultSender interfaces
// as TCP and gRPC, at addresses mpi://RANK (a rank of MPI_COMM_WORLD). cascade-mpi starts
// one MpiDataPlane per process and registers it for the mpi scheme (transport/factory.h),
// so the coordinator and the workers reach it through MakeActivationSender /
// MakeResultSender / DataPlaneServer like any other transport.
//
// Messages: each is one serialized cascade.v1 message (ActivationFrame, StepResult or
// FrameAck, the same bodies as the TCP data plane), on the plane's own duplicate of the
// world communicator, with a tag per kind of link: a link is (source rank, tag), and MPI
// keeps the messages of one link in order.
//
// Contract:
// - Sends are non-blocking MPI sends waited on without holding a core (MpiWait); a Send
//   returns once MPI has taken the message (at once for small ones, when the peer posts
//   its receive for large ones), and fails with Unavailable after 30 s (a stopped peer),
//   or at once after Close/Abort. A message over kMaxMessageBytes is refused before it
//   is sent.
// - One receiving thread probes for messages (every 20 us for 0.3 ms after a message, then
//   asleep until a peer rings this rank's doorbell as it sends (transport/mpi_doorbell.h),
//   or 5 ms, 50 ms once idle) and checks each one's size against
//   kMaxMessageBytes before any buffer is sized from it: a larger one is received into a
//   single byte (a datatype of extent 0) and dropped, and logged. Bodies that do not parse are logged and dropped.
//   Activation frames go to the frame router through a small queue and a delivery thread
//   (a full inbox holds frames back, not results); a frame the stage refuses is answered
//   with a FrameAck to its sender, counted by its ActivationSender's rejected(). Results
//   go to the result handler at once.
// - Nothing arriving for a kind the process does not take (no router or handler) reaches
//   anything: it is logged and dropped.
// - Thread-safe; needs MPI_THREAD_MULTIPLE. Shutdown() stops the threads; senders made by
//   the plane must not be used after it.
#ifndef CASCADE_TRANSPORT_MPI_LINK_H_
#define CASCADE_TRANSPORT_MPI_LINK_H_

#include <mpi.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "transport/factory.h"
#include "transport/grpc_util.h"
#include "transport/inbox.h"
#include "parallel/mpi_util.h"
#include "transport/mpi_doorbell.h"
#include "transport/link.h"
#include "util/bounded_queue.h"

namespace cascade {

// Tags of the MPI data plane's links.
enum class MpiTag : int {
  kActivation = 1,  // v1.ActivationFrame, into a stage
  kAck = 2,         // v1.FrameAck, back to the sender of a refused frame
  kResult = 3,      // v1.StepResult, last stage -> coordinator
  kNcclHeader = 4,  // v1.ActivationFrame without its payload, which follows over NCCL
};

class MpiDataPlane {
 public:
  // Duplicates `world` and starts the receiving thread. `max_message_bytes` is the limit
  // of the contract (tests lower it).
  static absl::StatusOr<std::unique_ptr<MpiDataPlane>> Start(
      MPI_Comm world, int max_message_bytes = kMaxMessageBytes);
  ~MpiDataPlane();

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string address() const;  // mpi://rank

  // Registers this plane for the mpi:// scheme with the transport factory (senders and
  // ListenOnTransport); Shutdown unregisters it. Factory() is what it registers (for a
  // launcher that routes some ranks another way).
  void RegisterWithFactory();
  TransportFactory Factory();

  // Where arriving frames and results go ("" / null: refused). AlreadyExists when another
  // listener holds that kind.
  absl::Status SetHandlers(const DataPlaneHandlers& handlers)
      ABSL_LOCKS_EXCLUDED(frames_mu_, results_mu_);
  void ClearHandlers(const DataPlaneHandlers& handlers)
      ABSL_LOCKS_EXCLUDED(frames_mu_, results_mu_);

  absl::StatusOr<std::unique_ptr<ActivationSender>> MakeActivationSender(
      int rank, const SenderOptions& options);
  absl::StatusOr<std::unique_ptr<ResultSender>> MakeResultSender(int rank,
                                                                 const SenderOptions& options);

  // Sends one serialized message (used by the senders): waits as the contract says.
  absl::Status SendBytes(int rank, MpiTag tag, std::shared_ptr<const std::string> bytes,
                         const std::atomic<bool>* stop);
  // Another transport riding on this plane (nccl://) takes the messages of `tag`: the
  // handler runs on the receiving thread with the (size-checked) body.
  using TagHandler = std::function<void(int source, std::string body)>;
  void SetTagHandler(MpiTag tag, TagHandler handler) ABSL_LOCKS_EXCLUDED(mu_);
  // Hands a frame to this rank's stage, or a result to its handler, as if it had arrived
  // on this plane (messages to this rank itself never go through MPI).
  void DeliverFrame(int source, v1::ActivationFrame frame);
  void DeliverResult(int source, const v1::StepResult& result) ABSL_LOCKS_EXCLUDED(results_mu_);
  int max_message_bytes() const { return max_bytes_; }
  // Messages received and refused for their size since start (statistics, tests).
  uint64_t oversized() const { return oversized_.load(); }
  void Shutdown();

  // The rejection counter of activation links to `rank` (acks from it add to it).
  std::shared_ptr<std::atomic<uint64_t>> RejectionCounter(int rank) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  MpiDataPlane() = default;
  void ReceiveLoop();
  void DeliverLoop() ABSL_LOCKS_EXCLUDED(frames_mu_);
  // Hands one received message on by its tag.
  void Dispatch(int source, int tag, std::string body) ABSL_LOCKS_EXCLUDED(mu_);
  void SendAck(int rank, const v1::FrameAck& ack);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int max_bytes_ = kMaxMessageBytes;
  std::unique_ptr<MpiDoorbell> doorbell_;  // wakes the receiving thread of a peer
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> oversized_{0};
  std::thread receiver_, deliverer_;
  struct Inbound {
    int source = 0;
    v1::ActivationFrame frame;
  };
  BoundedQueue<Inbound> frames_{4};

  // Each held while its handler runs, so that clearing a handler waits for its last call.
  absl::Mutex frames_mu_;
  FrameRouter* router_ ABSL_GUARDED_BY(frames_mu_) = nullptr;
  absl::Mutex results_mu_;
  ResultHandler results_ ABSL_GUARDED_BY(results_mu_);
  std::atomic<int> queued_frames_{0};
  absl::Mutex mu_;
  std::map<int, std::shared_ptr<std::atomic<uint64_t>>> rejections_ ABSL_GUARDED_BY(mu_);
  std::map<int, TagHandler> tag_handlers_ ABSL_GUARDED_BY(mu_);

  MpiSendQueue pending_;  // acks, and sends that were given up
};

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_MPI_LINK_H_
