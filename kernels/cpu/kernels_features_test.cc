// The operations some architectures add to the Llama block (BackendFeature): sliding-window
// and soft-capped attention, GeluMul, Scale and SoftCap, on every CPU kernel table against
// float64, and attention's results bit for bit the same alone, in prompt tiles or over
// threads (batch invariance), with windows that begin inside a block, span several or
// fit in one, F32 and F16 caches, and AVX2 and AVX-512 agreeing.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels_test_util.h"
#include "util/fp16.h"

namespace cascade {
namespace {

using testing::AvailableIsas;
using testing::NormalizedError;
using testing::Random;

struct AttentionCase {
  int32_t window;
  float softcap;
};

// float64 attention of query (n_ctx, q) of one sequence over positions [first, n_ctx) of
// F32 pools (an F16 cache's values widened).
std::vector<double> Reference(const AttentionParams& p, const AttentionQuery& q,
                              const float* k_pool, const float* v_pool) {
  const int group = p.n_heads / p.n_kv_heads;
  std::vector<double> out(static_cast<size_t>(p.n_heads) * p.head_dim, 0.0);
  const int32_t first = p.first_position(q);
  auto row = [&](const float* pool, int kvh, int32_t t) {
    return pool +
           ((q.blocks[t / p.block_size] * p.n_kv_heads + kvh) * p.block_size + t % p.block_size) *
               p.head_dim;
  };
  for (int h = 0; h < p.n_heads; ++h) {
    const int kvh = h / group;
    std::vector<double> s(q.n_ctx - first);
    double mx = -1e300;
    for (int32_t t = first; t < q.n_ctx; ++t) {
      double d = 0;
      for (int e = 0; e < p.head_dim; ++e)
        d += static_cast<double>(q.q[h * p.head_dim + e]) * row(k_pool, kvh, t)[e];
      d *= p.scale;
      if (p.softcap > 0) d = p.softcap * std::tanh(d / p.softcap);
      s[t - first] = d;
      mx = std::max(mx, d);
    }
    double sum = 0;
    for (double& v : s) sum += (v = std::exp(v - mx));
    for (int32_t t = first; t < q.n_ctx; ++t) {
      for (int e = 0; e < p.head_dim; ++e) {
        out[h * p.head_dim + e] += s[t - first] / sum * row(v_pool, kvh, t)[e];
      }
    }
  }
  return out;
}

TEST(AttentionFeatures, WindowsAndSoftCapsMatchReferenceAndAreBatchInvariant) {
  const int n_heads = 6, n_kv = 2, hd = 64, bs = 8, pool_blocks = 12;
  const int64_t pool = static_cast<int64_t>(pool_blocks) * bs * n_kv * hd;
  const auto k_pool = Random(pool, 31, 2.0f), v_pool = Random(pool, 32);
  const std::vector<int32_t> table = {9, 2, 11, 0, 7, 5, 4, 1, 3};
  const int nq = 40;  // the prompt's positions 0..39: tiles of 16, 16 and 8
  const int64_t q_floats = static_cast<int64_t>(n_heads) * hd;
  const auto q = Random(nq * q_floats, 33, 2.0f);
  // An F16 cache of the same values, and those values widened back (its reference).
  std::vector<uint16_t> k16(pool), v16(pool);
  std::vector<float> k_wide(pool), v_wide(pool);
  for (int64_t i = 0; i < pool; ++i) {
    k16[i] = FloatToFp16(k_pool[i]);
    v16[i] = FloatToFp16(v_pool[i]);
    k_wide[i] = Fp16ToFloat(k16[i]);
    v_wide[i] = Fp16ToFloat(v16[i]);
  }
  for (const auto& [c, type] : {std::pair{AttentionCase{5, 0}, TensorType::kF32},
                                {AttentionCase{1, 0}, TensorType::kF32},
                                {AttentionCase{8, 1.5f}, TensorType::kF32},
                                {AttentionCase{19, 0}, TensorType::kF32},
                                {AttentionCase{0, 1.5f}, TensorType::kF32},
                                {AttentionCase{5, 0}, TensorType::kF16},
                                {AttentionCase{11, 1.5f}, TensorType::kF16}}) {
    const bool f16 = type == TensorType::kF16;
    std::map<CpuIsa, std::vector<float>> by_isa;
    for (CpuIsa isa : AvailableIsas()) {
      std::vector<float> alone(nq * q_floats), tiled(nq * q_floats);
      AttentionParams p{n_heads,
                        n_kv,
                        hd,
                        0.125f,
                        bs,
                        f16 ? static_cast<const void*>(k16.data()) : k_pool.data(),
                        f16 ? static_cast<const void*>(v16.data()) : v_pool.data(),
                        nullptr,
                        0};
      p.kv_type = type;
      p.window = c.window;
      p.softcap = c.softcap;
      for (int threads : {1, 2}) {
        CpuBackendOptions opt;
        opt.max_isa = isa;
        opt.threads = threads;
        CpuBackend be(opt);
        std::vector<float>& out = threads == 1 ? alone : tiled;
        std::vector<AttentionQuery> qs;
        for (int i = 0; i < nq; ++i) {
          qs.push_back({q.data() + i * q_floats, out.data() + i * q_floats, table.data(), i + 1});
        }
        if (threads == 1) {
          for (const AttentionQuery& one : qs) {
            p.queries = &one;
            p.n_queries = 1;
            be.Attention(p);
          }
        } else {
          p.queries = qs.data();
          p.n_queries = nq;
          be.Attention(p);
        }
      }
      const std::string what = std::string(CpuIsaName(isa)) + ", window " +
                               std::to_string(c.window) + ", soft-cap " +
                               std::to_string(c.softcap) + ", " + TensorTypeName(type);
      EXPECT_EQ(alone, tiled) << what;
      for (int i = 0; i < nq; ++i) {
        const AttentionQuery one{q.data() + i * q_floats, nullptr, table.data(), i + 1};
        EXPECT_LT(NormalizedError(alone.data() + i * q_floats,
                                  Reference(p, one, f16 ? k_wide.data() : k_pool.data(),
                                            f16 ? v_wide.data() : v_pool.data())),
                  1e-5)
            << what << ", position " << i;
      }
      by_isa[isa] = alone;
    }
    if (by_isa.count(CpuIsa::kAvx2) != 0 && by_isa.count(CpuIsa::kAvx512) != 0) {
      EXPECT_EQ(by_isa[CpuIsa::kAvx2], by_isa[CpuIsa::kAvx512]) << "window " << c.window;
    }
  }
}

TEST(ElementwiseFeatures, GeluMulScaleAndSoftCapMatchReferenceOnEveryPath) {
  std::vector<float> g;
  for (float v = -30.0f; v <= 30.0f; v += 0.173f) g.push_back(v);
  g.push_back(0.0f);
  const int64_t n = static_cast<int64_t>(g.size());
  const auto up = Random(n, 41);
  for (CpuIsa isa : AvailableIsas()) {
    CpuBackendOptions opt;
    opt.max_isa = isa;
    CpuBackend be(opt);
    ASSERT_TRUE(be.Supports(BackendFeature::kGeluMul));
    std::vector<float> out(n);
    be.GeluMul(g.data(), up.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double x = g[i];
      // 0.5 x (1 + tanh(u)) as x / (1 + exp(-2u)): no cancellation where tanh(u) is near -1.
      const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
      const double gelu = x / (1 + std::exp(-2 * u));
      // Relative: a few ulp of the float exponent -2u, which grows with |u| in the tail.
      EXPECT_NEAR(out[i], gelu * up[i], 1e-6 * (1 + std::fabs(u)) * std::fabs(gelu * up[i]) + 1e-30)
          << x << " " << CpuIsaName(isa);
    }
    auto s = g;
    be.Scale(s.data(), n, 8.0f);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(s[i], g[i] * 8.0f);
    auto c = g;
    be.SoftCap(c.data(), n, 3.0f);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(c[i], 3.0 * std::tanh(g[i] / 3.0), 1e-6);
  }
}

}  // namespace
}  // namespace cascade
