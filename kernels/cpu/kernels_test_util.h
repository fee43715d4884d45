// Helpers shared by the CPU kernel tests: random inputs, weight matrices of any type with
// their exact dequantized values, the ISAs this machine can run, and the normalized error
// ||got - want||_2 / ||want||_2 the tests state their bounds in.
//
// Contract: test-only (GoogleTest assertions; include from *_test.cc files). Everything is
// deterministic by seed.
#ifndef CASCADE_KERNELS_CPU_KERNELS_TEST_UTIL_H_
#define CASCADE_KERNELS_CPU_KERNELS_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "tensor/quant.h"

namespace cascade::testing {

inline std::vector<float> Random(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Scalar always, AVX2 and AVX-512 when the CPU has them.
inline std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> isas = {CpuIsa::kScalar};
  if (DetectCpuFeatures().best() >= CpuIsa::kAvx2) isas.push_back(CpuIsa::kAvx2);
  if (DetectCpuFeatures().best() >= CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  return isas;
}

// Over want.size() values of got.
inline double NormalizedError(const float* got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

// A (rows, cols) weight matrix of `type` quantized from random floats, with its exact
// dequantized values.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> dequant;  // (rows, cols)
  TensorView view;
};

inline TestWeight MakeWeight(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  TestWeight w;
  const auto f = Random(rows * cols, seed, 0.5f);
  uint64_t rb = 0;
  EXPECT_TRUE(RowBytes(type, cols, &rb));
  w.bytes.resize(rb * rows);
  w.dequant.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(QuantizeRow(type, f.data() + r * cols, cols, w.bytes.data() + r * rb));
    EXPECT_TRUE(DequantizeRow(type, w.bytes.data() + r * rb, cols, w.dequant.data() + r * cols));
  }
  w.view.name = std::string(1, 'w');  // (gcc 12 warns falsely on = "w": PR105329)
  w.view.type = type;
  w.view.n_dims = 2;
  w.view.ne[0] = cols;
  w.view.ne[1] = rows;
  w.view.data = w.bytes.data();
  w.view.nbytes = w.bytes.size();
  return w;
}

}  // namespace cascade::testing

#endif  // CASCADE_KERNELS_CPU_KERNELS_TEST_UTIL_H_
