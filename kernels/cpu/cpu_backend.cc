#include "kernels/cpu/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kv_block.h"
#include "kernels/cpu/row_groups.h"
#include "tensor/quant.h"
#include "util/logging.h"
#include "util/status_macros.h"
#include "util/system_memory.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C libraries lack the name
#endif

namespace cascade {
namespace {

// Work below this many multiply-adds runs on the calling thread alone.
constexpr int64_t kMinParallelWork = 1 << 15;
// Matmuls of up to this many tokens (a decode step of up to 16 streams) split their rows
// into one segment per thread, the rest stolen; larger ones (prompts) in chunks claimed
// dynamically. See SplitRows.
constexpr int64_t kSegmentMaxTokens = 16;

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : options_(options),
      isa_(static_cast<CpuIsa>(
          std::min(static_cast<int>(SelectedIsa()), static_cast<int>(options.max_isa)))),
      pool_(std::max(1, options.threads)),
      thread_scratch_(pool_.num_threads()) {}

CpuBackend::~CpuBackend() = default;

namespace {

// `bytes` rounded up to whole 2 MiB pages, 2 MiB aligned and advised into transparent huge
// pages, from a fresh anonymous mapping (zero, and resident only once written).
absl::StatusOr<DeviceBuffer> MapZeroedHugePages(size_t bytes) {
  const size_t huge = cpu::kHugePageBytes;
  if (bytes > std::numeric_limits<size_t>::max() - 2 * huge) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  const size_t rounded = (bytes + huge - 1) / huge * huge;
  const size_t span = rounded + huge;  // room to align the start
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + huge - 1) / huge * huge;
  if (aligned > start) ::munmap(raw, aligned - start);
  if (const size_t tail = span - (aligned - start) - rounded; tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + rounded), tail);
  }
  void* p = reinterpret_cast<void*>(aligned);
  ::madvise(p, rounded, MADV_HUGEPAGE);
  return DeviceBuffer(p, bytes, MemoryKind::kHost, [rounded](void* q) { ::munmap(q, rounded); });
}

}  // namespace

std::string CpuBackend::name() const {
  return absl::StrCat("cpu(", CpuIsaName(isa_), ", ", pool_.num_threads(), " threads)");
}

absl::StatusOr<DeviceBuffer> CpuBackend::Allocate(size_t bytes) {
  // 64-byte aligned and zeroed. Buffers of a huge page or more (the KV cache's pools) come
  // in 2 MiB transparent huge pages, as the weights do: attention reads a sequence's KV
  // blocks from all over a pool, and in 4 KiB pages nearly every block of a long batch was
  // a TLB miss. They are mapped fresh from the kernel, whose pages are zero and become
  // resident only when first written: a KV cache sized for many sequences costs the memory
  // of the blocks its sequences have used (blocks are handed out lowest first).
  if (bytes >= cpu::kHugePageBytes) return MapZeroedHugePages(bytes);
  const size_t rounded = std::max<size_t>((bytes + 63) / 64 * 64, 64);
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  std::memset(p, 0, rounded);
  return DeviceBuffer(p, bytes, MemoryKind::kHost, [](void* q) { std::free(q); });
}

absl::Status CpuBackend::MakeResident(DeviceBuffer& buffer) {
  // Buffers under a huge page were written (zeroed) by Allocate already.
  if (buffer.size() < cpu::kHugePageBytes || buffer.data() == nullptr) return absl::OkStatus();
  const size_t page = 4096;
  const size_t bytes = (buffer.size() + page - 1) / page * page;
  if (::madvise(buffer.data(), bytes, MADV_POPULATE_WRITE) == 0) return absl::OkStatus();
  const int err = errno;
  if (err == ENOMEM || err == EFAULT || err == EHWPOISON) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot back ", buffer.size() >> 20, " MiB with memory (", std::strerror(err),
                     "): the machine has less free than the plan assumed"));
  }
  // An older kernel (EINVAL): fault the pages in by writing them (they are zero already).
  auto* p = static_cast<volatile uint8_t*>(buffer.data());
  for (size_t at = 0; at < bytes; at += page) p[at] = 0;
  return absl::OkStatus();
}

void CpuBackend::CopyToDevice(void* dst, const void* host_src, size_t bytes) {
  if (bytes > 0 && dst != host_src) std::memcpy(dst, host_src, bytes);
}

void CpuBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
}

void CpuBackend::CopyToHost(void* host_dst, const void* src, size_t bytes) {
  if (bytes > 0 && host_dst != src) std::memcpy(host_dst, src, bytes);
}

void CpuBackend::StoreKv(const float* k, const float* v, const int64_t* slot_rows, int64_t n,
                         const KvLayout& layout, void* k_pool, void* v_pool) {
  const int64_t hd = layout.head_dim, kv_dim = layout.n_kv_heads * hd;
  const cpu::KernelTable& kt = cpu::KernelTableFor(isa_);
  for (int64_t i = 0; i < n; ++i) {
    for (int h = 0; h < layout.n_kv_heads; ++h) {
      const int64_t at = layout.Offset(slot_rows[i], h);
      const float* ks = k + i * kv_dim + h * hd;
      const float* vs = v + i * kv_dim + h * hd;
      if (layout.type == TensorType::kF16) {
        kt.float_to_f16(ks, hd, static_cast<uint16_t*>(k_pool) + at);
        kt.float_to_f16(vs, hd, static_cast<uint16_t*>(v_pool) + at);
      } else {
        std::memcpy(static_cast<float*>(k_pool) + at, ks, hd * sizeof(float));
        std::memcpy(static_cast<float*>(v_pool) + at, vs, hd * sizeof(float));
      }
    }
  }
}

void CpuBackend::GatherRows(const float* src, const int64_t* rows, int64_t n, int64_t dim,
                            float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    std::memmove(dst + i * dim, src + rows[i] * dim, dim * sizeof(float));
  }
}

absl::StatusOr<TensorView> CpuBackend::UploadWeight(const TensorView& host) {
  if (!options_.copy_weights || host.layout != WeightLayout::kRows || host.nbytes == 0) {
    return host;
  }
  // A model larger than the memory left runs from the file mapping (pages the kernel can
  // drop and read again) rather than not at all: weights are copied while the copy leaves
  // 1 GiB or 5% of the memory available (the source's pages are released after each).
  const uint64_t available = AvailableMemoryBytes();
  const uint64_t reserve = std::max<uint64_t>(uint64_t{1} << 30, available / 20);
  if (available != 0 && host.nbytes + reserve > available) {
    if (!warned_in_place_) {
      spdlog::warn("{}: not enough memory to copy the weights ({} MiB available); this one and "
                   "those that do not fit are used in place from the file mapping",
                   host.name, available >> 20);
      warned_in_place_ = true;
    }
    return host;
  }
  const cpu::KernelTable& kt = cpu::KernelTableFor(isa_);
  const bool group = options_.quantized_activations && kt.groups != nullptr &&
                     kt.groups(host.type) && host.n_dims <= 2 &&
                     cpu::RowGroupable(host.type, host.rows(), host.cols());
  // Into the weight arena (weight_arena.h: 2 MiB transparent huge pages, small weights
  // packed together), which neither misses the TLB every 4 KiB nor stops the hardware
  // prefetchers at each 4 KiB page end (TinyLlama Q8_0, one Zen 4 thread: 19-21 -> 22-26
  // tokens/s; llama-110m F16, whose 768 x 768 matrices are each under one huge page: 83-99
  // -> 93-105). Not zeroed: every byte is written next.
  uint8_t* dst = arena_.Allocate(host.nbytes);
  if (dst == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", host.nbytes, " bytes for weight ", host.name));
  }
  if (group) {
    pool_.ParallelFor(host.rows() / cpu::kRowGroup, 1, [&](int64_t g0, int64_t g1) {
      cpu::GroupRows(host.type, host.data, host.cols(), g0, g1, dst);
    });
  } else {
    constexpr int64_t kChunk = int64_t{1} << 20;
    const int64_t chunks = static_cast<int64_t>((host.nbytes + kChunk - 1) / kChunk);
    pool_.ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
      const uint64_t b = static_cast<uint64_t>(c0 * kChunk);
      const uint64_t e = std::min<uint64_t>(static_cast<uint64_t>(c1 * kChunk), host.nbytes);
      std::memcpy(dst + b, host.data + b, e - b);
    });
  }
  // The source is not read again by this backend: its pages may go (a file mapping's are
  // dropped and read back from the file if ever touched again; an anonymous copy's are
  // only ever swapped out, never lost), so the weights are in memory once. Whole pages
  // inside the view only.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(host.data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(host.data) + host.nbytes) / page * page;
