#include "tensor/tensor.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cascade {

std::string TensorView::ShapeString() const {
  std::vector<int64_t> dims(ne, ne + n_dims);
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "] ", TensorTypeName(type));
}

}  // namespace cascade
