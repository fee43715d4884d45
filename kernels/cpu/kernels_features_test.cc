// The operations some architectures add to the Llama block (BackendFeature): sliding-window
// attention on every CPU kernel table against float64, and attention's results bit for bit the same
// alone, in prompt tiles or over threads (batch invariance), with windows that begin inside a
// block, span several or fit in one, and AVX2 and AVX-512 agreeing.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels_test_util.h"

namespace cascade {
namespace {

using testing::AvailableIsas;
using testing::NormalizedError;
using testing::Random;

// float64 attention of query (n_ctx, q) of one sequence over positions [first, n_ctx).
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

TEST(AttentionFeatures, WindowsMatchReferenceAndAreBatchInvariant) {
  const int n_heads = 6, n_kv = 2, hd = 64, bs = 8, pool_blocks = 12;
  const int64_t pool = static_cast<int64_t>(pool_blocks) * bs * n_kv * hd;
  const auto k_pool = Random(pool, 31, 2.0f), v_pool = Random(pool, 32);
  const std::vector<int32_t> table = {9, 2, 11, 0, 7, 5, 4, 1, 3};
  const int nq = 40;  // the prompt's positions 0..39: tiles of 16, 16 and 8
  const int64_t q_floats = static_cast<int64_t>(n_heads) * hd;
  const auto q = Random(nq * q_floats, 33, 2.0f);
  for (const int32_t window : {5, 1, 8, 19, 0}) {
    std::map<CpuIsa, std::vector<float>> by_isa;
    for (CpuIsa isa : AvailableIsas()) {
      std::vector<float> alone(nq * q_floats), tiled(nq * q_floats);
      AttentionParams p{n_heads, n_kv, hd, 0.125f, bs, k_pool.data(), v_pool.data(), nullptr, 0};
      p.window = window;
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
      const std::string what = std::string(CpuIsaName(isa)) + ", window " + std::to_string(window);
      EXPECT_EQ(alone, tiled) << what;
      for (int i = 0; i < nq; ++i) {
        const AttentionQuery one{q.data() + i * q_floats, nullptr, table.data(), i + 1};
        EXPECT_LT(NormalizedError(alone.data() + i * q_floats,
                                  Reference(p, one, k_pool.data(), v_pool.data())),
                  1e-5)
            << what << ", position " << i;
      }
      by_isa[isa] = alone;
    }
    if (by_isa.count(CpuIsa::kAvx2) != 0 && by_isa.count(CpuIsa::kAvx512) != 0) {
      EXPECT_EQ(by_isa[CpuIsa::kAvx2], by_isa[CpuIsa::kAvx512]) << "window " << window;
    }
  }
}

}  // namespace
}  // namespace cascade
