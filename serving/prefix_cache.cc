#include "serving/prefix_cache.h"

#include <algorithm>
#include <limits>

// The streaming state's definition (a stack object, no allocation per name).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace cascade {

int64_t PrefixView::CachedTokens(std::span<const int32_t> prompt) const {
  int block_size;
  {
    absl::MutexLock lock(&mu_);
    block_size = block_size_;
  }
  if (block_size <= 0) return 0;
  // Named outside the lock: the scheduler thread updates the view as it caches.
  const std::vector<BlockName> names =
      PrefixCache::ChainNames(prompt, block_size, std::numeric_limits<int64_t>::max());
  absl::MutexLock lock(&mu_);
  if (block_size_ != block_size) return 0;
  int64_t held = 0;
  while (held < static_cast<int64_t>(names.size()) && names_.contains(names[held])) ++held;
  return held * block_size;
}

void PrefixView::Reset(int block_size) {
  absl::MutexLock lock(&mu_);
  names_.clear();
  block_size_ = block_size;
}

void PrefixView::Add(const BlockName& name) {
  absl::MutexLock lock(&mu_);
  names_.insert(name);
}

void PrefixView::Remove(std::span<const BlockName> names) {
  absl::MutexLock lock(&mu_);
  for (const BlockName& n : names) names_.erase(n);
}

PrefixCache::PrefixCache(int block_size, PrefixView* view)
    : block_size_(block_size), view_(view) {
  if (view_ != nullptr) view_->Reset(block_size);
}

BlockName PrefixCache::NameOf(const BlockName& parent, std::span<const int32_t> block_tokens) {
  // XXH3-128 over [parent.hi, parent.lo, the tokens as the machine stores int32 (little-
  // endian on every machine this runs on)], streamed: no copy.
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  const uint64_t head[2] = {parent.hi, parent.lo};
  XXH3_128bits_update(&state, head, sizeof(head));
  XXH3_128bits_update(&state, block_tokens.data(), block_tokens.size_bytes());
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return {h.high64, h.low64};
}

std::vector<BlockName> PrefixCache::ChainNames(std::span<const int32_t> tokens, int block_size,
                                               int64_t max_blocks, BlockName parent) {
  std::vector<BlockName> names;
  const int64_t full = std::min(static_cast<int64_t>(tokens.size()) / block_size, max_blocks);
  for (int64_t b = 0; b < full; ++b) {
    parent = NameOf(parent, tokens.subspan(static_cast<size_t>(b) * block_size, block_size));
    names.push_back(parent);
  }
  return names;
}

int64_t PrefixCache::Match(std::span<const int32_t> tokens, std::span<const BlockName> names) {
  int64_t hits = 0;
  BlockName parent;
  for (const BlockName& name : names) {
    const auto block = tokens.subspan(static_cast<size_t>(hits) * block_size_, block_size_);
    auto it = entries_.find(name);
    if (it == entries_.end() || it->second.parent != parent ||
        !std::equal(block.begin(), block.end(), it->second.tokens.begin(),
                    it->second.tokens.end())) {
      break;
    }
    Entry& e = it->second;
    if (e.refs++ == 0) idle_.erase(e.idle_tick);
    ++hits;
    parent = name;
  }
  return hits;
}

PrefixCache::PartialHit PrefixCache::MatchPartial(const BlockName& parent,
                                                  std::span<const int32_t> next,
                                                  int32_t max_rows) {
  PartialHit best;
  auto kids = children_.find(parent);
  if (kids == children_.end()) return best;
  const int32_t limit =
      std::min<int32_t>({max_rows, block_size_ - 1, static_cast<int32_t>(next.size())});
  for (const BlockName& name : kids->second) {
    const std::vector<int32_t>& tokens = entries_.at(name).tokens;
    int32_t run = 0;
    while (run < limit && tokens[run] == next[run]) ++run;
    if (run > best.rows) best = {name, run};
  }
  if (best.rows > 0) {
    Entry& e = entries_.at(best.name);
    if (e.refs++ == 0) idle_.erase(e.idle_tick);
  }
  return best;
}

bool PrefixCache::Insert(const BlockName& name, const BlockName& parent,
                         std::span<const int32_t> tokens, bool referenced) {
  auto [it, inserted] = entries_.try_emplace(name);
  if (!inserted) return false;
  Entry& e = it->second;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.refs = referenced ? 1 : 0;
  if (!referenced) MakeIdle(name, e);
  children_[parent].push_back(name);
  if (view_ != nullptr) view_->Add(name);
  return true;
}

void PrefixCache::MakeIdle(const BlockName& name, Entry& e) {
  e.idle_tick = ++tick_;
  idle_.emplace(e.idle_tick, name);
}

void PrefixCache::Unlink(const BlockName& name, const Entry& e) {
  auto kids = children_.find(e.parent);
  if (kids == children_.end()) return;
  std::erase(kids->second, name);
  if (kids->second.empty()) children_.erase(kids);
}

void PrefixCache::Release(std::span<const BlockName> names) {
  for (auto n = names.rbegin(); n != names.rend(); ++n) {
    auto it = entries_.find(*n);
    if (it == entries_.end() || it->second.refs == 0) continue;
    if (--it->second.refs == 0) MakeIdle(*n, it->second);
  }
}

void PrefixCache::Forget(const BlockName& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  if (it->second.refs == 0) idle_.erase(it->second.idle_tick);
  Unlink(name, it->second);
  entries_.erase(it);
  if (view_ != nullptr) view_->Remove({&name, 1});
}

std::vector<BlockName> PrefixCache::EvictIdle(int64_t n) {
  std::vector<BlockName> out;
  while (n-- > 0 && !idle_.empty()) {
    const BlockName name = idle_.begin()->second;
    idle_.erase(idle_.begin());
    auto it = entries_.find(name);
    Unlink(name, it->second);
    entries_.erase(it);
    out.push_back(name);
  }
  if (view_ != nullptr) view_->Remove(out);
  return out;
}

int64_t PrefixCache::RefCount(const BlockName& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? 0 : it->second.refs;
}

}  // namespace cascade
