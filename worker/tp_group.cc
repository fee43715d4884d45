#include "worker/tp_group.h"

#include "absl/strings/str_cat.h"
#include "kernels/make_backend.h"
#include "util/logging.h"
#include "worker/frame_cache_ops.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

// The load outcomes of every rank: OK, or the first failure naming its rank.
absl::Status Outcome(Collective& c, const absl::Status& mine) {
  const std::string text = mine.ok() ? "" : std::string(mine.message());
  CASCADE_ASSIGN_OR_RETURN(std::vector<std::string> all, AllGatherStrings(c, text));
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, " of the tensor-parallel group (", c.name(), "): ", all[r]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TpLeader::Send(const v1::TpCommand& cmd) {
  if (stopped_) return absl::FailedPreconditionError("the tensor-parallel group was stopped");
  std::string bytes = cmd.SerializeAsString();
  return BroadcastString(*control_, &bytes, 0);
}

absl::Status TpLeader::BeginLoad(const v1::LoadStageRequest& req) {
  absl::MutexLock lock(&mu_);
  link_key_ = req.inbound_key();
  v1::TpCommand cmd;
  *cmd.mutable_load() = req;
  return Send(cmd);
}

absl::Status TpLeader::FinishLoad(const absl::Status& mine) {
  absl::MutexLock lock(&mu_);
  return Outcome(*control_, mine);
}

absl::Status TpLeader::Mirror(const StageFrame& frame) {
  absl::MutexLock lock(&mu_);
  v1::TpCommand cmd;
  EncodeFrame(frame, link_key_, cmd.mutable_frame());
  return Send(cmd);
}

absl::Status TpLeader::Unload() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::OkStatus();  // the followers have left: nothing is loaded
  v1::TpCommand cmd;
  cmd.mutable_unload();
  return Send(cmd);
}

absl::Status TpLeader::Stop() {
  absl::MutexLock lock(&mu_);
  v1::TpCommand cmd;
  cmd.mutable_stop();
  absl::Status st = Send(cmd);
  stopped_ = true;
  return st;
}

absl::Status TpFollower::Run() {
  for (;;) {
    std::string bytes;
    CASCADE_RETURN_IF_ERROR(BroadcastString(*control_, &bytes, 0));
    v1::TpCommand cmd;
    if (!cmd.ParseFromString(bytes)) {
      return absl::DataLossError(
          absl::StrCat(control_->name(), ": a command from the leader does not parse"));
    }
    switch (cmd.command_case()) {
      case v1::TpCommand::kLoad: {
        absl::Status mine = Load(cmd.load());
        absl::Status all = Outcome(*control_, mine);
        if (!all.ok()) {
          if (!mine.ok()) spdlog::error("loading my slice failed: {}", mine.message());
          stage_.reset();
          loaded_.reset();
          if (all.code() == absl::StatusCode::kUnavailable) return all;  // the group broke
        }
        break;
      }
      case v1::TpCommand::kFrame:
        Process(cmd.frame());
        break;
      case v1::TpCommand::kUnload:
        stage_.reset();
        loaded_.reset();
        break;
      case v1::TpCommand::kStop:
        stage_.reset();
        return absl::OkStatus();
      case v1::TpCommand::COMMAND_NOT_SET:
        return absl::DataLossError(absl::StrCat(control_->name(), ": an empty command"));
    }
  }
}

absl::Status TpFollower::Load(const v1::LoadStageRequest& req) {
  if (loaded_ && stage_ && SameStageRequest(*loaded_, req)) {
    stage_->kv_cache().Clear();  // as the leader does: the new plan starts afresh
  } else {
    stage_.reset();
    loaded_.reset();
    if (!source_ || source_->path() != req.model_path()) {
      source_.reset();
      CASCADE_ASSIGN_OR_RETURN(source_, ModelSource::Open(req.model_path()));
    }
    StageOptions so = StageOptionsFor(req, options_);
    so.tp = compute_;
    CASCADE_ASSIGN_OR_RETURN(
        std::unique_ptr<Backend> backend,
        MakeBackend(DeviceFor(req, options_),
                    {.threads = so.threads, .quantized_activations = so.quantized_activations}));
    CASCADE_ASSIGN_OR_RETURN(stage_, Stage::Create(*source_, so, std::move(backend)));
  }
  expect_ = ExpectationsFor(req, source_->config());
  loaded_ = req;
  return absl::OkStatus();
}

void TpFollower::Process(const v1::ActivationFrame& wire) {
  if (!stage_) return;  // the group failed to load; the leader refuses the frame too
  absl::StatusOr<StageFrame> f = DecodeFrame(wire, expect_);
  if (!f.ok()) {
    spdlog::error("a mirrored frame does not decode: {}", f.status().message());
    return;
  }
  ReleaseAndEvict(*f, stage_->kv_cache());
  if (!f->error.empty() || f->slots.empty()) return;
  // The leader reports failures; the same batch fails here the same way.
  absl::Status st = AttachPrefixes(*f, stage_->kv_cache());
  if (st.ok()) st = stage_->Forward(f->slots, f->hidden, &buffer_);
  if (!st.ok()) {
    spdlog::debug("batch {}: {}", f->batch_id, st.message());
    return;
  }
  PublishBlocks(*f, stage_->kv_cache());
}

}  // namespace cascade
