#include "engine/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace cascade {

void RouteTokens(std::span<const float> logits, int64_t n, int64_t n_experts, int64_t k,
                 bool renormalise, ExpertRouting* out) {
  out->rows.resize(n_experts);
  out->weights.resize(n_experts);
  for (int64_t e = 0; e < n_experts; ++e) {
    out->rows[e].clear();
    out->weights[e].clear();
  }
  std::vector<double> p(n_experts);
  std::vector<int64_t> order(n_experts);
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits.data() + t * n_experts;
    const double max = *std::max_element(l, l + n_experts);
    double sum = 0;
    for (int64_t e = 0; e < n_experts; ++e) sum += (p[e] = std::exp(l[e] - max));
    for (double& v : p) v /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double chosen = 0;
    for (int64_t i = 0; i < k; ++i) chosen += p[order[i]];
    const double scale = renormalise ? 1.0 / chosen : 1.0;
    // Experts in index order, so each token's outputs are summed in the same order.
    std::sort(order.begin(), order.begin() + k);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t e = order[i];
      out->rows[e].push_back(t);
      out->weights[e].push_back(static_cast<float>(p[e] * scale));
    }
  }
}

float Sigmoid(float x) {
  return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
}

}  // namespace cascade
