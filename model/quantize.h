// Model quantization: rewrite a GGUF file with its weight matrices in another type.
//
// Contract: every 2-D weight matrix (token embedding, attention and FFN projections,
// output head) is dequantized exactly and re-quantized row by row with the reference
// quantizers (model/quant.h); norms, biases and other 1-D tensors keep their type, as do
// all metadata keys except general.file_type. A matrix whose rows are not a multiple of
// the target's block size falls back to Q8_0 (or F16), and the report lists it. Streams
// one tensor at a time. Errors name the file and tensor.
#ifndef CASCADE_MODEL_QUANTIZE_H_
#define CASCADE_MODEL_QUANTIZE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensor/tensor_type.h"

namespace cascade {

struct QuantizeReport {
  int matrices = 0;
  int fallbacks = 0;
  std::vector<std::string> notes;  // "blk.0.ffn_down.weight: 688 columns, Q8_0 instead"
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

absl::Status QuantizeModel(const std::string& in_path, const std::string& out_path, TensorType type,
                           QuantizeReport* report);

// llama.cpp's general.file_type number for a model whose matrices are mostly `type`.
uint32_t FileTypeFor(TensorType type);

}  // namespace cascade

#endif  // CASCADE_MODEL_QUANTIZE_H_
