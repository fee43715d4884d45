#include "transport/byte_stream.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cascade {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

int Fd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::Status WaitReady(int fd, short events, const ByteStream::Clock::time_point* deadline) {
  for (;;) {
    int timeout = -1;
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - ByteStream::Clock::now()).count();
      if (left <= 0) return absl::DeadlineExceededError("peer stalled in the middle of a frame");
      timeout = static_cast<int>(left);
    }
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, timeout);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    if (r > 0) return absl::OkStatus();
    // r == 0: the timeout ran out; the loop re-checks the deadline.
  }
}

absl::StatusOr<size_t> SocketStream::Read(char* buf, size_t n, const Clock::time_point* deadline) {
  for (;;) {
    if (deadline) {
      if (absl::Status st = WaitReady(fd_.get(), POLLIN, deadline); !st.ok()) return st;
    }
    const ssize_t got = ::recv(fd_.get(), buf, n, 0);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno == EINTR) continue;
    return absl::UnavailableError(absl::StrCat("connection broke: ", std::strerror(errno)));
  }
}

absl::Status SocketStream::Write(const char* buf, size_t n) {
  size_t sent = 0;
  while (sent < n) {
    const ssize_t w = ::send(fd_.get(), buf + sent, n - sent, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    sent += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

void SocketStream::Shutdown(int how) { ::shutdown(fd_.get(), how); }

}  // namespace cascade
