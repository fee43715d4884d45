// What a frame asks of a stage's KV cache besides its batch: releases, and the prefix
// cache's evictions, attachments and publications (transport/frame.h), applied the same
// way by a stage's executor and by every follower rank of a tensor-parallel stage, so that
// all ranks' caches stay alike.
//
// Order: ReleaseAndEvict (every frame, an error frame too), AttachPrefixes (before the
// batch; a miss fails the batch, and the coordinator sends its sequences again without
// the prefix), the batch, PublishBlocks (after a batch that computed).
// Not thread-safe: called on the stage's own thread.
#ifndef CASCADE_WORKER_FRAME_CACHE_OPS_H_
#define CASCADE_WORKER_FRAME_CACHE_OPS_H_

#include "absl/status/status.h"
#include "engine/kv_cache.h"
#include "transport/frame.h"

namespace cascade {

void ReleaseAndEvict(const StageFrame& frame, KvCache& kv);
// The first attachment that fails, named; the ones before it stay (a failed batch's
// sequences are released by the coordinator before they are sent again).
absl::Status AttachPrefixes(const StageFrame& frame, KvCache& kv);
// Publications that cannot be made are logged and skipped: the block stays private.
void PublishBlocks(const StageFrame& frame, KvCache& kv);

}  // namespace cascade

#endif  // CASCADE_WORKER_FRAME_CACHE_OPS_H_
