// The engine against a plain float64 forward pass written here, independently of the
// engine's code, on small random models of each architecture: Llama (GGUF adjacent-pair
// RoPE) and Qwen2 (q/k/v biases, RoPE over halves, tied embeddings).
#include <unistd.h>

#include <cmath>

#include "engine/stage.h"
#include "gtest/gtest.h"
#include "model/model_source.h"
#include "tensor/quant.h"
#include "model/synthetic.h"

namespace cascade {
namespace {

using Vec = std::vector<double>;

// Dequantized tensor as doubles.
Vec Load(const ModelSource& src, const std::string& name) {
  const TensorView* t = src.Find(name);
  if (t == nullptr) return {};
  std::vector<float> f(t->cols() * t->rows());
  for (int64_t r = 0; r < t->rows(); ++r) {
    DequantizeRow(t->type, t->data + r * t->row_bytes(), t->cols(), f.data() + r * t->cols());
  }
  return Vec(f.begin(), f.end());
}

// y (rows) = W (rows, cols) x
Vec MatVec(const Vec& w, const Vec& x, int64_t rows) {
  const int64_t cols = static_cast<int64_t>(x.size());
  Vec y(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
  }
  return y;
}

Vec RmsNorm(const Vec& x, const Vec& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

void Rope(Vec& v, int heads, int hd, int pos, const ModelConfig& c) {
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < hd / 2; ++j) {
      const double theta = pos * std::pow(c.rope_theta, -2.0 * j / hd);
      const int a = c.rope_layout == RopeLayout::kHalves ? j : 2 * j;
      const int b = c.rope_layout == RopeLayout::kHalves ? j + hd / 2 : 2 * j + 1;
      double* p = v.data() + h * hd;
      const double x0 = p[a], x1 = p[b];
      p[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
      p[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
  }
}

// Logits of every position, float64 throughout.
std::vector<Vec> Reference(const ModelSource& src, const std::vector<int32_t>& ids) {
  const ModelConfig& c = src.config();
  const int64_t dim = c.dim, hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim();
  const Vec embed = Load(src, "token_embd.weight");
  Vec out_w = Load(src, "output.weight");
  if (out_w.empty()) out_w = embed;
  std::vector<std::vector<Vec>> k_cache(c.n_layers), v_cache(c.n_layers);
  std::vector<Vec> logits;
  for (size_t t = 0; t < ids.size(); ++t) {
    Vec x(embed.begin() + ids[t] * dim, embed.begin() + (ids[t] + 1) * dim);
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      Vec xn = RmsNorm(x, Load(src, p + "attn_norm.weight"), c.norm_eps);
      Vec q = MatVec(Load(src, p + "attn_q.weight"), xn, qd);
      Vec k = MatVec(Load(src, p + "attn_k.weight"), xn, kvd);
      Vec v = MatVec(Load(src, p + "attn_v.weight"), xn, kvd);
      for (const auto& [vec, name] : {std::pair<Vec*, const char*>{&q, "attn_q.bias"},
                                      {&k, "attn_k.bias"},
                                      {&v, "attn_v.bias"}}) {
        const Vec b = Load(src, p + name);
        for (size_t i = 0; i < b.size(); ++i) (*vec)[i] += b[i];
      }
      Rope(q, c.n_heads, hd, static_cast<int>(t), c);
      Rope(k, c.n_kv_heads, hd, static_cast<int>(t), c);
      k_cache[l].push_back(k);
      v_cache[l].push_back(v);
      Vec att(qd, 0.0);
      for (int h = 0; h < c.n_heads; ++h) {
        const int kvh = h / (c.n_heads / c.n_kv_heads);
        Vec s(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int e = 0; e < hd; ++e) d += q[h * hd + e] * k_cache[l][j][kvh * hd + e];
          s[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& v2 : s) sum += (v2 = std::exp(v2 - mx));
        for (size_t j = 0; j <= t; ++j) {
          for (int e = 0; e < hd; ++e) att[h * hd + e] += s[j] / sum * v_cache[l][j][kvh * hd + e];
        }
      }
      const Vec o = MatVec(Load(src, p + "attn_output.weight"), att, dim);
      for (int64_t i = 0; i < dim; ++i) x[i] += o[i];
      xn = RmsNorm(x, Load(src, p + "ffn_norm.weight"), c.norm_eps);
      Vec g = MatVec(Load(src, p + "ffn_gate.weight"), xn, c.ffn_dim);
      const Vec u = MatVec(Load(src, p + "ffn_up.weight"), xn, c.ffn_dim);
      for (int64_t i = 0; i < c.ffn_dim; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      const Vec d = MatVec(Load(src, p + "ffn_down.weight"), g, dim);
      for (int64_t i = 0; i < dim; ++i) x[i] += d[i];
    }
    logits.push_back(
        MatVec(out_w, RmsNorm(x, Load(src, "output_norm.weight"), c.norm_eps), c.vocab_size));
  }
  return logits;
}

class ReferenceForward : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceForward, EngineMatchesAFloat64ForwardPass) {
  const std::string path =
      ::testing::TempDir() + "/ref_" + GetParam() + "_" + std::to_string(::getpid()) + ".gguf";
  SyntheticOptions o;
  o.type = TensorType::kF32;
  o.seed = 11;
  ASSERT_TRUE(WriteSyntheticModel(*FindModelShape(GetParam()), o, path).ok());
  auto src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok()) << src.status();
  if (GetParam() == "tiny-qwen2") {
    EXPECT_TRUE((*src)->config().qkv_bias);
    EXPECT_TRUE((*src)->config().tied_embeddings);
    EXPECT_EQ((*src)->config().rope_layout, RopeLayout::kHalves);
  }
  const std::vector<int32_t> ids = {1, 17, 300, 42, 7, 511, 2, 99};
  const std::vector<Vec> want = Reference(**src, ids);
  auto stage = Stage::Create(**src, {});
  ASSERT_TRUE(stage.ok());
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.push_back({ids[i], 0, static_cast<int32_t>(i), true});
  std::vector<float> got;
  ASSERT_TRUE((*stage)->Forward(b, {}, &got).ok());
  const int64_t V = (*src)->config().vocab_size;
  double max_diff = 0, max_abs = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t v = 0; v < V; ++v) {
      max_diff = std::max(max_diff, std::fabs(got[t * V + v] - want[t][v]));
      max_abs = std::max(max_abs, std::fabs(want[t][v]));
    }
  }
  EXPECT_GT(max_abs, 0.1);  // the logits are not trivially small
  EXPECT_LT(max_diff, 1e-4) << GetParam();
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Architectures, ReferenceForward, ::testing::Values("tiny", "tiny-qwen2"));

}  // namespace
}  // namespace cascade
