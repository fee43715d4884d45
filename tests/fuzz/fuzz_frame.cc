// libFuzzer target: what a peer sends on the data plane, after the transport: the bytes
// of an ActivationFrame or a StepResult, parsed and checked as a stage (first, middle or
// last) and as the coordinator would. The first byte picks the role, the rest is the
// message; a frame that passes DecodeFrame is encoded again and must decode the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "transport/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t role = data[0];
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  cascade::FrameExpectations e;
  e.link_key = "";  // a frame without a key matches the empty key: reach the field checks
  e.plan_id = 7;
  e.stage = role % 3;
  e.first_stage = e.stage == 0;
  e.dim = 8;
  e.vocab_size = 64;
  e.max_batch_tokens = 32;
  e.context_length = 128;
  if (role & 0x80) {
    cascade::v1::StepResult wire;
    if (!wire.ParseFromString(bytes)) return 0;
    auto r = cascade::DecodeResult(wire, "", 7, 64);
    if (r.ok()) {
      for (const auto& t : r->tokens) {
        if (t.token < 0 || t.token >= 64) std::abort();
      }
    }
    return 0;
  }
  cascade::v1::ActivationFrame wire;
  if (!wire.ParseFromString(bytes)) return 0;
  auto f = cascade::DecodeFrame(wire, e);
  if (!f.ok()) return 0;
  // Whatever passed is what the stage may touch: shapes must hold.
  if (!e.first_stage && !f->slots.empty() &&
      f->hidden.size() != f->slots.size() * static_cast<size_t>(e.dim)) {
    std::abort();
  }
  cascade::v1::ActivationFrame again;
  cascade::EncodeFrame(*f, wire.link_key(), &again);
  auto g = cascade::DecodeFrame(again, e);
  // Bytes, not floats: activations may be NaN, which is never equal to itself.
  if (!g.ok() || g->slots.size() != f->slots.size() || g->hidden.size() != f->hidden.size() ||
      (!f->hidden.empty() &&
       std::memcmp(g->hidden.data(), f->hidden.data(), f->hidden.size() * sizeof(float)) != 0)) {
    std::abort();
  }
  return 0;
}
