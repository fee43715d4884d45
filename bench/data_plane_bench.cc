// data_plane_bench: the bytes one steady decode step puts on each hop of the pipeline, per
// decode token, for a batch of 1 and of 16 sequences. Two kinds of hop: into the first
// stage (tokens, no activations) and between stages (TinyLlama's 2048 floats a token).
// Each is printed whole and without the activations themselves (the part the frame's
// format decides), for two request kinds: plain sampling (temperature, top-p) and a chat
// client's (top-k, top-p, min-p, a repetition penalty over 64 tokens, two logit biases).
// Beside each steady step, the baseline measured in the same run: the same step when it
// also carries every sequence's sampling, as the frame that admits them does (once per
// sequence and pipeline; before frame version 2, every step did).
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

// One decode step: each sequence's next token, sampled by the last stage; `admitting`:
// the step also carries each sequence's sampling.
StageFrame DecodeStep(int n_seqs, uint32_t stage, const SamplingParams& params, bool admitting) {
  StageFrame f;
  f.plan_id = 7;
  f.batch_id = 123456;
  f.stage = stage;
  f.sent_unix_ns = 1765000000000000000;
  for (int i = 0; i < n_seqs; ++i) {
    const SeqId seq = 1000 + i;
    f.slots.push_back({29000 + i, seq, kPosition, true});
    if (admitting) f.admit.push_back({seq, params, false, 0});
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
  std::printf("data-plane bytes per decode token per hop (TCP framing); steady step, and the\n"
              "same step carrying every sequence's sampling (as an admitting step does)\n");
  std::printf("%-8s %-6s %-22s %12s %16s %16s %8s\n", "request", "batch", "hop", "bytes/token",
              "w/o activations", "admitting, w/o", "ratio");
  for (const auto& [name, params] : {std::pair{"plain", Plain()}, std::pair{"chat", Chat()}}) {
    for (int n : {1, 16}) {
      for (uint32_t stage : {0u, 1u}) {
        const StageFrame steady = DecodeStep(n, stage, params, false);
        const StageFrame admitting = DecodeStep(n, stage, params, true);
        const double activations = static_cast<double>(steady.hidden.size() * sizeof(float));
        const double bytes = static_cast<double>(WireBytes(steady));
        const double meta = bytes - activations;
        const double admit_meta = static_cast<double>(WireBytes(admitting)) - activations;
        std::printf("%-8s %-6d %-22s %12.1f %16.1f %16.1f %7.2fx\n", name, n,
                    stage == 0 ? "into stage 0 (tokens)" : "stage to stage", bytes / n, meta / n,
                    admit_meta / n, admit_meta / meta);
      }
    }
  }
  return 0;
}