#ifdef MADV_PAGEOUT  // Linux 5.4: older kernels refuse it (EINVAL) and keep both copies
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
#else
  (void)begin;
  (void)end;
#endif
  TensorView copy = host;
  copy.data = dst;
  if (group) copy.layout = WeightLayout::kRowGroups16;
  return copy;
}

void CpuBackend::SplitRows(int64_t rows, int64_t work, int64_t n, int64_t unit,
                           absl::FunctionRef<void()> before_split,
                           absl::FunctionRef<void(int64_t, int64_t, int)> run) {
  const int threads = pool_.num_threads();
  if (work < kMinParallelWork || threads == 1) {
    run(0, rows, 0);
    return;
  }
  if (n <= kSegmentMaxTokens) {
    // Decode: short calls that stream the weights from memory once. One segment of rows
    // per thread, read front to back in pieces of about an eighth of it (multiples of the
    // kernels' tile); a thread done early takes pieces from the back of the others'
    // segments, so a worker that wakes late or reads slowly is helped. Each thread's pieces
    // follow one another in memory, so its read stays one stream: interleaved chunks (8 per
    // thread, claimed in turn) made every chunk start cold and cost 2-thread decode 5-20%
    // (TinyLlama Q4_0 42-47 against 46-58 tokens/s with one chunk per thread). The same
    // held for steps of 6-16 tokens, which had taken chunks of up to 128 rows in turn: in
    // segments each thread's pair passes prefetch the next pair of its own (Zen 5,
    // 2026-12-04, three alternated rounds, two threads, `BM_DecodeLayers` tokens:16 GFLOP/s:
    // Q4_0 888-928 -> 952-1017, F16 218-222 -> 229-234, Q8_0 729-758 -> 772-838, Q4_K
    // 629-753 -> 674-825).
    const int64_t per = (rows + threads - 1) / threads;
    const int64_t grain = std::max(unit, (per / 8 + unit - 1) / unit * unit);
    before_split();
    pool_.ParallelForStealing(rows, grain, run);
    return;
  }
  // Prefill: chunks of 16-row panels (about 8 per thread, at most 128 rows) claimed
  // dynamically, so a vCPU slowed by its neighbours takes fewer chunks instead of holding
  // up the others.
  before_split();
  const int64_t grain = std::clamp<int64_t>((rows / (8 * threads) + 15) / 16 * 16, 16, 128);
  pool_.ParallelForDynamic(rows, grain, run);
}

cpu::MatmulTask CpuBackend::TaskOf(const TensorView& w, const uint8_t* x, size_t x_stride,
                                   int64_t n, float* y) {
  cpu::MatmulTask t;
  t.w = w.data;
  t.w_stride = w.row_bytes();
  t.k = w.cols();
  t.x = x;
  t.x_stride = x_stride;
  t.n = n;
  t.y = y;
  t.ldy = w.rows();
  return t;
}

void CpuBackend::ForRange(int64_t count, int64_t grain, int64_t work,
                          absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (count > 1 && work >= kMinParallelWork) {
    pool_.ParallelFor(count, grain, body);
  } else {
    body(0, count);
  }
}

void CpuBackend::MatMul(const TensorView& w, const float* x, int64_t n, float* y) {
  const TensorView* const ws[] = {&w};
  float* const ys[] = {y};
  MatMulShared(ws, 1, x, n, ys);
}

