// The stage's FFN blocks: the dense (SwiGLU or GELU-gated) FFN and the mixture of experts.
// (Stage's other members are in stage.cc; the contract is in stage.h.)
#include <algorithm>

#include "engine/stage.h"
#include "util/status_macros.h"

namespace cascade {

void Stage::GateTimesUp(float* gate, const float* up, int64_t count) {
  if (config_.ffn_activation == FfnActivation::kGeluTanh) {
    backend_->GeluMul(gate, up, count, gate);
  } else {
    backend_->SiluMul(gate, up, count, gate);
  }
}

void Stage::Ffn(const TensorView& gate, const TensorView& up, const TensorView& down,
                const float* in, int64_t n, int64_t ffn, float* out) {
  Backend& be = *backend_;
  float* hb = hb_.as<float>();
  float* hb2 = hb2_.as<float>();
  {  // hb, hb2 (n, ffn)
    const TensorView* const gate_up[] = {&gate, &up};
    float* const outs[] = {hb, hb2};
    be.MatMulShared(gate_up, 2, in, n, outs);
  }
  GateTimesUp(hb, hb2, n * ffn);
  be.MatMul(down, hb, n, out);  // (n, dim); a partial sum when split by columns
}

absl::Status Stage::FfnBlock(int l, int64_t n) {
  const ResidentLayer& w = layers_[l];
  float* xb = xb_.as<float>();
  backend_->RmsNorm(x_.as<float>(), w.ffn_norm.as<float>(), n, config_.dim,
                    static_cast<float>(config_.norm_eps), xb);
  if (config_.is_moe()) {
    CASCADE_RETURN_IF_ERROR(MoeBlock(l, n));
  } else {
    Ffn(w.w_gate, w.w_up, w.w_down, xb, n, local_.ffn, xb);
  }
  return AddResidual(w.post_ffn_norm, n);
}

// xb (n, dim) holds the normed input and receives the output. The tokens routed to an
// expert are gathered into moe_in_ and go through it together; each token's outputs are
// weighted and summed on the host in expert-index order, whatever its batch. A rank of a
// tensor-parallel group holds experts [expert_begin, expert_end) (and the shared expert,
// or not): its sum is its part, which AddResidual's all-reduce completes.
absl::Status Stage::MoeBlock(int l, int64_t n) {
  const ResidentLayer& w = layers_[l];
  const ModelConfig& c = config_;
  Backend& be = *backend_;
  const int64_t dim = c.dim, n_experts = c.n_experts;
  float* xb = xb_.as<float>();
  float* in = moe_in_.as<float>();
  float* out = moe_out_.as<float>();
  moe_host_.resize(static_cast<size_t>(std::max(n, c.n_experts_used) * std::max(dim, n_experts)));
  moe_sum_.assign(static_cast<size_t>(n * dim), 0.0f);

  be.MatMul(w.router, xb, n, router_.as<float>());  // (n, n_experts)
  be.CopyToHost(moe_host_.data(), router_.data(), n * n_experts * sizeof(float));
  RouteTokens(moe_host_, n, n_experts, c.n_experts_used, c.expert_weights_norm, &routing_);
  // A weighted sum of `m` output rows into moe_sum_: row i to token rows[i], weight wt[i].
  auto accumulate = [&](int64_t m, const int64_t* rows, const float* wt) {
    be.CopyToHost(moe_host_.data(), out, m * dim * sizeof(float));
    for (int64_t i = 0; i < m; ++i) {
      const float* y = moe_host_.data() + i * dim;
      float* sum = moe_sum_.data() + rows[i] * dim;
      for (int64_t j = 0; j < dim; ++j) sum[j] += wt[i] * y[j];
    }
  };
  const TpShard* sh = shard();
  const int64_t first = sh != nullptr ? sh->expert_begin : 0;
  if (n == 1) {  // every routed expert reads the one row: gate and up of all in one pass
    const int64_t f = c.expert_ffn_dim;
    float* hb = hb_.as<float>();
    float* hb2 = hb2_.as<float>();
    std::vector<int64_t>& used = moe_used_;  // local indices, in expert order
    used.clear();
    for (int64_t i = 0; i < static_cast<int64_t>(w.exp_gate.size()); ++i) {
      if (!routing_.rows[first + i].empty()) used.push_back(i);
    }
    const int64_t k = static_cast<int64_t>(used.size());
    std::vector<const TensorView*>& gate_up = moe_gate_up_;
    std::vector<float*>& outs = moe_gate_up_out_;
    gate_up.resize(2 * k);
    outs.resize(2 * k);
    for (int64_t j = 0; j < k; ++j) {
      gate_up[j] = &w.exp_gate[used[j]];
      gate_up[k + j] = &w.exp_up[used[j]];
      outs[j] = hb + j * f;
      outs[k + j] = hb2 + j * f;
    }
    if (k > 0) be.MatMulShared(gate_up.data(), static_cast<int>(2 * k), xb, 1, outs.data());
    GateTimesUp(hb, hb2, k * f);
    for (int64_t j = 0; j < k; ++j) be.MatMul(w.exp_down[used[j]], hb + j * f, 1, out + j * dim);
    be.CopyToHost(moe_host_.data(), out, k * dim * sizeof(float));
    for (int64_t j = 0; j < k; ++j) {  // in expert order, as the batched path sums
      const float wt = routing_.weights[first + used[j]][0];
      const float* y = moe_host_.data() + j * dim;
      for (int64_t d = 0; d < dim; ++d) moe_sum_[d] += wt * y[d];
    }
  } else {
    for (int64_t i = 0; i < static_cast<int64_t>(w.exp_gate.size()); ++i) {
      const int64_t e = first + i;
      const std::vector<int64_t>& rows = routing_.rows[e];
      const int64_t m = static_cast<int64_t>(rows.size());
      if (m == 0) continue;
      be.GatherRows(xb, rows.data(), m, dim, in);  // (m, dim)
      Ffn(w.exp_gate[i], w.exp_up[i], w.exp_down[i], in, m, c.expert_ffn_dim, out);
      accumulate(m, rows.data(), routing_.weights[e].data());
    }
  }
  // Every token, gated by sigmoid(shexp_router . h), where this rank holds it.
  if (c.shared_expert_ffn_dim > 0 && w.shexp_router.data != nullptr) {
    float* gate = router_.as<float>();
    be.MatMul(w.shexp_router, xb, n, gate);  // (n, 1)
    std::vector<float> weight(n);
    be.CopyToHost(weight.data(), gate, n * sizeof(float));
    for (float& g : weight) g = Sigmoid(g);
    std::vector<int64_t> rows(n);
    for (int64_t i = 0; i < n; ++i) rows[i] = i;
    Ffn(w.shexp_gate, w.shexp_up, w.shexp_down, xb, n, c.shared_expert_ffn_dim, out);
    accumulate(n, rows.data(), weight.data());
  }
  be.CopyToDevice(xb, moe_sum_.data(), n * dim * sizeof(float));
  return absl::OkStatus();
}

}  // namespace cascade
