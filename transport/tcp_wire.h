// The TCP data plane's wire format and socket plumbing.
//
// Each message on a data-plane TCP connection is one frame: a fixed 12-byte header, all
// fields little-endian, followed by the body.
//
//   offset 0  u32 magic    0x46435343 ("CSCF")
//   offset 4  u16 version  kTcpWireVersion (1)
//   offset 6  u16 kind     TcpFrameKind
//   offset 8  u32 length   body bytes, at most the reader's limit (kMaxMessageBytes)
//   offset 12 body         a serialized cascade.v1 message of that kind
//
// The body is protobuf (proto/cascade/v1/data_plane.proto), so a frame's content is checked
// field by field after parsing exactly as on the gRPC data plane (DecodeFrame).
//
// Contract:
// - ReadFrame never trusts the header: a wrong magic, version or kind, or a length over
//   the limit, gives InvalidArgument naming the field before any body byte is read; a
//   connection that ends inside a frame gives DataLoss with the byte counts; one that
//   stalls inside a frame longer than `stall_timeout` gives DeadlineExceeded. Memory grows
//   only as body bytes actually arrive, so a header that claims a huge body costs nothing.
// - A clean end of stream between frames is reported as kClosed, not as an error.
// - Functions here are thread-compatible: one reader and one writer per socket.
#ifndef CASCADE_TRANSPORT_TCP_WIRE_H_
#define CASCADE_TRANSPORT_TCP_WIRE_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message_lite.h"
#include "transport/address.h"
#include "transport/byte_stream.h"

namespace cascade {

constexpr uint32_t kTcpWireMagic = 0x46435343;  // "CSCF" in memory order
constexpr uint16_t kTcpWireVersion = 1;
constexpr size_t kTcpHeaderBytes = 12;

enum class TcpFrameKind : uint16_t {
  kActivation = 1,  // v1.ActivationFrame, sender -> next stage
  kAck = 2,         // v1.FrameAck, next stage -> sender (rejections only)
  kResult = 3,      // v1.StepResult, last stage -> coordinator
};
const char* TcpFrameKindName(TcpFrameKind kind);

// Connects to host:port (names resolved with getaddrinfo), waiting at most `timeout`.
// Sets TCP_NODELAY and keepalive probes that detect a vanished peer within ~15 s.
absl::StatusOr<Fd> ConnectTcp(const HostPort& to, std::chrono::milliseconds timeout);

// Listens on host:port (port 0 picks a free one); returns the socket and the bound port.
absl::StatusOr<Fd> ListenTcp(const HostPort& at, int* bound_port);

// Sets TCP_NODELAY and keepalive on an accepted socket.
void ConfigureDataSocket(int fd);

// Writes one frame (header + serialized message) in one write; `scratch` is reused
// between calls to avoid allocations. Unavailable when the connection is down.
absl::Status WriteFrame(ByteStream& stream, TcpFrameKind kind,
                        const google::protobuf::MessageLite& msg, std::string* scratch);

enum class ReadOutcome { kFrame, kClosed };
// Reads the next frame into *kind and *body (body bytes only). The wait for a frame to
// start is unbounded (an idle link is normal) unless `start_deadline` is given.
absl::StatusOr<ReadOutcome> ReadFrame(
    ByteStream& stream, size_t max_body, TcpFrameKind* kind, std::string* body,
    std::chrono::milliseconds stall_timeout = std::chrono::seconds(30),
    const std::chrono::steady_clock::time_point* start_deadline = nullptr);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_TCP_WIRE_H_
