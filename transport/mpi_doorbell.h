// MpiDoorbell: wakes another rank's MPI data-plane receiver when a message is on its way,
// so that the receiver can sleep in the kernel instead of polling MPI. (Polling MPI costs a
// timer wake-up per test, ~10 us of CPU on a virtual machine, and its latency grows with
// the machine's load; a woken thread is scheduled at once.) MPI carries the messages; the
// doorbell carries nothing but the hint.
//
// Each rank has one UDP socket on a free port of all its addresses; Create (collective over
// the world) exchanges every rank's host name and port: a rank on this machine is rung on
// 127.0.0.1, another at its host name's first address. A ring is a one-byte datagram:
// non-blocking, and a lost one costs the receiver only its wait's timeout, after which it
// looks anyway.
//
// Contract: Ring and Wake are thread-safe; Wait is called by one thread. A rank whose
// address does not resolve is never rung (its receiver finds the messages at its timeout).
#ifndef CASCADE_TRANSPORT_MPI_DOORBELL_H_
#define CASCADE_TRANSPORT_MPI_DOORBELL_H_

#include <mpi.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade {

class MpiDoorbell {
 public:
  static absl::StatusOr<std::unique_ptr<MpiDoorbell>> Create(MPI_Comm world);
  ~MpiDoorbell();
  MpiDoorbell(const MpiDoorbell&) = delete;
  MpiDoorbell& operator=(const MpiDoorbell&) = delete;

  void Ring(int rank) const;
  // Waits until rung (or Wake) or `timeout` passes; true if rung. Takes every ring waiting.
  bool Wait(std::chrono::milliseconds timeout);
  // Rings this rank's own doorbell (to end a Wait at shutdown).
  void Wake() const;

 private:
  struct Peer {
    sockaddr_storage addr{};
    socklen_t len = 0;  // 0: not reachable
  };
  MpiDoorbell() = default;
  int fd_ = -1;
  int rank_ = 0;
  std::vector<Peer> peers_;
};

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_MPI_DOORBELL_H_