void CpuBackend::MatMulShared(const TensorView* const* w, int count, const float* x, int64_t n,
                              float* const* y) {
  if (n <= 0 || count <= 0) return;
  const TensorView& w0 = *w[0];
  bool alike = count <= kMaxShared;
  for (int i = 1; i < count && alike; ++i) {
    alike = w[i]->type == w0.type && w[i]->layout == w0.layout && w[i]->cols() == w0.cols();
  }
  if (!alike) {
    for (int i = 0; i < count; ++i) MatMulShared(&w[i], 1, x, n, &y[i]);
    return;
  }
  const cpu::KernelTable& kt = cpu::KernelTableFor(isa_);
  const int64_t k = w0.cols();
  const bool grouped = w0.layout == WeightLayout::kRowGroups16;
  const cpu::ActFormat fmt = cpu::ActFormatFor(w0.type, options_.quantized_activations);
  const cpu::MatmulFn fn = grouped ? nullptr : kt.matmul(w0.type, fmt);
  // Prepare activations: quantized (or, for grouped weights, laid out for the grouped
  // kernels) once for all weight rows.
  const uint8_t* xp = reinterpret_cast<const uint8_t*>(x);
  size_t x_stride = static_cast<size_t>(k) * sizeof(float);
  if (grouped) {
    const size_t bytes = kt.grouped_tokens_bytes(w0.type, n, k);
    if (act_scratch_.size() < bytes) act_scratch_.resize(bytes);
    uint8_t* prepared = act_scratch_.data();
    ForRange(n, 1, n * k,
             [&](int64_t b, int64_t e) { kt.prepare_grouped(w0.type, x, k, n, b, e, prepared); });
    xp = prepared;
    x_stride = 0;
  } else if (fmt != cpu::ActFormat::kF32) {
    x_stride = cpu::ActRowBytes(fmt, k);
    if (act_scratch_.size() < x_stride * n) act_scratch_.resize(x_stride * n);
    auto quant = fmt == cpu::ActFormat::kQ8_0 ? kt.quantize_q8_0 : kt.quantize_q8k;
    ForRange(n, 1, n * k, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) quant(x + i * k, k, act_scratch_.data() + i * x_stride);
    });
    xp = act_scratch_.data();
  }
  // Per-thread scratch: weight panels converted or dequantized, packed activations.
  if (!grouped) EnsureThreadScratch(cpu::ScratchFloats(k));
  const float* packed_x = nullptr;
  // A float matmul split over threads: where the table's kernel reads packed activations
  // (the AVX-512 token pairs, the GEMM's tiles), they are first packed once, by all
  // threads together.
  auto pack = [&] {
    const size_t packed = !grouped && fmt == cpu::ActFormat::kF32 && kt.packed_f32_floats != nullptr
                              ? kt.packed_f32_floats(w0.type, n, k)
                              : 0;
    if (packed == 0) return;
    GrowScratch(&packed_act_, packed);
    cpu::MatmulTask t;
    t.x = xp;
    t.x_stride = x_stride;
    t.n = n;
    t.k = k;
    pool_.Run([&](int thread, int nthreads) {
      kt.pack_f32(w0.type, t, thread, nthreads, packed_act_.data.get());
    });
    packed_x = packed_act_.data.get();
  };
  // The weights' rows one after another, each from a multiple of the kernels' row tile,
  // so that every range a thread gets starts where the kernel can start; every output row
  // is computed the same whatever range it falls in.
  const int64_t unit = grouped ? cpu::kRowGroup : 8;
  cpu::MatmulTask whole[kMaxShared];
  int64_t first[kMaxShared];
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    whole[i] = TaskOf(*w[i], xp, x_stride, n, y[i]);
    first[i] = total;
    total += (w[i]->rows() + unit - 1) / unit * unit;
  }
  SplitRows(total, total * k * n, n, unit, pack, [&](int64_t r0, int64_t r1, int thread) {
    for (int i = 0; i < count; ++i) {
      cpu::MatmulTask t = whole[i];
      t.r0 = std::max<int64_t>(r0 - first[i], 0);
      t.r1 = std::min<int64_t>(r1 - first[i], w[i]->rows());
      if (t.r0 >= t.r1) continue;
      if (grouped) {
        kt.grouped_matmul(t, w0.type);
      } else {
        t.scratch = thread_scratch_[thread].data.get();
        t.packed_x = packed_x;
        fn(t);
      }
    }
  });
}

