// The model every test can rely on: the bundled stories260K.gguf in the repository's
// models/ folder (CASCADE_SOURCE_DIR is defined by the test targets).
#ifndef CASCADE_MODEL_TEST_MODELS_H_
#define CASCADE_MODEL_TEST_MODELS_H_

#include <string>

namespace cascade::testing {

inline std::string BundledModel() {
#ifdef CASCADE_SOURCE_DIR
  return std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf";
#else
  return "models/stories260K.gguf";
#endif
}

}  // namespace cascade::testing

#endif  // CASCADE_MODEL_TEST_MODELS_H_
