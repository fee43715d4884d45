// GPU tests (ctest label "gpu"): the CUDA backend against the CPU backend. They skip
// themselves, saying so, on machines without a CUDA device.
#include "kernels/cuda/cuda_backend.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/gpu_test_util.h"
#include "tensor/quant.h"

namespace cascade {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct DeviceArray {
  DeviceBuffer buf;
  float* get() { return buf.as<float>(); }
};

DeviceArray Upload(Backend& be, const std::vector<float>& v) {
  DeviceArray a{std::move(*be.Allocate(v.size() * 4))};
  be.CopyToDevice(a.buf.data(), v.data(), v.size() * 4);
  return a;
}

std::vector<float> Download(Backend& be, DeviceArray& a, size_t n) {
  std::vector<float> out(n);
  be.CopyToHost(out.data(), a.buf.data(), n * 4);
  return out;
}

TEST(CudaBackend, MatMulMatchesCpuForEveryTypeAndIsBatchInvariant) {
  REQUIRE_GPU();
  auto gpu = CudaBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CpuBackendOptions co;
  co.quantized_activations = false;
  CpuBackend cpu(co);
  for (TensorType type :
       {TensorType::kF32, TensorType::kF16, TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0,
        TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    const int64_t rows = 70, cols = 512, n = 9;
    auto f = Random(rows * cols, 1);
    uint64_t rb = 0;
    ASSERT_TRUE(RowBytes(type, cols, &rb));
    std::vector<uint8_t> bytes(rb * rows);
    for (int64_t r = 0; r < rows; ++r)
      QuantizeRow(type, f.data() + r * cols, cols, bytes.data() + r * rb);
    TensorView host;
    host.type = type;
    host.n_dims = 2;
    host.ne[0] = cols;
    host.ne[1] = rows;
    host.data = bytes.data();
    host.nbytes = bytes.size();
    auto dev = (*gpu)->UploadWeight(host);
    ASSERT_TRUE(dev.ok());
    auto x = Random(n * cols, 2);
    std::vector<float> want(n * rows);
    cpu.MatMul(host, x.data(), n, want.data());
    auto dx = Upload(**gpu, x);
    DeviceArray dy{std::move(*(*gpu)->Allocate(n * rows * 4))};
    (*gpu)->MatMul(*dev, dx.get(), n, dy.get());
    auto got = Download(**gpu, dy, n * rows);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-3 * (1 + std::fabs(want[i]))) << TensorTypeName(type);
    }
    // Row 5 alone gives the same bits as within the batch.
    auto dx1 = Upload(**gpu, std::vector<float>(x.begin() + 5 * cols, x.begin() + 6 * cols));
    DeviceArray dy1{std::move(*(*gpu)->Allocate(rows * 4))};
    (*gpu)->MatMul(*dev, dx1.get(), 1, dy1.get());
    auto one = Download(**gpu, dy1, rows);
    EXPECT_EQ(std::memcmp(one.data(), got.data() + 5 * rows, rows * 4), 0) << TensorTypeName(type);
  }
  EXPECT_TRUE((*gpu)->Health().ok());
}

