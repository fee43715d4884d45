#include <queue>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/models.h"
#include "util/utf8.h"

namespace cascade::tok {

SpmModel::SpmModel(TokenMap pieces, std::vector<float> scores, std::vector<bool> unused,
                   const std::array<int32_t, 256>& byte_ids, int32_t unk_id)
    : pieces_(std::move(pieces)),
      scores_(std::move(scores)),
      unused_(std::move(unused)),
      byte_ids_(byte_ids),
      unk_id_(unk_id) {}

absl::Status SpmModel::Encode(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return absl::OkStatus();
  struct Symbol {
    uint32_t begin;
    uint32_t size;  // 0 once merged into the symbol on its left
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> syms;
  syms.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    int len;
    DecodeUtf8(text, pos, &len);
    const int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{static_cast<uint32_t>(pos), static_cast<uint32_t>(len), n - 1, n + 1});
    pos += len;
  }
  syms.back().next = -1;

  // Highest score first; ties go to the leftmost pair (SentencePiece's order).
  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t size;
    bool operator<(const Bigram& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> queue;
  // Unused pieces that were merged, and the two pieces they came from.
  absl::flat_hash_map<std::string, std::pair<std::string, std::string>> rev_merge;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = syms[left].size + syms[right].size;
    auto it = pieces_.find(absl::string_view(text.data() + syms[left].begin, size));
    if (it == pieces_.end()) return;
    queue.push(Bigram{scores_[it->second], left, right, size});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i, i + 1);
  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = syms[top.left];
    Symbol& right = syms[top.right];
    if (left.size == 0 || right.size == 0 || left.size + right.size != top.size) continue;
    const std::string_view merged = text.substr(left.begin, top.size);
    auto it = pieces_.find(absl::string_view(merged.data(), merged.size()));
    if (it != pieces_.end() && unused_[it->second]) {
      rev_merge[std::string(merged)] = {std::string(text.substr(left.begin, left.size)),
                                        std::string(text.substr(right.begin, right.size))};
    }
    left.size = top.size;
    right.size = 0;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = top.left;
    consider(left.prev, top.left);
    consider(top.left, left.next);
  }

  // Emit the final symbols, splitting unused pieces and falling back to bytes.
  absl::Status status;
  auto emit = [&](auto&& self, std::string_view piece, int depth) -> void {
    auto it = pieces_.find(absl::string_view(piece.data(), piece.size()));
    if (it != pieces_.end()) {
      if (!unused_[it->second] || depth > 64) {
        out->push_back(it->second);
        return;
      }
      auto rm = rev_merge.find(std::string(piece));
      if (rm != rev_merge.end()) {
        const auto parts = rm->second;
        self(self, parts.first, depth + 1);
        self(self, parts.second, depth + 1);
        return;
      }
      out->push_back(it->second);
      return;
    }
    bool all = true;
    for (char b : piece) all &= byte_ids_[static_cast<uint8_t>(b)] >= 0;
    if (all) {
      for (char b : piece) out->push_back(byte_ids_[static_cast<uint8_t>(b)]);
      return;
    }
    if (unk_id_ >= 0) {
      out->push_back(unk_id_);
      return;
    }
    if (status.ok()) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "cannot encode '", std::string(piece),
          "': it is not in the vocabulary, which has neither byte tokens nor an unknown token"));
    }
  };
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    emit(emit, text.substr(syms[i].begin, syms[i].size), 0);
  }
  return status;
}

}  // namespace cascade::tok
