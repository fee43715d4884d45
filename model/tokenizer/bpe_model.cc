#include <queue>

#include "model/tokenizer/models.h"
#include "util/utf8.h"

namespace cascade::tok {

BpeModel::BpeModel(TokenMap vocab, const std::vector<MergeRule>& merges, bool later_merge_wins,
                   const std::array<int32_t, 256>& byte_ids, const BpeOptions& options)
    : vocab_(std::move(vocab)), byte_ids_(byte_ids), options_(options) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const MergeRule& m = merges[rank];
    const Rank value{static_cast<int32_t>(rank), m.result};
    if (later_merge_wins) {
      merges_.insert_or_assign(Key(m.left, m.right), value);
    } else {
      merges_.try_emplace(Key(m.left, m.right), value);
    }
  }
}

absl::Status BpeModel::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return absl::OkStatus();
  if (options_.ignore_merges) {
    auto it = vocab_.find(absl::string_view(piece.data(), piece.size()));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return absl::OkStatus();
    }
  }

  // Initial symbols: one per character (or per byte / unknown run for characters that
  // are not tokens).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> syms;
  syms.reserve(piece.size());
  auto add = [&syms](int32_t id) {
    const int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{id, n - 1, n + 1});
  };
  bool last_was_unk = false;
  for (size_t pos = 0; pos < piece.size();) {
    int len;
    DecodeUtf8(piece, pos, &len);
    const std::string_view ch = piece.substr(pos, len);
    pos += len;
    auto it = vocab_.find(absl::string_view(ch.data(), ch.size()));
    if (it != vocab_.end()) {
      add(it->second);
      last_was_unk = false;
      continue;
    }
    if (options_.single_byte_lookup) {
      for (char b : ch) {
        auto bit = vocab_.find(absl::string_view(&b, 1));
        if (bit != vocab_.end()) add(bit->second);
      }
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char b : ch) all &= byte_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all) {
        for (char b : ch) add(byte_ids_[static_cast<uint8_t>(b)]);
        last_was_unk = false;
        continue;
      }
    }
    if (options_.unk_id >= 0) {
      if (!(options_.fuse_unk && last_was_unk)) add(options_.unk_id);
      last_was_unk = true;
      continue;
    }
    // No way to represent the character: HF drops it.
  }
  if (syms.empty()) return absl::OkStatus();
  syms.back().next = -1;

  // Merge lowest rank first; ties go to the leftmost pair.
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[left].next;
    if (right < 0) return;
    auto it = merges_.find(Key(syms[left].id, syms[right].id));
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, left, it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = syms[top.pos];
    if (left.id < 0 || left.next < 0) continue;  // merged away, or nothing to the right
    const Symbol& right = syms[left.next];
    auto it = merges_.find(Key(left.id, right.id));
    if (it == merges_.end() || it->second.result != top.result) continue;  // stale
    const int32_t right_pos = left.next;
    left.id = top.result;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    syms[right_pos].id = -1;
    consider(left.prev);
    consider(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out->push_back(syms[i].id);
  return absl::OkStatus();
}

}  // namespace cascade::tok
