// The 16-row group layout of Q8_0 / Q4_0 / Q4_K weights (row_groups.h) and the backend's use of
// it: the layout holds every byte of the file's rows (round trip), and a grouped weight
// gives bit for bit the results of the same weight used in place, for every token count,
// thread count and row range, in MatMul and GetRows, on every ISA of this CPU that groups
// (AVX2: Q4_0 and Q4_K; AVX-512 VNNI: all three).
#include "kernels/cpu/row_groups.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/avx2_grouped.h"
#include "kernels/cpu/avx512_grouped.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kernels_test_util.h"
#include "tensor/quant.h"

namespace cascade {
namespace {

using testing::MakeWeight;
using testing::Random;
using testing::TestWeight;

// The grouped kernel's task over all of w's rows: g its grouped bytes, prepared the n
// tokens' prepared rows; y is the caller's.
cpu::MatmulTask GroupedTask(const TestWeight& w, const std::vector<uint8_t>& g,
                            const std::vector<uint8_t>& prepared, int64_t n) {
  cpu::MatmulTask t;
  t.w = g.data();
  t.w_stride = w.view.row_bytes();
  t.k = w.view.cols();
  t.x = prepared.data();
  t.n = n;
  t.ldy = w.view.rows();
  t.r0 = 0;
  t.r1 = w.view.rows();
  return t;
}

std::vector<uint8_t> Grouped(const TestWeight& w) {
  std::vector<uint8_t> out(w.bytes.size());
  cpu::GroupRows(w.view.type, w.bytes.data(), w.view.cols(), 0, w.view.rows() / cpu::kRowGroup,
                 out.data());
  return out;
}

TEST(RowGroups, WhatCanBeGrouped) {
  EXPECT_TRUE(cpu::RowGroupable(TensorType::kQ4_0, 32, 64));
  EXPECT_TRUE(cpu::RowGroupable(TensorType::kQ8_0, 16, 32));
  EXPECT_FALSE(cpu::RowGroupable(TensorType::kQ4_0, 40, 64));  // rows not a multiple of 16
  EXPECT_FALSE(cpu::RowGroupable(TensorType::kQ4_0, 0, 64));
  EXPECT_TRUE(cpu::RowGroupable(TensorType::kQ4_K, 32, 256));
  EXPECT_FALSE(cpu::RowGroupable(TensorType::kQ4_K, 32, 128));  // not whole super-blocks
  EXPECT_FALSE(cpu::RowGroupable(TensorType::kQ6_K, 32, 256));
  EXPECT_FALSE(cpu::RowGroupable(TensorType::kF16, 32, 64));
}

// Columns of a test weight of `type`: `blocks` blocks (Q4_K: super-blocks of 256).
int64_t Cols(TensorType type, int64_t blocks) {
  return blocks * (type == TensorType::kQ4_K ? kQKK : kQK);
}

constexpr TensorType kGroupable[] = {TensorType::kQ4_0, TensorType::kQ8_0, TensorType::kQ4_K};

TEST(RowGroups, EveryRowComesBackAsTheFileHadIt) {
  for (TensorType type : kGroupable) {
    const int64_t cols = Cols(type, 3);
    const TestWeight w = MakeWeight(type, 48, cols, 11);
    const std::vector<uint8_t> g = Grouped(w);
    EXPECT_NE(g, w.bytes) << "the layout moved nothing";
    if (type != TensorType::kQ8_0) {  // (Q8_0 codes are stored plus 128)
      std::vector<uint8_t> sorted_g = g, sorted_w = w.bytes;
      std::sort(sorted_g.begin(), sorted_g.end());
      std::sort(sorted_w.begin(), sorted_w.end());
      EXPECT_EQ(sorted_g, sorted_w) << "not a reordering of the file's bytes";
    }
    const uint64_t rb = w.view.row_bytes();
    std::vector<uint8_t> row(rb);
    for (int64_t r = 0; r < 48; ++r) {
      cpu::UngroupRow(type, g.data(), cols, r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), w.bytes.data() + r * rb, rb), 0)
          << TensorTypeName(type) << " row " << r;
    }
    // Groups written in pieces give the same bytes as all at once.
    std::vector<uint8_t> pieces(w.bytes.size());
    cpu::GroupRows(type, w.bytes.data(), cols, 2, 3, pieces.data());
    cpu::GroupRows(type, w.bytes.data(), cols, 0, 2, pieces.data());
    EXPECT_EQ(pieces, g);
  }
}

