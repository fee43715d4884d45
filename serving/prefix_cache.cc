#include "serving/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include <xxhash.h>

namespace cascade {

BlockName PrefixCache::NameOf(const BlockName& parent, std::span<const int32_t> block_tokens) {
  // The parent's name seeds the hash of the block's tokens (little-endian int32, as the
  // machines this runs on store them): XXH3-128 over [parent.hi, parent.lo, tokens...].
  std::vector<unsigned char> bytes(2 * sizeof(uint64_t) + block_tokens.size_bytes());
  std::memcpy(bytes.data(), &parent.hi, sizeof(uint64_t));
  std::memcpy(bytes.data() + sizeof(uint64_t), &parent.lo, sizeof(uint64_t));
  std::memcpy(bytes.data() + 2 * sizeof(uint64_t), block_tokens.data(), block_tokens.size_bytes());
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return {h.high64, h.low64};
}

std::vector<BlockName> PrefixCache::Match(std::span<const int32_t> tokens, int64_t max_blocks) {
  std::vector<BlockName> hits;
  BlockName parent;
  const int64_t full = static_cast<int64_t>(tokens.size()) / block_size_;
  for (int64_t b = 0; b < std::min(full, max_blocks); ++b) {
    const auto block = tokens.subspan(b * block_size_, block_size_);
    const BlockName name = NameOf(parent, block);
    auto it = entries_.find(name);
    if (it == entries_.end() || it->second.parent != parent ||
        !std::equal(block.begin(), block.end(), it->second.tokens.begin(),
                    it->second.tokens.end())) {
      break;
    }
    Entry& e = it->second;
    if (e.refs++ == 0) idle_.erase(e.idle_tick);
    hits.push_back(name);
    parent = name;
  }
  return hits;
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
  return true;
}

void PrefixCache::MakeIdle(const BlockName& name, Entry& e) {
  e.idle_tick = ++tick_;
  idle_.emplace(e.idle_tick, name);
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
  entries_.erase(it);
}

std::vector<BlockName> PrefixCache::EvictIdle(int64_t n) {
  std::vector<BlockName> out;
  while (n-- > 0 && !idle_.empty()) {
    const BlockName name = idle_.begin()->second;
    idle_.erase(idle_.begin());
    entries_.erase(name);
    out.push_back(name);
  }
  return out;
}

void PrefixCache::Clear() {
  entries_.clear();
  idle_.clear();
}

int64_t PrefixCache::RefCount(const BlockName& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? 0 : it->second.refs;
}

}  // namespace cascade
