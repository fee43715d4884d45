// Mixture-of-experts routing: which experts each token of a batch goes to, and with what
// weight, from the router's logits.
//
// Contract: RouteTokens is a pure function of one token's row of logits at a time (a
// softmax in double over the experts, the k largest probabilities, ties to the lower
// expert index, renormalised to sum to 1 when asked), so a token's experts and weights do
// not depend on the rest of its batch. The result lists, per expert in index order, the
// tokens routed to it in batch order: a batch reads each used expert's weights once.
// Thread-compatible (no shared state).
#ifndef CASCADE_ENGINE_MOE_ROUTING_H_
#define CASCADE_ENGINE_MOE_ROUTING_H_

#include <cstdint>
#include <span>
#include <vector>

namespace cascade {

struct ExpertRouting {
  // rows[e]: the batch rows routed to expert e, ascending; weights[e][i] is rows[e][i]'s.
  std::vector<std::vector<int64_t>> rows;
  std::vector<std::vector<float>> weights;
};

// logits: (n, n_experts) router outputs. Reuses *out's storage.
void RouteTokens(std::span<const float> logits, int64_t n, int64_t n_experts, int64_t k,
                 bool renormalise, ExpertRouting* out);

// 1 / (1 + exp(-x)) in double, rounded to float: the shared expert's gate.
float Sigmoid(float x);

}  // namespace cascade

#endif  // CASCADE_ENGINE_MOE_ROUTING_H_