using testing::AvailableIsas;

// The (ISA, type) pairs this CPU groups (up to the ISA CASCADE_CPU_ISA selects): a weight
// of that type uploaded to a backend limited to that ISA is grouped.
std::vector<std::pair<CpuIsa, TensorType>> GroupedCases() {
  std::vector<std::pair<CpuIsa, TensorType>> cases;
  for (CpuIsa isa : AvailableIsas()) {
    if (isa > SelectedIsa()) continue;  // CASCADE_CPU_ISA keeps the backend below it
    const cpu::KernelTable& kt = cpu::KernelTableFor(isa);
    for (TensorType type : kGroupable) {
      if (kt.groups != nullptr && kt.groups(type)) cases.emplace_back(isa, type);
    }
  }
  return cases;
}

CpuBackendOptions On(CpuIsa isa, int threads = 1) {
  CpuBackendOptions o;
  o.max_isa = isa;
  o.threads = threads;
  return o;
}

TEST(RowGroups, AvxTwoGroupsQ4_0AndQ4_KAndNothingIsGroupedWithoutIt) {
  const std::vector<std::pair<CpuIsa, TensorType>> cases = GroupedCases();
  if (SelectedIsa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 selected: nothing is grouped";
  auto has = [&](CpuIsa isa, TensorType type) {
    return std::count(cases.begin(), cases.end(), std::pair{isa, type}) == 1;
  };
  EXPECT_TRUE(has(CpuIsa::kAvx2, TensorType::kQ4_0));
  EXPECT_TRUE(has(CpuIsa::kAvx2, TensorType::kQ4_K));
  EXPECT_FALSE(has(CpuIsa::kAvx2, TensorType::kQ8_0));  // its file-layout kernel is faster
  for (auto [isa, type] : cases) EXPECT_NE(isa, CpuIsa::kScalar);
}

// The backend with the weight grouped against the same backend using it in place (the
// AVX2 / AVX-512 file-layout kernels), bit for bit.
TEST(RowGroups, GroupedMatmulIsBitForBitTheFileLayoutKernels) {
  if (GroupedCases().empty()) GTEST_SKIP() << "this CPU has no AVX2: nothing is grouped";
  for (auto [isa, type] : GroupedCases()) {
    SCOPED_TRACE(CpuIsaName(isa));
    const int64_t long_rows = type == TensorType::kQ4_K ? 1 : 8;  // blocks of a 4096-row weight
    for (auto [rows, blocks] : {std::pair<int64_t, int64_t>{16, 1}, {48, 3}, {4096, long_rows}}) {
      const int64_t cols = Cols(type, blocks);
      const TestWeight w = MakeWeight(type, rows, cols, 5);
      for (int threads : {1, 2}) {
        CpuBackendOptions on = On(isa, threads), off = On(isa, threads);
        off.copy_weights = false;
        CpuBackend grouped(on), plain(off);
        const TensorView gv = grouped.UploadWeight(w.view).value();
        const TensorView pv = plain.UploadWeight(w.view).value();
        ASSERT_EQ(gv.layout, WeightLayout::kRowGroups16);
        ASSERT_EQ(pv.layout, WeightLayout::kRows);
        ASSERT_EQ(pv.data, w.view.data) << "ungrouped: used in place";
        for (int64_t n : {1, 2, 3, 5, 7, 8, 9, 12, 16, 17, 24, 40}) {
          const auto x = Random(n * cols, static_cast<uint32_t>(n));
          std::vector<float> yg(n * rows), yp(n * rows);
          grouped.MatMul(gv, x.data(), n, yg.data());
          plain.MatMul(pv, x.data(), n, yp.data());
          ASSERT_EQ(std::memcmp(yg.data(), yp.data(), yg.size() * sizeof(float)), 0)
              << TensorTypeName(type) << " rows " << rows << " cols " << cols << " n " << n
              << " threads " << threads;
          // Batch invariance: each token alone gives its row of the batch.
          std::vector<float> one(rows);
          for (int64_t i = 0; i < n; i += 5) {
            grouped.MatMul(gv, x.data() + i * cols, 1, one.data());
            ASSERT_EQ(std::memcmp(one.data(), yg.data() + i * rows, rows * sizeof(float)), 0)
                << "token " << i << " of " << n;
          }
        }
      }
    }
  }
}

// The grouped weight against the same weight in place on `isa`, bit for bit, for
// activations of one sign with a few of the other, and of mixed signs, over one and several
// register passes.
void ExpectGroupedIsThePlain(CpuIsa isa, const TestWeight& w) {
  const int64_t rows = w.view.rows(), cols = w.view.cols();
  CpuBackendOptions off = On(isa);
  off.copy_weights = false;
  CpuBackend grouped(On(isa)), plain(off);
  const TensorView gv = grouped.UploadWeight(w.view).value();
  ASSERT_EQ(gv.layout, WeightLayout::kRowGroups16);
  for (float sign : {1.0f, -1.0f}) {
    for (int64_t n : {1, 2, 5, 9}) {
      std::vector<float> x(n * cols);
      for (size_t i = 0; i < x.size(); ++i) x[i] = sign * (i % 7 == 6 ? -1.0f : 1.0f);
      for (size_t i = 0; i < x.size() && sign < 0; i += 2) x[i] = sign;  // all one sign
      std::vector<float> yg(n * rows), yp(n * rows);
      grouped.MatMul(gv, x.data(), n, yg.data());
      plain.MatMul(w.view, x.data(), n, yp.data());
      ASSERT_EQ(std::memcmp(yg.data(), yp.data(), yg.size() * sizeof(float)), 0)
          << TensorTypeName(w.view.type) << " n " << n << " sign " << sign;
    }
  }
}

// Q4_K at the integer extremes (codes 15, 6-bit scales and mins 63, activations at +-127)
// and with mixed signs: the grouped sums stay exact (no int32 or int16 overflow: the AVX2
// kernel adds a sub-block's pair sums in int16, at most 30480) and equal the file-layout
// kernels'.
TEST(RowGroups, Q4KAtTheExtremesIsBitForBitTheFileLayoutKernels) {
  if (GroupedCases().empty()) GTEST_SKIP() << "this CPU has no AVX2: nothing is grouped";
  for (auto [isa, type] : GroupedCases()) {
    if (type != TensorType::kQ4_K) continue;
    SCOPED_TRACE(CpuIsaName(isa));
    const int64_t rows = 32, cols = 2 * kQKK;
    TestWeight w = MakeWeight(TensorType::kQ4_K, rows, cols, 4);
    auto* blocks = reinterpret_cast<BlockQ4K*>(w.bytes.data());
    for (int64_t b = 0; b < rows * cols / kQKK; ++b) {
      if (b % 3 == 2) continue;  // some blocks stay as quantized
      std::memset(blocks[b].scales, 0xFF, sizeof(blocks[b].scales));
      std::memset(blocks[b].qs, b % 3 == 0 ? 0xFF : 0xF0, sizeof(blocks[b].qs));
    }
    ExpectGroupedIsThePlain(isa, w);
  }
}

// Q4_0 and Q8_0 at the integer extremes (every nibble 15 or 0, codes +-127 and -128,
// activations at +-127, signs mixed): the grouped sums stay exact (the AVX2 kernel adds a
// Q4_0 block's pair sums in int16: at most 8 * 2 * 15 * 127 = 30480) and equal the
// file-layout kernels'.
TEST(RowGroups, Q4_0AndQ8_0AtTheExtremesAreBitForBitTheFileLayoutKernels) {
  if (GroupedCases().empty()) GTEST_SKIP() << "this CPU has no AVX2: nothing is grouped";
  for (auto [isa, type] : GroupedCases()) {
    if (type == TensorType::kQ4_K) continue;  // its own test above
    SCOPED_TRACE(CpuIsaName(isa));
    const int64_t rows = 32, cols = 4 * kQK;
    TestWeight w = MakeWeight(type, rows, cols, 6);
    const uint64_t rb = w.view.row_bytes();
    const size_t bb = type == TensorType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / kQK; ++b) {
        if ((r + b) % 4 == 3) continue;                      // some blocks stay as quantized
        uint8_t* qs = w.bytes.data() + r * rb + b * bb + 2;  // past the fp16 scale
        const size_t n = type == TensorType::kQ4_0 ? kQK / 2 : kQK;
        const uint8_t fill = type == TensorType::kQ4_0 ? ((r + b) % 4 == 1 ? 0x00 : 0xFF)
                                                       : ((r + b) % 4 == 1 ? 0x80 : 0x7F);
        std::memset(qs, fill, n);
      }
    }
    ExpectGroupedIsThePlain(isa, w);
  }
}

