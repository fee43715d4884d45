#include "kernels/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels_test_util.h"

namespace cascade {
namespace {

using testing::AvailableIsas;
using testing::Random;

TEST(CpuBackend, AttentionMatchesNaiveSoftmax) {
  const int n_heads = 4, n_kv = 2, hd = 16, bs = 4, ctx = 11;
  const int kv = n_kv * hd;
  const std::vector<int32_t> blocks = {5, 1, 3};  // scattered physical blocks
  auto k_pool = Random(8 * bs * kv, 1);
  auto v_pool = Random(8 * bs * kv, 2);
  auto q = Random(n_heads * hd, 3);
  for (CpuIsa isa : AvailableIsas()) {
    CpuBackendOptions opt;
    opt.max_isa = isa;
    CpuBackend be(opt);
    std::vector<float> out(n_heads * hd);
    AttentionQuery query{q.data(), out.data(), blocks.data(), ctx};
    AttentionParams p{n_heads, n_kv, hd, 0.25f, bs, k_pool.data(), v_pool.data(), &query, 1};
    be.Attention(p);
    for (int h = 0; h < n_heads; ++h) {
      const int kvh = h / (n_heads / n_kv);
      std::vector<double> s(ctx);
      double mx = -1e30;
      for (int t = 0; t < ctx; ++t) {
        const float* k = k_pool.data() + ((blocks[t / bs] * n_kv + kvh) * bs + t % bs) * hd;
        double d = 0;
        for (int e = 0; e < hd; ++e) d += q[h * hd + e] * static_cast<double>(k[e]);
        s[t] = d * 0.25;
        mx = std::max(mx, s[t]);
      }
      double sum = 0;
      for (auto& v : s) sum += (v = std::exp(v - mx));
      for (int e = 0; e < hd; ++e) {
        double want = 0;
        for (int t = 0; t < ctx; ++t) {
          want += s[t] / sum * v_pool[((blocks[t / bs] * n_kv + kvh) * bs + t % bs) * hd + e];
        }
        EXPECT_NEAR(out[h * hd + e], want, 1e-5) << be.name();
      }
    }
  }
}

TEST(CpuBackend, RopeRotatesPairsOfEitherLayout) {
  CpuBackend be({});
  const int hd = 8;
  std::vector<float> freq = {1.0f, 0.5f, 0.25f, 0.125f};
  for (RopeLayout layout : {RopeLayout::kAdjacentPairs, RopeLayout::kHalves}) {
    auto x = Random(hd, 9);
    auto orig = x;
    int32_t pos = 3;
    be.Rope(x.data(), &pos, 1, 1, hd, hd, layout, freq.data());
    for (int j = 0; j < 4; ++j) {
      const int a = layout == RopeLayout::kAdjacentPairs ? 2 * j : j;
      const int b = layout == RopeLayout::kAdjacentPairs ? 2 * j + 1 : j + 4;
      const double th = 3.0 * freq[j];
      EXPECT_NEAR(x[a], orig[a] * std::cos(th) - orig[b] * std::sin(th), 1e-6);
      EXPECT_NEAR(x[b], orig[a] * std::sin(th) + orig[b] * std::cos(th), 1e-6);
    }
  }
}

// Rope keeps a table of each position's angles: what it gives must not depend on what the
// table held before (a fresh backend, one that made the rows for other positions first, or
// for other frequencies), and a position past the table's reach or below zero is rotated
// all the same.
TEST(CpuBackend, RopeGivesTheSameBitsWhateverItsAngleTableHeld) {
  const int hd = 8, heads = 2;
  const std::vector<float> freq = {1.0f, 0.1f, 0.01f, 0.001f};
  const std::vector<float> other = {0.9f, 0.2f, 0.03f, 0.004f};
  const std::vector<int32_t> pos = {7, 0, 300, 7, 1 << 20, -2};
  const int64_t n = static_cast<int64_t>(pos.size());
  const auto input = Random(n * heads * hd, 4);
  auto rotate = [&](CpuBackend& be, const std::vector<float>& f, int64_t i) {
    std::vector<float> x(input.begin() + i * heads * hd, input.begin() + (i + 1) * heads * hd);
    be.Rope(x.data(), &pos[i], 1, heads, hd, hd, RopeLayout::kAdjacentPairs, f.data());
    return x;
  };
  for (int64_t i = 0; i < n; ++i) {
    CpuBackend fresh({});
    const std::vector<float> want = rotate(fresh, freq, i);
    // The rotation itself, against the angles in double.
    for (int h = 0; h < heads; ++h) {
      for (int j = 0; j < hd / 2; ++j) {
        const double th = static_cast<double>(pos[i]) * freq[j];
        const float x0 = input[(i * heads + h) * hd + 2 * j];
        const float x1 = input[(i * heads + h) * hd + 2 * j + 1];
        EXPECT_NEAR(want[h * hd + 2 * j], x0 * std::cos(th) - x1 * std::sin(th), 1e-5);
        EXPECT_NEAR(want[h * hd + 2 * j + 1], x0 * std::sin(th) + x1 * std::cos(th), 1e-5);
      }
    }
    // A backend whose table was filled by the whole batch, then by other frequencies.
    CpuBackend used({});
    std::vector<float> batch = input;
    used.Rope(batch.data(), pos.data(), n, heads, hd, hd, RopeLayout::kAdjacentPairs, freq.data());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), batch.begin() + i * heads * hd)) << i;
    rotate(used, other, i);
    EXPECT_EQ(rotate(used, freq, i), want) << i;
    CpuBackend switched({});
    rotate(switched, other, i);
    const std::vector<float> with_other = rotate(switched, other, i);
    EXPECT_EQ(rotate(switched, freq, i), want) << i;
    if (pos[i] != 0) {
      EXPECT_NE(with_other, want) << i;
    }
  }
}

