// kernel_bench: Google Benchmark micro-benchmarks of the CPU matmul kernels, per weight
// type, at n = 1 (decode: bound by weight bandwidth) and n = 128 (prefill: bound by
// arithmetic), with 1 and 2 threads: n = 1 on a TinyLlama output-head-shaped weight (32000
// rows of 2048, larger than L3, so it streams from memory), n = 2 to 16 (the micro-batches
// of a pipeline stage or a batched decode) and 128 on an FFN-shaped one (5632 rows of 2048).
//
//   kernel_bench [--benchmark_filter=Q4_K] [--benchmark_min_time=0.2]
//
// The weights go through CpuBackend::UploadWeight as a model's do (copied into huge pages,
// Q8_0 / Q4_0 regrouped where the CPU has the kernel for it; CASCADE_COPY_WEIGHTS=0 uses
// them in place, in the file's layout).
//
// bytes_per_second counts weight bytes (what decode streams); the "GFLOPS" counter counts
// 2 * rows * cols * n per matmul. CASCADE_CPU_ISA=scalar measures the portable path.
//
// BM_Attention measures the paged-KV attention kernel the same way (see there); with
// CASCADE_CPU_ISA=avx2 against the AVX-512 one on the same machine.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench/read_rate.h"
#include "benchmark/benchmark.h"
#include "kernels/cpu/cpu_backend.h"
#include "tensor/quant.h"
#include "tensor/tensor_type.h"
#include "util/fp16.h"
#include "util/thread_pool.h"