// The kernel over row ranges (as threads split a matmul) writes those rows only, with the
// bits of the whole.
TEST(RowGroups, RowRangesGiveTheBitsOfTheWhole) {
  if (GroupedCases().empty()) GTEST_SKIP() << "this CPU has no AVX2: nothing is grouped";
  const int64_t rows = 96;
  for (auto [isa, type] : GroupedCases()) {
    SCOPED_TRACE(CpuIsaName(isa));
    const cpu::KernelTable& kt = cpu::KernelTableFor(isa);
    const int64_t cols = Cols(type, 4);
    const TestWeight w = MakeWeight(type, rows, cols, 8);
    const std::vector<uint8_t> g = Grouped(w);
    for (int64_t n : {1, 11, 20}) {
      const auto x = Random(n * cols, 3);
      std::vector<uint8_t> prepared(kt.grouped_tokens_bytes(type, n, cols));
      kt.prepare_grouped(type, x.data(), cols, n, 0, n / 2, prepared.data());
      kt.prepare_grouped(type, x.data(), cols, n, n / 2, n, prepared.data());
      cpu::MatmulTask t = GroupedTask(w, g, prepared, n);
      std::vector<float> whole(n * rows), parts(n * rows, -1.0f);
      t.y = whole.data();
      kt.grouped_matmul(t, type);
      t.y = parts.data();
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{32, 80}, {0, 16}, {80, 96}}) {
        t.r0 = r0;
        t.r1 = r1;
        kt.grouped_matmul(t, type);
      }
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          const float got = parts[i * rows + r];
          if (r >= 16 && r < 32) {
            ASSERT_EQ(got, -1.0f) << "row " << r << " outside every range was written";
          } else {
            ASSERT_EQ(got, whole[i * rows + r]) << "token " << i << " row " << r;
          }
        }
      }
    }
  }
}