TEST(CpuBackend, RmsNormAndSiluMul) {
  CpuBackend be({});
  auto x = Random(2 * 10, 4);
  auto w = Random(10, 5);
  std::vector<float> out(20);
  be.RmsNorm(x.data(), w.data(), 2, 10, 1e-5f, out.data());
  for (int i = 0; i < 2; ++i) {
    double ss = 0;
    for (int j = 0; j < 10; ++j) ss += x[i * 10 + j] * x[i * 10 + j];
    const double inv = 1.0 / std::sqrt(ss / 10 + 1e-5);
    for (int j = 0; j < 10; ++j) EXPECT_NEAR(out[i * 10 + j], x[i * 10 + j] * inv * w[j], 1e-5);
  }
  std::vector<float> g = {-2, 0, 3}, u = {1, 2, 0.5}, o(3);
  be.SiluMul(g.data(), u.data(), 3, o.data());
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(o[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
}

// Buffers of a huge page or more (the KV cache's pools) start on a 2 MiB boundary, so that
// the kernel can back them with transparent huge pages; every buffer comes zeroed.
TEST(CpuBackend, LargeBuffersAreHugePageAlignedAndAllAreZeroed) {
  CpuBackend be(CpuBackendOptions{});
  for (size_t bytes :
       {size_t{100}, size_t{4096} + 3, cpu::kHugePageBytes, 3 * cpu::kHugePageBytes + 17}) {
    absl::StatusOr<DeviceBuffer> b = be.Allocate(bytes);
    ASSERT_TRUE(b.ok()) << b.status();
    const auto addr = reinterpret_cast<uintptr_t>(b->data());
    EXPECT_EQ(addr % 64, 0u) << bytes;
    if (bytes >= cpu::kHugePageBytes) {
      EXPECT_EQ(addr % cpu::kHugePageBytes, 0u) << bytes;
    }
    const auto* p = static_cast<const uint8_t*>(b->data());
    EXPECT_TRUE(std::all_of(p, p + bytes, [](uint8_t c) { return c == 0; })) << bytes;
  }
}

// Resident bytes of this process (/proc/self/statm's second field, in pages).
uint64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// A large buffer (a KV cache's pool sized for many sequences) costs memory only as it is
// written: allocating it does not make it resident.
TEST(CpuBackend, ALargeBufferIsResidentOnlyOnceWritten) {
  CpuBackend be(CpuBackendOptions{});
  constexpr size_t kBytes = size_t{256} << 20;
  const uint64_t before = ResidentBytes();
  absl::StatusOr<DeviceBuffer> b = be.Allocate(kBytes);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_LT(ResidentBytes(), before + (kBytes / 8));
  std::memset(b->data(), 1, kBytes / 2);  // written: now it is
  EXPECT_GE(ResidentBytes(), before + kBytes / 2 - (size_t{8} << 20));
}

}  // namespace
}  // namespace cascade