namespace cascade {
namespace {

constexpr int64_t kCols = 2048;

struct Weight {
  std::vector<uint8_t> bytes;
  TensorView view;
};

const Weight& GetWeight(TensorType type, int64_t rows, int64_t cols = kCols) {
  // Made once per (type, rows, cols) and kept for the whole run.
  static std::map<std::tuple<TensorType, int64_t, int64_t>, std::unique_ptr<Weight>> cache;
  std::unique_ptr<Weight>& slot = cache[{type, rows, cols}];
  if (slot) return *slot;
  slot = std::make_unique<Weight>();
  Weight* w = slot.get();
  uint64_t rb = 0;
  if (!RowBytes(type, cols, &rb)) std::abort();
  w->bytes.resize(rb * rows);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    QuantizeRow(type, row.data(), cols, w->bytes.data() + r * rb);
  }
  w->view.name = "bench";
  w->view.type = type;
  w->view.n_dims = 2;
  w->view.ne[0] = cols;
  w->view.ne[1] = rows;
  w->view.data = w->bytes.data();
  w->view.nbytes = w->bytes.size();
  return *w;
}

// y = W x for n activation rows of W's width; reports GFLOP/s and weight bytes/s.
void RunMatMul(benchmark::State& state, const Weight& w, int64_t n, int threads,
               bool quantized_act) {
  const int64_t rows = w.view.ne[1], cols = w.view.ne[0];
  CpuBackendOptions opt;
  opt.threads = threads;
  opt.quantized_activations = quantized_act;
  // CASCADE_COPY_WEIGHTS=0: the weights used in place, as the file lays them out.
  const char* copy = std::getenv("CASCADE_COPY_WEIGHTS");
  opt.copy_weights = copy == nullptr || std::string(copy) != "0";
  CpuBackend be(opt);
  const absl::StatusOr<TensorView> view = be.UploadWeight(w.view);
  if (!view.ok()) {
    state.SkipWithError(std::string(view.status().message()).c_str());
    return;
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n * cols), y(n * rows);
  for (auto& v : x) v = dist(rng);
  for (auto _ : state) {
    be.MatMul(*view, x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(w.bytes.size()));
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * rows * cols * n * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
  state.SetLabel(be.name() + (view->layout == WeightLayout::kRowGroups16 ? ", grouped" : ""));
}

void BM_MatMul(benchmark::State& state, TensorType type, bool quantized_act) {
  const int64_t n = state.range(0);
  const int64_t rows = n == 1 ? 32000 : 5632;
  RunMatMul(state, GetWeight(type, rows), n, static_cast<int>(state.range(1)), quantized_act);
}

// The four matmul shapes of a TinyLlama-1.1B layer at prefill (128 tokens): attention
// q/o (2048 x 2048), k/v (256 x 2048), FFN gate/up (5632 x 2048) and down (2048 x 5632).
void BM_PrefillShape(benchmark::State& state, TensorType type) {
  const Weight& w = GetWeight(type, state.range(0), state.range(1));
  RunMatMul(state, w, 128, static_cast<int>(state.range(2)), true);
}

void ShapeArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (auto [rows, cols] :
         {std::pair<int, int>{2048, 2048}, {256, 2048}, {5632, 2048}, {2048, 5632}}) {
      b->Args({rows, cols, threads});
    }
  }
  b->ArgNames({"rows", "cols", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

// The core's float FMA peak: 12 independent FMA chains (enough to cover the FMA latency
// on two pipes) of 8-wide (bits:256, the AVX2 kernels) or 16-wide vectors (bits:512, the
// AVX-512 GEMM; twice the 256-bit peak where the core has 512-bit FMA units, as Zen 5, the
// same where it splits them, as Zen 4), so GEMM figures can be read as a fraction of the
// machine's peak measured in the same run (virtual machines drift by 10-20% between runs).
#if defined(__x86_64__)
constexpr int64_t kFmaIters = 1 << 20;
void SetFmaRate(benchmark::State& state, int lanes) {
  state.counters["GFLOPS"] = benchmark::Counter(
      2.0 * lanes * 12 * kFmaIters * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
__attribute__((target("avx2,fma"))) void FmaPeak256(benchmark::State& state) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(0.01f * static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
  for (auto _ : state) {
    for (int64_t i = 0; i < kFmaIters; ++i) {
#pragma GCC unroll 12
      for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);  // in registers
    }
    for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(a[i]);
  }
  SetFmaRate(state, 8);
}
__attribute__((target("avx512f"))) void FmaPeak512(benchmark::State& state) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.01f * static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
  for (auto _ : state) {
    for (int64_t i = 0; i < kFmaIters; ++i) {
#pragma GCC unroll 12
      for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
    }
    for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(a[i]);
  }
  SetFmaRate(state, 16);
}
void BM_FmaPeak(benchmark::State& state) {
  if (state.range(0) == 512) {
    if (!DetectCpuFeatures().avx512f) {
      state.SkipWithError("no AVX-512 on this CPU");
      return;
    }
    FmaPeak512(state);
  } else {
    FmaPeak256(state);
  }
}
BENCHMARK(BM_FmaPeak)->ArgName("bits")->Arg(256)->Arg(512)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

// Attention over the paged KV cache with TinyLlama-1.1B's heads (32 query heads of 64,
// sharing 4 KV heads: group 8) or, with group = 1, llama-110m's (12 heads of 64, no GQA),
// KV blocks of `block` positions (the engine's default and larger), over 22 layers' pools so the
// K/V rows come from memory as in a real step (each layer's pool is read once per step, after the
// weights have gone through the caches): `streams` queries each attending to `ctx`
// positions (a batched decode step), or with streams = 0 one sequence's `ctx`-token prompt
// (causal prefill: query i attends to i + 1 positions). Blocks are handed out in a
// shuffled order, as an allocator serving many sequences does. bytes_per_second counts
// the K and V bytes a step reads once (compare with engine_bench's read rate); GFLOPS
// counts 4 * heads * head_dim per (query, position). kv_bits: an F32 (32) or F16 (16)
// cache.
void BM_Attention(benchmark::State& state) {
  constexpr int kHeadDim = 64, kLayers = 22;
  const int block = static_cast<int>(state.range(4));
  const int64_t streams = state.range(0), ctx = state.range(1);
  const bool mha = state.range(3) == 1;
  const int heads = mha ? 12 : 32, kv_heads = mha ? 12 : 4;
  const bool prefill = streams == 0;
  const int64_t sequences = prefill ? 1 : streams;
  const int64_t queries = prefill ? ctx : streams;
  const int64_t blocks_per_seq = (ctx + block - 1) / block;
  const int64_t num_blocks = sequences * blocks_per_seq;
  const int64_t kv_dim = kv_heads * kHeadDim;
  CpuBackendOptions opt;
  opt.threads = static_cast<int>(state.range(2));
  const TensorType kv_type = state.range(5) == 16 ? TensorType::kF16 : TensorType::kF32;
  const size_t elem = KvElementBytes(kv_type);
  CpuBackend be(opt);
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<int32_t> order(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  // One K and one V allocation for all layers, as KvCache holds them.
  const size_t pool_floats = static_cast<size_t>(num_blocks) * block * kv_dim;
  const size_t layer_bytes = pool_floats * elem;
  DeviceBuffer k, v;
  for (DeviceBuffer* b : {&k, &v}) {
    absl::StatusOr<DeviceBuffer> got = be.Allocate(kLayers * layer_bytes);
    if (!got.ok()) std::abort();
    *b = std::move(*got);
    for (size_t i = 0; i < kLayers * pool_floats; ++i) {
      if (kv_type == TensorType::kF16) {
        static_cast<uint16_t*>(b->data())[i] = FloatToFp16(dist(rng));
      } else {
        static_cast<float*>(b->data())[i] = dist(rng);
      }
    }
  }
  std::vector<float> q(queries * heads * kHeadDim), out(q.size());
  for (auto& x : q) x = dist(rng);
  std::vector<AttentionQuery> aq(queries);
  int64_t positions = 0;
  for (int64_t i = 0; i < queries; ++i) {
    const int64_t seq = prefill ? 0 : i;
    aq[i].q = q.data() + i * heads * kHeadDim;
    aq[i].out = out.data() + i * heads * kHeadDim;
    aq[i].blocks = order.data() + seq * blocks_per_seq;
    aq[i].n_ctx = static_cast<int32_t>(prefill ? i + 1 : ctx);
    positions += aq[i].n_ctx;
  }
  AttentionParams p;
  p.n_heads = heads;
  p.n_kv_heads = kv_heads;
  p.head_dim = kHeadDim;
  p.scale = 0.125f;
  p.block_size = block;
  p.kv_type = kv_type;
  p.queries = aq.data();
  p.n_queries = queries;
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      p.k_pool = static_cast<char*>(k.data()) + l * layer_bytes;
      p.v_pool = static_cast<char*>(v.data()) + l * layer_bytes;
      be.Attention(p);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(
      static_cast<int64_t>(iters * kLayers * 2.0 * sequences * ctx * kv_dim * elem));
  state.counters["GFLOPS"] = benchmark::Counter(
      iters * kLayers * 4.0 * heads * kHeadDim * static_cast<double>(positions) / 1e9,
      benchmark::Counter::kIsRate);
  state.SetLabel(be.name());
}
BENCHMARK(BM_Attention)
    ->ArgsProduct({{1, 16}, {192}, {1, 2}, {8}, {16, 32, 64}, {32}})
    ->ArgsProduct({{0}, {128}, {1, 2}, {8, 1}, {16, 32}, {32}})
    ->ArgsProduct({{1, 16}, {192}, {1, 2}, {8}, {32}, {16}})
    ->ArgsProduct({{1, 16}, {1024}, {1, 2}, {8}, {32}, {32, 16}})
    ->ArgsProduct({{0}, {128}, {1, 2}, {8}, {32}, {16}})
    ->ArgsProduct({{0}, {512}, {1, 2}, {8}, {32}, {32, 16}})
    ->ArgsProduct({{16}, {1024}, {1, 2}, {1}, {32}, {16}})
    ->ArgsProduct({{0}, {512}, {1, 2}, {1}, {32}, {16}})
    ->ArgNames({"streams", "ctx", "threads", "group", "block", "kv_bits"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Decode's weight stream: the seven matmuls of each of `layers` llama layers of width
// `dim`, K/V width `kv` and FFN width `hidden` (llama-110m: 768 / 768 / 2048 x 12), for
// `tokens` tokens (1: one stream's step; 16: a step of 16 streams, as a server batches
// them), every layer its own copy of the weights: what a decode step reads but for the
// attention and the output head, the weights coming from memory, not the cache.
// bytes_per_second counts the weights; BM_ReadRate in the same run is the memory's plain
// read rate to set it against; GFLOPS, 2 x weights x tokens a second, the compute.
void BM_DecodeLayers(benchmark::State& state, TensorType type) {
  const int64_t dim = state.range(0), kv = state.range(1), hidden = state.range(2);
  const int64_t layers = state.range(3);
  const int64_t tokens = state.range(5);
  CpuBackendOptions opt;
  opt.threads = static_cast<int>(state.range(4));
  CpuBackend be(opt);
  const Weight* shapes[] = {&GetWeight(type, dim, dim),    &GetWeight(type, kv, dim),
                            &GetWeight(type, kv, dim),     &GetWeight(type, dim, dim),
                            &GetWeight(type, hidden, dim), &GetWeight(type, hidden, dim),
                            &GetWeight(type, dim, hidden)};
  std::vector<TensorView> mats;
  double bytes = 0, macs = 0;
  for (int64_t l = 0; l < layers; ++l) {
    for (const Weight* w : shapes) {
      absl::StatusOr<TensorView> v = be.UploadWeight(w->view);  // a copy per layer
      if (!v.ok()) {
        state.SkipWithError(std::string(v.status().message()).c_str());
        return;
      }
      mats.push_back(*v);
      bytes += static_cast<double>(w->bytes.size());
      macs += static_cast<double>(v->rows() * v->cols());
    }
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(std::max(dim, hidden) * tokens), y(std::max(dim, hidden) * tokens);
  for (auto& v : x) v = dist(rng);
  for (auto _ : state) {
    for (const TensorView& m : mats) be.MatMul(m, x.data(), tokens, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes * static_cast<double>(state.iterations())));
  state.counters["GFLOPS"] = benchmark::Counter(2 * macs * static_cast<double>(tokens) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(be.name());
}
void DecodeLayersArgs(benchmark::internal::Benchmark* b) {
  b->ArgsProduct({{768}, {768}, {2048}, {12}, {1, 2}, {1}})
      ->ArgsProduct({{2048}, {256}, {5632}, {4}, {1, 2}, {1, 16}})
      ->ArgNames({"dim", "kv", "hidden", "layers", "threads", "tokens"})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_DecodeLayers, F16, TensorType::kF16)->Apply(DecodeLayersArgs);
BENCHMARK_CAPTURE(BM_DecodeLayers, Q8_0, TensorType::kQ8_0)->Apply(DecodeLayersArgs);
BENCHMARK_CAPTURE(BM_DecodeLayers, Q4_0, TensorType::kQ4_0)->Apply(DecodeLayersArgs);
BENCHMARK_CAPTURE(BM_DecodeLayers, Q4_K, TensorType::kQ4_K)->Apply(DecodeLayersArgs);
BENCHMARK_CAPTURE(BM_DecodeLayers, Q5_0, TensorType::kQ5_0)->Apply(DecodeLayersArgs);
BENCHMARK_CAPTURE(BM_DecodeLayers, Q3_K, TensorType::kQ3_K)->Apply(DecodeLayersArgs);

// The memory's plain read rate (bench/read_rate.h: 256 MiB in huge pages, as the weights
// are kept, one pass per iteration), on one thread or split over two (on a VM the second
// vCPU's share swings: 30-35 GiB/s for two against 24-32 for one, Zen 4, 2026-12-02).
void BM_ReadRate(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  static const ReadBuffer buf(size_t{256} << 20, pool);
  if (!buf.ok()) {
    state.SkipWithError("cannot allocate 256 MiB");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(buf.Read(pool));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(buf.bytes()));
}
BENCHMARK(BM_ReadRate)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int n : {1, 2, 4, 8, 12, 16, 24, 32, 128}) b->Args({n, threads});
  }
  b->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_MatMul, F32, TensorType::kF32, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, F16, TensorType::kF16, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, BF16, TensorType::kBF16, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q8_0, TensorType::kQ8_0, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q4_0, TensorType::kQ4_0, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q4_1, TensorType::kQ4_1, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q5_0, TensorType::kQ5_0, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q5_1, TensorType::kQ5_1, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q2_K, TensorType::kQ2_K, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q3_K, TensorType::kQ3_K, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q4_K, TensorType::kQ4_K, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q5_K, TensorType::kQ5_K, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q6_K, TensorType::kQ6_K, true)->Apply(Args);
BENCHMARK_CAPTURE(BM_MatMul, Q4_K_exact, TensorType::kQ4_K, false)->Apply(Args);
BENCHMARK_CAPTURE(BM_PrefillShape, F16, TensorType::kF16)->Apply(ShapeArgs);
BENCHMARK_CAPTURE(BM_PrefillShape, Q4_K, TensorType::kQ4_K)->Apply(ShapeArgs);

}  // namespace
}  // namespace cascade

BENCHMARK_MAIN();
