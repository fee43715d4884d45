// TextStream: turns generated token ids into text for a client, incrementally: never a
// partial UTF-8 character, and never text that could be the start of a stop string until
// it is known not to be one. The coordinator and the single-process generator share it.
//
// Contract: one TextStream per sequence; not thread-safe. After Push reports a stop,
// further pushes return nothing.
#ifndef CASCADE_GENERATION_TEXT_STREAM_H_
#define CASCADE_GENERATION_TEXT_STREAM_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace cascade {

class TextStream {
 public:
  // `context` are ids already in the sequence (the prompt): they decide whether the first
  // generated piece keeps its leading space.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
             std::span<const int32_t> context);

  // Adds one token; returns the text that is now safe to show. *stopped becomes true
  // when a stop string completed: the text before it is returned, the rest discarded.
  std::string Push(int32_t id, bool* stopped);
  // End of generation: releases held-back text.
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  StreamingDetokenizer detok_;
  std::vector<std::string> stop_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace cascade

#endif  // CASCADE_GENERATION_TEXT_STREAM_H_
