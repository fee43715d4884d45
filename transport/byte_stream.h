// ByteStream: a connected stream socket as the TCP data plane reads and writes it, plain
// (SocketStream) or under TLS (transport/security.h). The frame codec (tcp_wire.h) works on
// either.
//
// Contract: one reader and one writer may use a stream at once (from two threads);
// Shutdown may be called from any thread and wakes both. Read with a deadline waits no
// longer than it (DeadlineExceeded); without one it waits as long as the peer is quiet.
// Write sends everything or fails with Unavailable (a peer that stops reading for 30 s
// fails the write).
#ifndef CASCADE_TRANSPORT_BYTE_STREAM_H_
#define CASCADE_TRANSPORT_BYTE_STREAM_H_

#include <chrono>
#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace cascade {

// An owned file descriptor (closed on destruction).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release();
  void reset();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

class ByteStream {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~ByteStream() = default;
  // Up to n bytes into buf; 0 at the end of the stream.
  virtual absl::StatusOr<size_t> Read(char* buf, size_t n, const Clock::time_point* deadline) = 0;
  virtual absl::Status Write(const char* buf, size_t n) = 0;
  // shutdown(2) of the socket: SHUT_WR ends our side, SHUT_RDWR both.
  virtual void Shutdown(int how) = 0;
  virtual int fd() const = 0;
};

// Waits until fd is ready for `events` (POLLIN / POLLOUT; a hang-up counts as ready: the
// next call on it says what happened), up to *deadline when given: DeadlineExceeded past
// it, Unavailable when poll fails. Restarts after signals.
absl::Status WaitReady(int fd, short events, const ByteStream::Clock::time_point* deadline);

// A plain TCP (or any stream) socket.
class SocketStream : public ByteStream {
 public:
  explicit SocketStream(Fd fd) : fd_(std::move(fd)) {}
  absl::StatusOr<size_t> Read(char* buf, size_t n, const Clock::time_point* deadline) override;
  absl::Status Write(const char* buf, size_t n) override;
  void Shutdown(int how) override;
  int fd() const override { return fd_.get(); }

 private:
  Fd fd_;
};

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_BYTE_STREAM_H_