// The Q4_K passes prefetch or not by core (kernel_table.h, PrefetchGroupedQ4K); either way
// the same bits, for one-token passes and passes of several tokens.
TEST(RowGroups, Q4KPrefetchChoiceChangesNoBit) {
  bool any = false;
  for (auto [isa, type] : GroupedCases()) {
    if (type != TensorType::kQ4_K) continue;
    any = true;
    SCOPED_TRACE(CpuIsaName(isa));
    const cpu::KernelTable& kt = cpu::KernelTableFor(isa);
    auto kernel =
        isa == CpuIsa::kAvx512 ? &cpu::avx512::GroupedMatmulFor : &cpu::avx2::GroupedMatmulFor;
    const int64_t rows = 64, cols = Cols(type, 6);
    const TestWeight w = MakeWeight(type, rows, cols, 11);
    const std::vector<uint8_t> g = Grouped(w);
    for (int64_t n : {1, 3, 4, 9, 16}) {
      const auto x = Random(n * cols, static_cast<uint32_t>(20 + n));
      std::vector<uint8_t> prepared(kt.grouped_tokens_bytes(type, n, cols));
      kt.prepare_grouped(type, x.data(), cols, n, 0, n, prepared.data());
      cpu::MatmulTask t = GroupedTask(w, g, prepared, n);
      std::vector<float> table(n * rows), on(n * rows, -1.0f), off(n * rows, -2.0f);
      t.y = table.data();
      kt.grouped_matmul(t, type);
      t.y = on.data();
      kernel(true)(t, type);
      t.y = off.data();
      kernel(false)(t, type);
      ASSERT_EQ(std::memcmp(on.data(), table.data(), on.size() * sizeof(float)), 0) << "n " << n;
      ASSERT_EQ(std::memcmp(off.data(), table.data(), off.size() * sizeof(float)), 0) << "n " << n;
    }
  }
  if (!any) GTEST_SKIP() << "this CPU groups no Q4_K weight";
}

