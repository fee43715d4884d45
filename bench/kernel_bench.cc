// kernel_bench: Google Benchmark micro-benchmarks of the CPU matmul kernels, per weight
// type, at n = 1 (decode: bound by weight bandwidth) and n = 128 (prefill: bound by
// arithmetic), with 1 and 2 threads: n = 1 on a TinyLlama output-head-shaped weight (32000
// rows of 2048, larger than L3, so it streams from memory), n = 2, 4 and 128 on an
// FFN-shaped one (5632 rows of 2048).
//
//   kernel_bench [--benchmark_filter=Q4_K] [--benchmark_min_time=0.2]
//
// bytes_per_second counts weight bytes (what decode streams); the "GFLOPS" counter counts
// 2 * rows * cols * n per matmul. CASCADE_CPU_ISA=scalar measures the portable path.
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/quant.h"

namespace cascade {
namespace {

constexpr int64_t kCols = 2048;

struct Weight {
  std::vector<uint8_t> bytes;
  TensorView view;
};

const Weight& GetWeight(TensorType type, int64_t rows) {
  // Made once per (type, rows) and kept for the whole run.
  static std::map<std::pair<TensorType, int64_t>, std::unique_ptr<Weight>> cache;
  std::unique_ptr<Weight>& slot = cache[{type, rows}];
  if (slot) return *slot;
  slot = std::make_unique<Weight>();
  Weight* w = slot.get();
  uint64_t rb = 0;
  if (!RowBytes(type, kCols, &rb)) std::abort();
  w->bytes.resize(rb * rows);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(kCols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    QuantizeRow(type, row.data(), kCols, w->bytes.data() + r * rb);
  }
  w->view.name = "bench";
  w->view.type = type;
  w->view.n_dims = 2;
  w->view.ne[0] = kCols;
  w->view.ne[1] = rows;
  w->view.data = w->bytes.data();
  w->view.nbytes = w->bytes.size();
  return *w;
}

void BM_MatMul(benchmark::State& state, TensorType type, bool quantized_act) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const int64_t rows = n == 1 ? 32000 : 5632;
  const Weight& w = GetWeight(type, rows);
  CpuBackendOptions opt;
  opt.threads = threads;
  opt.quantized_activations = quantized_act;
  CpuBackend be(opt);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n * kCols), y(n * rows);
  for (auto& v : x) v = dist(rng);
  for (auto _ : state) {
    be.MatMul(w.view, x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(w.bytes.size()));
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * rows * kCols * n * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
  state.SetLabel(be.name());
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int n : {1, 2, 4, 128}) b->Args({n, threads});
  }
  b->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_MatMul, F32, TensorType::kF32, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, F16, TensorType::kF16, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, BF16, TensorType::kBF16, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q8_0, TensorType::kQ8_0, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q4_0, TensorType::kQ4_0, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q4_K, TensorType::kQ4_K, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q5_K, TensorType::kQ5_K, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q6_K, TensorType::kQ6_K, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q4_K_exact, TensorType::kQ4_K, false)->Apply(Args);

}  // namespace
}  // namespace cascade

BENCHMARK_MAIN();
