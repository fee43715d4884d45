// Tensor parallelism's split of a model (Megatron-style): which rows and columns of each
// weight rank `rank` of a group of `size` holds, and the slicing of tensors into those
// parts.
//
//   attention: query heads split evenly ([head_begin, head_end)); Q by output rows, the
//              output projection by input columns. KV heads: a rank keeps the KV heads its
//              query heads use. When its heads are whole GQA groups, or all in one group,
//              they are a contiguous range (fewer KV heads than ranks: each is replicated
//              on the ranks that share it); otherwise (groups cut by the split) it keeps
//              one KV head per query head, so its attention is plain multi-head.
//   FFN:       gate and up by output rows, down by input columns, over [ffn_begin,
//              ffn_end), cut at multiples of ffn_align (the block size of ffn_down's type).
//   experts:   (a mixture of experts: expert parallelism) each rank holds whole experts
//              [expert_begin, expert_end), an even share; the router is whole on every
//              rank, so every rank routes every token alike and computes the part of its
//              output its experts give; the all-reduce after the FFN sums the parts. The
//              shared expert (Qwen2-MoE) is whole on rank 0 only.
//   vocabulary: token embedding and output head by rows, [vocab_begin, vocab_end).
//   norms:     whole on every rank.
//
// Contract: pure functions of their arguments; thread-safe. MakeTpShard refuses (naming
// the reason) a mixture of experts with fewer experts than ranks, a size that does not
// divide the head count, a query split
// that cuts a block of the output projection's type, and a split that leaves a rank
// without FFN rows or vocabulary. Slices of rows are views of the source's bytes; slices
// of columns and gathered rows are copies into storage the caller keeps alive.
#ifndef CASCADE_MODEL_TENSOR_PARALLEL_H_
#define CASCADE_MODEL_TENSOR_PARALLEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "tensor/tensor.h"

namespace cascade {

struct TpShard {
  int rank = 0;
  int size = 1;
  int64_t head_begin = 0, head_end = 0;  // query heads
  std::vector<int64_t> kv_heads;         // KV heads kept here, in local order
  int64_t ffn_begin = 0, ffn_end = 0;      // a dense FFN's rows
  int64_t expert_begin = 0, expert_end = 0;  // a mixture of experts': its whole experts
  bool shared_expert = true;                 // holds the shared expert (rank 0)
  int64_t vocab_begin = 0, vocab_end = 0;

  int64_t n_heads() const { return head_end - head_begin; }
  int64_t n_kv_heads() const { return static_cast<int64_t>(kv_heads.size()); }
  int64_t ffn() const { return ffn_end - ffn_begin; }
  int64_t experts() const { return expert_end - expert_begin; }
  int64_t vocab() const { return vocab_end - vocab_begin; }
  // The KV heads are a contiguous range of the model's (a view of the K/V weights).
  bool kv_contiguous() const;
};

// Block sizes the split must respect (1 for F32/F16/BF16).
struct TpAlignment {
  int64_t q_cols = 1;  // the output projection's block size: its column cuts
  int64_t ffn = 1;     // ffn_down's block size: the FFN cuts
};

absl::StatusOr<TpShard> MakeTpShard(const ModelConfig& c, int rank, int size,
                                    const TpAlignment& align = {});

// Rows [first, first + count) of a matrix: a view of the same bytes.
TensorView SliceRows(const TensorView& t, int64_t first, int64_t count);
// Rows of `t` in groups of `group` consecutive rows: group g of the result is group
// groups[g] of t; copied into *storage.
TensorView GatherRowGroups(const TensorView& t, const std::vector<int64_t>& groups,
                           int64_t group, std::vector<uint8_t>* storage);
// Columns [first, first + count) of every row, copied into *storage; InvalidArgument when
// the cut is not at a block boundary of the type.
absl::StatusOr<TensorView> SliceColumns(const TensorView& t, int64_t first, int64_t count,
                                        std::vector<uint8_t>* storage);

}  // namespace cascade

#endif  // CASCADE_MODEL_TENSOR_PARALLEL_H_