void CpuBackend::GetRows(const TensorView& w, const int32_t* ids, int64_t n, float* out) {
  const int64_t k = w.cols();
  const uint64_t rb = w.row_bytes();
  if (w.layout == WeightLayout::kRowGroups16) {
    std::vector<uint8_t> row(rb);
    for (int64_t i = 0; i < n; ++i) {
      cpu::UngroupRow(w.type, w.data, k, ids[i], row.data());
      DequantizeRow(w.type, row.data(), k, out + i * k);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) DequantizeRow(w.type, w.data + ids[i] * rb, k, out + i * k);
}

void CpuBackend::RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                         float* out) {
  const cpu::KernelTable& kt = cpu::KernelTableFor(isa_);
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* xi = x + i * dim;
      float* oi = out + i * dim;
      const float ss = kt.sum_squares(xi, dim) / static_cast<float>(dim);
      const float inv = 1.0f / std::sqrt(ss + eps);
      for (int64_t j = 0; j < dim; ++j) oi[j] = xi[j] * inv * weight[j];
    }
  };
  ForRange(n, 1, n * dim, body);
}

namespace {

// (cos, sin) of position p at each of the `half` frequencies, into cs[2j], cs[2j + 1].
// Angles in double: at position ~1e4 a float angle would be off by ~1e-3 rad.
void RopeRow(int64_t p, const float* freq, int half, float* cs) {
  for (int j = 0; j < half; ++j) {
    const double theta = static_cast<double>(p) * static_cast<double>(freq[j]);
    cs[2 * j] = static_cast<float>(std::cos(theta));
    cs[2 * j + 1] = static_cast<float>(std::sin(theta));
  }
}

// Positions the angle table holds at most (at 64 frequencies, 64 MiB).
constexpr int64_t kMaxRopeTablePositions = int64_t{1} << 17;

}  // namespace

const float* CpuBackend::RopeAngles(const float* freq, int half, const int32_t* pos, int64_t n) {
  int64_t min_pos = 0, max_pos = 0;
  if (n > 0) {
    const auto [lo, hi] = std::minmax_element(pos, pos + n);
    min_pos = *lo;
    max_pos = *hi;
  }
  if (min_pos < 0 || max_pos >= kMaxRopeTablePositions) return nullptr;
  if (rope_freq_.size() != static_cast<size_t>(half) ||
      !std::equal(rope_freq_.begin(), rope_freq_.end(), freq)) {
    rope_freq_.assign(freq, freq + half);
    rope_positions_ = 0;
  }
  if (max_pos >= rope_positions_) {
    const int64_t from = rope_positions_, to = max_pos + 1;
    rope_cs_.resize(static_cast<size_t>(to) * 2 * half);
    auto rows = [&](int64_t b, int64_t e) {
      for (int64_t p = from + b; p < from + e; ++p) {
        RopeRow(p, freq, half, rope_cs_.data() + p * 2 * half);
      }
    };
    // A row costs `half` pairs of trig calls, worth about 8 elements' work each.
    ForRange(to - from, 1, (to - from) * half * 8, rows);
    rope_positions_ = to;
  }
  return rope_cs_.data();
}

void CpuBackend::Rope(float* x, const int32_t* pos, int64_t n, int n_heads, int head_dim,
                      int rope_dim, RopeLayout layout, const float* freq) {
  const int half = rope_dim / 2;
  const float* table = RopeAngles(freq, half, pos, n);
  auto body = [&](int64_t b, int64_t e) {
    std::vector<float> own(table == nullptr ? 2 * half : 0);
    for (int64_t i = b; i < e; ++i) {
      const float* cs = own.data();
      if (table != nullptr) {
        cs = table + static_cast<int64_t>(pos[i]) * 2 * half;
      } else {
        RopeRow(pos[i], freq, half, own.data());
      }
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (i * n_heads + h) * head_dim;
        for (int j = 0; j < half; ++j) {
          const int a = layout == RopeLayout::kAdjacentPairs ? 2 * j : j;
          const int c = layout == RopeLayout::kAdjacentPairs ? 2 * j + 1 : j + half;
          const float x0 = v[a], x1 = v[c];
          v[a] = x0 * cs[2 * j] - x1 * cs[2 * j + 1];
          v[c] = x0 * cs[2 * j + 1] + x1 * cs[2 * j];
        }
      }
    }
  };
  ForRange(n, 1, n * n_heads * head_dim, body);
}

void CpuBackend::SiluMul(const float* gate, const float* up, int64_t count, float* out) {
  const cpu::KernelTable& kt = cpu::KernelTableFor(isa_);
  auto body = [&](int64_t b, int64_t e) { kt.silu_mul(gate + b, up + b, e - b, out + b); };
  ForRange(count, 64, count, body);
}

