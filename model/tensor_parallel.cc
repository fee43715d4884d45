#include "model/tensor_parallel.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace cascade {

bool TpShard::kv_contiguous() const {
  for (size_t i = 1; i < kv_heads.size(); ++i) {
    if (kv_heads[i] != kv_heads[i - 1] + 1) return false;
  }
  return true;
}

namespace {

// A dense FFN's rows [ffn_begin, ffn_end) of s's rank, cut at multiples of align.ffn.
absl::Status SplitDenseFfn(const ModelConfig& c, const TpAlignment& align, TpShard* s) {
  const int64_t fa = std::max<int64_t>(1, align.ffn);
  if (c.ffn_dim % fa != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: the FFN size ",
                                                   c.ffn_dim, " is not a multiple of ", fa));
  }
  const int64_t units = c.ffn_dim / fa;
  s->ffn_begin = fa * (units * s->rank / s->size);
  s->ffn_end = fa * (units * (s->rank + 1) / s->size);
  if (s->ffn_end <= s->ffn_begin) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism of ", s->size,
                                                   " leaves rank ", s->rank, " no FFN rows (",
                                                   units, " blocks of ", fa, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TpShard> MakeTpShard(const ModelConfig& c, int rank, int size,
                                    const TpAlignment& align) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: rank ", rank, " of ",
                                                   size, " is not a valid rank"));
  }
  if (c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: ", c.n_heads,
                                                   " heads and ", c.n_kv_heads,
                                                   " KV heads do not form GQA groups"));
  }
  if (c.is_moe() && c.n_experts < size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism of ", size, " for a mixture of ", c.n_experts,
        " experts: expert parallelism gives each rank whole experts, so it needs at least one "
        "expert per rank (use fewer ranks, or split the model into pipeline stages)"));
  }
  if (c.n_heads % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism of ", size,
                                                   " does not divide the model's ", c.n_heads,
                                                   " attention heads"));
  }
  TpShard s;
  s.rank = rank;
  s.size = size;
  const int64_t per = c.n_heads / size;
  s.head_begin = per * rank;
  s.head_end = s.head_begin + per;
  if ((per * c.head_dim) % std::max<int64_t>(1, align.q_cols) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism of ", size, ": ", per, " head(s) of ", c.head_dim,
        " per rank cut the attention output's blocks of ", align.q_cols,
        " (use fewer ranks or a type with smaller blocks)"));
  }
  const int64_t g = c.n_heads / c.n_kv_heads;
  const int64_t kv_first = s.head_begin / g, kv_last = (s.head_end - 1) / g;
  const bool whole_groups = s.head_begin % g == 0 && per % g == 0;
  if (whole_groups || kv_first == kv_last) {
    for (int64_t k = kv_first; k <= kv_last; ++k) s.kv_heads.push_back(k);
  } else {
    for (int64_t h = s.head_begin; h < s.head_end; ++h) s.kv_heads.push_back(h / g);
  }
  if (c.is_moe()) {
    s.expert_begin = c.n_experts * rank / size;
    s.expert_end = c.n_experts * (rank + 1) / size;
    s.shared_expert = rank == 0;
  } else {
    CASCADE_RETURN_IF_ERROR(SplitDenseFfn(c, align, &s));
  }
  s.vocab_begin = c.vocab_size * rank / size;
  s.vocab_end = c.vocab_size * (rank + 1) / size;
  if (s.vocab_end <= s.vocab_begin) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism of ", size,
                                                   " leaves rank ", rank, " no vocabulary"));
  }
  return s;
}

TensorView SliceRows(const TensorView& t, int64_t first, int64_t count) {
  TensorView v = t;
  const uint64_t rb = t.row_bytes();
  v.data = t.data + rb * static_cast<uint64_t>(first);
  v.nbytes = rb * static_cast<uint64_t>(count);
  v.n_dims = 2;
  v.ne[1] = count;
  v.ne[2] = v.ne[3] = 1;
  return v;
}

TensorView GatherRowGroups(const TensorView& t, const std::vector<int64_t>& groups, int64_t group,
                           std::vector<uint8_t>* storage) {
  const uint64_t gb = t.row_bytes() * static_cast<uint64_t>(group);
  storage->resize(gb * groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    std::memcpy(storage->data() + gb * i, t.data + gb * static_cast<uint64_t>(groups[i]), gb);
  }
  TensorView v = t;
  v.data = storage->data();
  v.nbytes = storage->size();
  v.n_dims = 2;
  v.ne[1] = group * static_cast<int64_t>(groups.size());
  v.ne[2] = v.ne[3] = 1;
  return v;
}

absl::StatusOr<TensorView> SliceColumns(const TensorView& t, int64_t first, int64_t count,
                                        std::vector<uint8_t>* storage) {
  const TensorTypeTraits& tr = Traits(t.type);
  const int64_t be = tr.block_elems;
  if (first < 0 || count <= 0 || first + count > t.cols() || first % be != 0 || count % be != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", t.name, "' ", t.ShapeString(), ": columns [", first, ", ", first + count,
        ") do not fall on its blocks of ", be));
  }
  const uint64_t src_row = t.row_bytes();
  const uint64_t offset = static_cast<uint64_t>(first / be) * tr.block_bytes;
  const uint64_t row = static_cast<uint64_t>(count / be) * tr.block_bytes;
  const int64_t rows = t.rows();
  storage->resize(row * static_cast<uint64_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(storage->data() + row * r, t.data + src_row * r + offset, row);
  }
  TensorView v = t;
  v.data = storage->data();
  v.nbytes = storage->size();
  v.n_dims = 2;
  v.ne[0] = count;
  v.ne[1] = rows;
  v.ne[2] = v.ne[3] = 1;
  return v;
}

}  // namespace cascade
