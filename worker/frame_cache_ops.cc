#include "worker/frame_cache_ops.h"

#include "util/logging.h"

namespace cascade {

void ReleaseAndEvict(const StageFrame& frame, KvCache& kv) {
  for (SeqId seq : frame.release) kv.Free(seq);
  for (const BlockName& name : frame.evict) kv.Evict(name);
}

absl::Status AttachPrefixes(const StageFrame& frame, KvCache& kv) {
  for (const PrefixAttach& a : frame.attach) {
    if (absl::Status st = kv.AttachPrefix(a); !st.ok()) return st;
  }
  return absl::OkStatus();
}

void PublishBlocks(const StageFrame& frame, KvCache& kv) {
  for (const BlockPublish& p : frame.publish) {
    if (absl::Status st = kv.Publish(p); !st.ok()) {
      spdlog::warn("prefix cache: batch {}: {}", frame.batch_id, st.message());
    }
  }
}

}  // namespace cascade