TEST(RowGroups, GetRowsOfAGroupedWeightAreTheFilesRows) {
  if (GroupedCases().empty()) GTEST_SKIP() << "this CPU has no AVX2: nothing is grouped";
  for (auto [isa, type] : GroupedCases()) {
    const int64_t cols = Cols(type, 2);
    const TestWeight w = MakeWeight(type, 64, cols, 2);
    CpuBackend be(On(isa));
    const TensorView gv = be.UploadWeight(w.view).value();
    ASSERT_EQ(gv.layout, WeightLayout::kRowGroups16);
    const std::vector<int32_t> ids = {0, 17, 63, 17, 31};
    std::vector<float> got(ids.size() * cols), want(ids.size() * cols);
    be.GetRows(gv, ids.data(), static_cast<int64_t>(ids.size()), got.data());
    be.GetRows(w.view, ids.data(), static_cast<int64_t>(ids.size()), want.data());
    EXPECT_EQ(got, want);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(got[i * cols + 5], w.dequant[ids[i] * cols + 5]);
    }
  }
}

// Weights that cannot be grouped are copied as they are (into the backend's huge pages);
// with copy_weights off, nothing is copied.
TEST(RowGroups, WeightsThatCannotBeGroupedAreCopiedAsTheyAre) {
  CpuBackend be({});
  CpuBackendOptions in_place;
  in_place.copy_weights = false;
  CpuBackend zero_copy(in_place);
  for (auto [type, rows, cols] :
       {std::tuple<TensorType, int64_t, int64_t>{TensorType::kQ4_0, 40, 64},
        {TensorType::kQ6_K, 32, 256},
        {TensorType::kF16, 32, 64}}) {
    const TestWeight w = MakeWeight(type, rows, cols, 1);
    const TensorView v = be.UploadWeight(w.view).value();
    EXPECT_EQ(v.layout, WeightLayout::kRows) << TensorTypeName(type);
    EXPECT_NE(v.data, w.view.data) << TensorTypeName(type);
    ASSERT_EQ(v.nbytes, w.view.nbytes);
    EXPECT_EQ(std::memcmp(v.data, w.bytes.data(), v.nbytes), 0) << TensorTypeName(type);
    EXPECT_EQ(zero_copy.UploadWeight(w.view).value().data, w.view.data) << TensorTypeName(type);
    // The source's pages were released, never its contents.
    std::vector<float> a(rows * cols), b(rows * cols);
    std::vector<int32_t> ids(rows);
    for (int64_t r = 0; r < rows; ++r) ids[r] = static_cast<int32_t>(r);
    be.GetRows(v, ids.data(), rows, a.data());
    be.GetRows(w.view, ids.data(), rows, b.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, w.dequant);
  }
  // Nor grouped with float activations (the grouped kernel multiplies quantized ones).
  CpuBackendOptions f32;
  f32.quantized_activations = false;
  CpuBackend exact(f32);
  const TestWeight w = MakeWeight(TensorType::kQ4_0, 32, 64, 1);
  EXPECT_EQ(exact.UploadWeight(w.view).value().layout, WeightLayout::kRows);
}

}  // namespace
}  // namespace cascade