TEST(CudaBackend, NormRopeAttentionMatchCpu) {
  REQUIRE_GPU();
  auto gpu = CudaBackend::Create({});
  ASSERT_TRUE(gpu.ok());
  CpuBackend cpu({});
  const int n_heads = 4, n_kv = 2, hd = 32, bs = 4, ctx = 10;
  auto x = Random(3 * n_heads * hd, 3);
  auto w = Random(n_heads * hd, 4);
  std::vector<float> want(x.size());
  cpu.RmsNorm(x.data(), w.data(), 3, n_heads * hd, 1e-5f, want.data());
  auto dx = Upload(**gpu, x), dw = Upload(**gpu, w);
  (*gpu)->RmsNorm(dx.get(), dw.get(), 3, n_heads * hd, 1e-5f, dx.get());
  auto got = Download(**gpu, dx, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5);

  std::vector<float> freq = {1.0f,  0.3f,  0.1f,  0.03f, 0.01f, 0.003f, 0.001f, 0.0003f,
                             1e-4f, 3e-5f, 1e-5f, 3e-6f, 1e-6f, 3e-7f,  1e-7f,  3e-8f};
  std::vector<int32_t> pos = {0, 7, 300};
  for (RopeLayout layout : {RopeLayout::kAdjacentPairs, RopeLayout::kHalves}) {
    auto r = x;
    cpu.Rope(r.data(), pos.data(), 3, n_heads, hd, hd, layout, freq.data());
    auto dr = Upload(**gpu, x);
    (*gpu)->Rope(dr.get(), pos.data(), 3, n_heads, hd, hd, layout, freq.data());
    auto gr = Download(**gpu, dr, x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(gr[i], r[i], 1e-5);
  }

  const std::vector<int32_t> blocks = {2, 0, 5};
  auto kp = Random(8 * bs * n_kv * hd, 5), vp = Random(8 * bs * n_kv * hd, 6);
  auto q = Random(n_heads * hd, 7);
  std::vector<float> out(n_heads * hd);
  AttentionQuery cq{q.data(), out.data(), blocks.data(), ctx};
  cpu.Attention({n_heads, n_kv, hd, 0.2f, bs, kp.data(), vp.data(), &cq, 1});
  auto dk = Upload(**gpu, kp), dv = Upload(**gpu, vp), dq = Upload(**gpu, q);
  DeviceArray dout{std::move(*(*gpu)->Allocate(out.size() * 4))};
  AttentionQuery gq{dq.get(), dout.get(), blocks.data(), ctx};
  (*gpu)->Attention({n_heads, n_kv, hd, 0.2f, bs, dk.get(), dv.get(), &gq, 1});
  auto gout = Download(**gpu, dout, out.size());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(gout[i], out[i], 1e-5);
  EXPECT_TRUE((*gpu)->Health().ok());
}

// An F16 KV cache on the GPU: StoreKv rounds as the CPU does (the same halves, bit for
// bit), and attention over it matches the CPU's over the same cache.
TEST(CudaBackend, F16KvCacheMatchesCpu) {
  REQUIRE_GPU();
  auto gpu = CudaBackend::Create({});
  ASSERT_TRUE(gpu.ok());
  CpuBackend cpu({});
  const int n_heads = 8, n_kv = 2, hd = 64, bs = 16, ctx = 37;
  const int64_t kv = n_kv * hd, rows = 4 * bs;
  const auto k = Random(rows * kv, 11), v = Random(rows * kv, 12);
  std::vector<int64_t> slots(rows);
  for (int64_t i = 0; i < rows; ++i) slots[i] = (i * 5) % rows;
  std::vector<uint16_t> ck(rows * kv), cv(rows * kv);
  const KvLayout layout{n_kv, hd, bs, TensorType::kF16};
  cpu.StoreKv(k.data(), v.data(), slots.data(), rows, layout, ck.data(), cv.data());
  auto dk = Upload(**gpu, k), dv = Upload(**gpu, v);
  DeviceArray gk{std::move(*(*gpu)->Allocate(ck.size() * 2))};
  DeviceArray gv{std::move(*(*gpu)->Allocate(cv.size() * 2))};
  (*gpu)->StoreKv(dk.get(), dv.get(), slots.data(), rows, layout, gk.get(), gv.get());
  std::vector<uint16_t> hk(ck.size()), hv(cv.size());
  (*gpu)->CopyToHost(hk.data(), gk.get(), hk.size() * 2);
  (*gpu)->CopyToHost(hv.data(), gv.get(), hv.size() * 2);
  EXPECT_EQ(hk, ck);
  EXPECT_EQ(hv, cv);

  const std::vector<int32_t> blocks = {3, 1, 0};
  auto q = Random(n_heads * hd, 13);
  std::vector<float> out(n_heads * hd);
  AttentionQuery cq{q.data(), out.data(), blocks.data(), ctx};
  AttentionParams cp{n_heads, n_kv, hd, 0.125f, bs, ck.data(), cv.data(), &cq, 1};
  cp.kv_type = TensorType::kF16;
  cpu.Attention(cp);
  auto dq = Upload(**gpu, q);
  DeviceArray dout{std::move(*(*gpu)->Allocate(out.size() * 4))};
  AttentionQuery gq{dq.get(), dout.get(), blocks.data(), ctx};
  AttentionParams gp{n_heads, n_kv, hd, 0.125f, bs, gk.get(), gv.get(), &gq, 1};
  gp.kv_type = TensorType::kF16;
  (*gpu)->Attention(gp);
  auto gout = Download(**gpu, dout, out.size());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(gout[i], out[i], 1e-5);
  EXPECT_TRUE((*gpu)->Health().ok());
}

// The optional features are not implemented on CUDA: Supports says so (a stage refuses the
// model), and asking for one leaves an error naming it instead of a result.
TEST(CudaBackend, RefusesTheFeaturesItLacksNamingThem) {
  REQUIRE_GPU();
  for (BackendFeature f :
       {BackendFeature::kSlidingWindow, BackendFeature::kAttentionSoftCap, BackendFeature::kGeluMul,
        BackendFeature::kScale, BackendFeature::kSoftCap}) {
    auto gpu = CudaBackend::Create({});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_FALSE((*gpu)->Supports(f)) << BackendFeatureName(f);
    auto x = Upload(**gpu, Random(64, 3));
    AttentionParams p;
    switch (f) {
      case BackendFeature::kSlidingWindow:
        p.window = 4;
        (*gpu)->Attention(p);
        break;
      case BackendFeature::kAttentionSoftCap:
        p.softcap = 50;
        (*gpu)->Attention(p);
        break;
      case BackendFeature::kGeluMul:
        (*gpu)->GeluMul(x.get(), x.get(), 64, x.get());
        break;
      case BackendFeature::kScale:
        (*gpu)->Scale(x.get(), 64, 2.0f);
        break;
      case BackendFeature::kSoftCap:
        (*gpu)->SoftCap(x.get(), 64, 30.0f);
        break;
      case BackendFeature::kMixtureOfExperts:  // no op of its own: see the test below
        break;
    }
    const absl::Status health = (*gpu)->Health();
    EXPECT_EQ(health.code(), absl::StatusCode::kUnimplemented) << BackendFeatureName(f);
    EXPECT_NE(health.message().find(BackendFeatureName(f)), std::string::npos) << health;
  }
}

// Mixtures of experts are not declared: a stage refuses such a model at Create, naming
// "mixture-of-experts routing" (engine/arch_models_test.cc checks the refusal itself).
TEST(CudaBackend, DoesNotDeclareMixturesOfExperts) {
  REQUIRE_GPU();
  auto gpu = CudaBackend::Create({});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_FALSE((*gpu)->Supports(BackendFeature::kMixtureOfExperts));
}

}  // namespace
}  // namespace cascade