void CpuBackend::GeluMul(const float* gate, const float* up, int64_t count, float* out) {
  const cpu::KernelTable& kt = cpu::KernelTableFor(isa_);
  auto body = [&](int64_t b, int64_t e) { kt.gelu_mul(gate + b, up + b, e - b, out + b); };
  ForRange(count, 64, count, body);
}

void CpuBackend::Scale(float* x, int64_t count, float factor) {
  const cpu::KernelTable& kt = cpu::KernelTableFor(isa_);
  auto body = [&](int64_t b, int64_t e) { kt.scale(factor, x + b, e - b); };
  ForRange(count, 64, count, body);
}

// Logits only (a row per token that wants them): libm's tanh, no kernel of its own.
void CpuBackend::SoftCap(float* x, int64_t count, float cap) {
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = cap * std::tanh(x[i] / cap);
  };
  ForRange(count, 64, count, body);
}

void CpuBackend::Add(const float* x, int64_t count, float* y) {
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] += x[i];
  };
  ForRange(count, 64, count, body);
}

void CpuBackend::AddBias(const float* bias, int64_t n, int64_t dim, float* x) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) x[i * dim + j] += bias[j];
  }
}

void CpuBackend::Attention(const AttentionParams& p) {
  const cpu::KernelTable& kt = cpu::KernelTableFor(isa_);
  const int group = p.n_heads / p.n_kv_heads;
  // Tiles: runs of up to kAttentionTile consecutive queries of one sequence (a prompt's
  // positions), which the kernel takes block by block together.
  // First query of each, then n_queries; the member keeps its capacity, so that a layer's
  // attention allocates nothing once the largest batch has been seen.
  std::vector<int64_t>& tiles = attention_tiles_;
  tiles.clear();
  for (int64_t i = 0; i < p.n_queries; ++i) {
    if (tiles.empty() || i - tiles.back() == cpu::kAttentionTile ||
        p.queries[i].blocks != p.queries[tiles.back()].blocks) {
      tiles.push_back(i);
    }
  }
  const int64_t n_tiles = static_cast<int64_t>(tiles.size());
  tiles.push_back(p.n_queries);
  const int64_t tasks = n_tiles * p.n_kv_heads;
  // One (tile, KV head) per task: the group's heads share the K/V loads; each head of each
  // query walks its sequence's blocks in order with an online softmax, so its result does
  // not depend on the rest of the batch, the tiles or the split.
  // A group's scores, and an F16 block converted.
  EnsureThreadScratch(static_cast<size_t>(group) * p.block_size + cpu::KvBlockScratchFloats(p));
  auto body = [&](int64_t b, int64_t e, int thread) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t tile = task / p.n_kv_heads;
      kt.attention_group(p, p.queries + tiles[tile],
                         static_cast<int>(tiles[tile + 1] - tiles[tile]),
                         static_cast<int>(task % p.n_kv_heads), thread_scratch_[thread].data.get());
    }
  };
  int64_t work = 0;
  for (int64_t i = 0; i < p.n_queries; ++i) work += p.queries[i].n_ctx;
  if (work * p.n_heads * p.head_dim >= kMinParallelWork && tasks > 1) {
    const int64_t grain = std::max<int64_t>(1, tasks / (16 * pool_.num_threads()));
    pool_.ParallelForDynamic(tasks, grain, body);
  } else {
    body(0, tasks, 0);
  }
}

void CpuBackend::Softmax(float* x, int64_t n, int64_t dim) {
  for (int64_t i = 0; i < n; ++i) {
    float* r = x + i * dim;
    const float mx = *std::max_element(r, r + dim);
    double sum = 0;
    for (int64_t j = 0; j < dim; ++j) {
      r[j] = std::exp(r[j] - mx);
      sum += r[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < dim; ++j) r[j] *= inv;
  }
}

void CpuBackend::GrowScratch(Scratch* s, size_t floats) {
  if (s->floats >= floats) return;
  const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
  s->data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (s->data == nullptr) std::abort();  // a few MiB; nothing sensible to do
  s->floats = floats;
}

void CpuBackend::EnsureThreadScratch(size_t floats) {
  for (auto& s : thread_scratch_) GrowScratch(&s, floats);
}

}  // namespace cascade
