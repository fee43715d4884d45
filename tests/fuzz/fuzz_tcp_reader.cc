// libFuzzer target: the TCP data plane's frame reader on a byte stream a peer controls
// (any header, any length, a stream that ends anywhere). ReadFrame must never read past
// what arrived, allocate for a length it has not received, or return a body longer than
// the limit; each frame's body is then parsed as its kind's message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cascade/v1/data_plane.pb.h"
#include "transport/tcp_wire.h"

namespace {

// A stream over the fuzzer's bytes, handed out in reads of varying size.
class MemoryStream final : public cascade::ByteStream {
 public:
  MemoryStream(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  absl::StatusOr<size_t> Read(char* buf, size_t n, const Clock::time_point*) override {
    const size_t step = 1 + (pos_ * 7919) % 97;  // uneven pieces, as TCP delivers them
    const size_t k = std::min({n, size_ - pos_, step});
    std::memcpy(buf, data_ + pos_, k);
    pos_ += k;
    return k;
  }
  absl::Status Write(const char*, size_t) override { return absl::OkStatus(); }
  void Shutdown(int) override {}
  int fd() const override { return -1; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kLimit = 1 << 16;
  MemoryStream stream(data, size);
  for (int frames = 0; frames < 64; ++frames) {
    cascade::TcpFrameKind kind;
    std::string body;
    auto r = cascade::ReadFrame(stream, kLimit, &kind, &body);
    if (!r.ok() || *r == cascade::ReadOutcome::kClosed) break;
    if (body.size() > kLimit) std::abort();
    switch (kind) {
      case cascade::TcpFrameKind::kActivation: {
        cascade::v1::ActivationFrame m;
        (void)m.ParseFromString(body);
        break;
      }
      case cascade::TcpFrameKind::kAck: {
        cascade::v1::FrameAck m;
        (void)m.ParseFromString(body);
        break;
      }
      case cascade::TcpFrameKind::kResult: {
        cascade::v1::StepResult m;
        (void)m.ParseFromString(body);
        break;
      }
      default:
        std::abort();  // ReadFrame let an unknown kind through
    }
  }
  return 0;
}
