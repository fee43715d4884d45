// data_plane_bench: the bytes one steady decode step puts on each hop of the pipeline, per
// decode token, for a batch of 1 and of 16 sequences. Two kinds of hop: into the first
// stage (tokens, no activations) and between stages (TinyLlama's 2048 floats a token).
// Each is printed whole and without the activations themselves (the part the frame's
// format decides), for two request kinds: plain sampling (temperature, top-p) and a chat
// client's (top-k, top-p, min-p, a repetition penalty over 64 tokens, two logit biases).
//
//   data_plane_bench
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "transport/frame.h"
#include "transport/tcp_wire.h"

namespace cascade {
namespace {

constexpr int64_t kDim = 2048;        // TinyLlama-1.1B's hidden size
constexpr int32_t kPosition = 300;   // mid-generation
constexpr size_t kLinkKeyBytes = 32;

SamplingParams Plain() {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 0;
  p.top_p = 0.95f;
  p.min_p = 0.0f;
  p.seed = 0x9e3779b97f4a7c15ULL;
  return p;
}

SamplingParams Chat() {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.penalty_last_n = 64;
  p.seed = 0x9e3779b97f4a7c15ULL;
  p.logit_bias = {{13, -100.0f}, {29871, 5.0f}};
  return p;
}

// One steady decode step: each sequence's next token, sampled by the last stage.
StageFrame DecodeStep(int n_seqs, uint32_t stage, const SamplingParams& params) {
  StageFrame f;
  f.plan_id = 7;
  f.batch_id = 123456;
  f.stage = stage;
  f.sent_unix_ns = 1765000000000000000;
  for (int i = 0; i < n_seqs; ++i) {
    const SeqId seq = 1000 + i;
    f.slots.push_back({29000 + i, seq, kPosition, true});
    SeqSampling s;
    s.seq = seq;
    s.params = params;
    s.draw_index = kPosition + 1;
    if (params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
        params.presence_penalty != 0.0f) {
      for (int32_t k = 0; k < params.penalty_last_n; ++k) s.recent_tokens.push_back(300 + 97 * k);
    }
    f.sampling.push_back(std::move(s));
  }
  if (stage > 0) f.hidden.assign(static_cast<size_t>(n_seqs * kDim), 0.25f);
  return f;
}

size_t WireBytes(const StageFrame& f) {
  v1::ActivationFrame msg;
  EncodeFrame(f, std::string(kLinkKeyBytes, 'k'), &msg);
  return msg.ByteSizeLong() + kTcpHeaderBytes;
}

}  // namespace
}  // namespace cascade

int main() {
  using namespace cascade;
  std::printf("data-plane bytes per decode token per hop (steady decode step, TCP framing)\n");
  std::printf("%-8s %-8s %-22s %12s %14s\n", "request", "batch", "hop", "bytes/token",
              "w/o activations");
  for (const auto& [name, params] : {std::pair{"plain", Plain()}, std::pair{"chat", Chat()}}) {
    for (int n : {1, 16}) {
      for (uint32_t stage : {0u, 1u}) {
        const StageFrame f = DecodeStep(n, stage, params);
        const size_t bytes = WireBytes(f);
        const size_t activations = f.hidden.size() * sizeof(float);
        std::printf("%-8s %-8d %-22s %12.1f %14.1f\n", name, n,
                    stage == 0 ? "into stage 0 (tokens)" : "stage to stage",
                    static_cast<double>(bytes) / n,
                    static_cast<double>(bytes - activations) / n);
      }
    }
  }
  return 0;
}
