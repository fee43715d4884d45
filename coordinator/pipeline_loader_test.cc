// PipelineLoader with fake workers and a fake first-stage link: the LoadStage requests of a
// plan (layers, KV cache, addresses, the chain of link keys), every stage loaded at once,
// and the two ways a load fails (a stage, the first stage's link).
#include "coordinator/pipeline_loader.h"

#include <set>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class RecordingWorkers : public WorkerClient {
 public:
  absl::Status LoadStage(const WorkerRecord& w, const v1::LoadStageRequest& req) override {
    absl::MutexLock l(&mu_);
    loads_[w.id] = req;
    if (fail_.count(w.id)) return absl::ResourceExhaustedError("out of memory (fake)");
    return absl::OkStatus();
  }
  absl::Status Unload(const WorkerRecord&, uint64_t) override { return absl::OkStatus(); }
  absl::Status Probe(const WorkerRecord&) override { return absl::OkStatus(); }
  void FailLoadsOn(const std::string& id) {
    absl::MutexLock l(&mu_);
    fail_.insert(id);
  }
  std::map<std::string, v1::LoadStageRequest> loads() {
    absl::MutexLock l(&mu_);
    return loads_;
  }

 private:
  absl::Mutex mu_;
  std::set<std::string> fail_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::LoadStageRequest> loads_ ABSL_GUARDED_BY(mu_);
};

class NullSender : public ActivationSender {
 public:
  absl::Status Send(StageFrame) override { return absl::OkStatus(); }
  void Close() override {}
};

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.model_path = "/models/m.gguf";
    options_.results_address = "tcp://coord:7000";
    options_.stage.threads = 3;
    options_.stage.device = DeviceSpec{DeviceKind::kCuda, 1};
    options_.stage.quantized_activations = false;
    // Three stages over workers given in another order than the stages'.
    target_.plan_id = 77;
    for (auto [id, address, data_address] :
         {std::tuple{"a", "a:1", "tcp://a:2"}, {"b", "b:1", ""}, {"c", "c:1", "tcp://c:2"}}) {
      WorkerSpec w;
      w.id = id;
      w.address = address;
      w.data_address = data_address;
      target_.workers.push_back(w);
    }
    target_.plan.kv_blocks = 40;
    target_.plan.kv_block_size = 16;
    target_.plan.kv_type = TensorType::kF16;
    target_.plan.batch_tokens = 256;
    for (auto [worker, first, last] : {std::tuple{2, 0, 2}, {0, 2, 4}, {1, 4, 6}}) {
      StagePlan sp;
      sp.worker = worker;
      sp.layers = {first, last};
      target_.plan.stages.push_back(sp);
    }
    for (const StagePlan& sp : target_.plan.stages) {
      WorkerRecord r;
      r.id = target_.workers[sp.worker].id;
      records_.push_back(r);
    }
  }
  PipelineLoader Loader() {
    return PipelineLoader(
        options_, &workers_,
        [this](const std::string& address,
               const SenderOptions& o) -> absl::StatusOr<std::unique_ptr<ActivationSender>> {
          sender_address_ = address;
          sender_key_ = o.link_key;
          if (!sender_error_.ok()) return sender_error_;
          return std::make_unique<NullSender>();
        });
  }

  PipelineLoaderOptions options_;
  PipelineTarget target_;
  std::vector<WorkerRecord> records_;
  RecordingWorkers workers_;
  std::string sender_address_, sender_key_;
  absl::Status sender_error_;
};

TEST_F(LoaderTest, RequestsCarryThePlanAndChainTheStagesByAddressAndKey) {
  const std::vector<std::string> keys = {"k0", "k1", "k2", "k3"};
  const auto reqs = Loader().MakeRequests(target_, keys);
  ASSERT_EQ(reqs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const v1::LoadStageRequest& r = reqs[i];
    EXPECT_EQ(r.plan_id(), 77u);
    EXPECT_EQ(r.model_path(), "/models/m.gguf");
    EXPECT_EQ(r.stage_index(), i);
    EXPECT_EQ(r.num_stages(), 3);
    EXPECT_EQ(r.first_layer(), 2 * i);
    EXPECT_EQ(r.last_layer(), 2 * i + 2);
    EXPECT_EQ(r.kv_blocks(), 40);
    EXPECT_EQ(r.kv_block_size(), 16);
    EXPECT_EQ(r.kv_type(), v1::KV_CACHE_TYPE_F16);
    EXPECT_EQ(r.max_batch_tokens(), 256);
    EXPECT_EQ(r.coordinator_address(), "tcp://coord:7000");
    EXPECT_EQ(r.threads(), 3);
    EXPECT_EQ(r.device(), "cuda:1");
    EXPECT_TRUE(r.exact());
    EXPECT_EQ(r.inbound_key(), keys[i]);
    EXPECT_EQ(r.outbound_key(), keys[i + 1]);
  }
  // Stage 0 (on c) sends to a's data address; stage 1 (on a) to b, which has none: its
  // gRPC address; the last stage sends results only.
  EXPECT_EQ(reqs[0].next_address(), "tcp://a:2");
  EXPECT_EQ(reqs[1].next_address(), "b:1");
  EXPECT_EQ(reqs[2].next_address(), "");
  // On the gRPC data plane every stage is reached at its gRPC address.
  options_.data_plane = DataPlane::kGrpc;
  EXPECT_EQ(Loader().MakeRequests(target_, keys)[0].next_address(), "a:1");
  EXPECT_EQ(StageDataAddress(DataPlane::kGrpc, target_.workers[0]), "a:1");
  EXPECT_EQ(StageDataAddress(DataPlane::kTcp, target_.workers[0]), "tcp://a:2");
}

TEST_F(LoaderTest, LoadsEveryStageAndDescribesThePipeline) {
  std::vector<std::string> failed;
  auto p = Loader().Load(target_, records_, &failed);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(failed.empty());
  auto loads = workers_.loads();
  ASSERT_EQ(loads.size(), 3u);
  EXPECT_EQ(loads["c"].stage_index(), 0);
  EXPECT_EQ(loads["a"].stage_index(), 1);
  EXPECT_EQ(loads["b"].stage_index(), 2);
  // Fresh keys, one per link, as the stages were given them.
  ASSERT_EQ(p->link_keys.size(), 4u);
  EXPECT_EQ(std::set<std::string>(p->link_keys.begin(), p->link_keys.end()).size(), 4u);
  for (const std::string& k : p->link_keys) EXPECT_EQ(k.size(), 32u);
  EXPECT_EQ(loads["c"].inbound_key(), p->link_keys[0]);
  EXPECT_EQ(loads["b"].outbound_key(), p->results_key());
  // The first stage's link: to c's data address with link 0's key.
  EXPECT_EQ(sender_address_, "tcp://c:2");
  EXPECT_EQ(sender_key_, p->link_keys[0]);
  ASSERT_EQ(p->stages.size(), 3u);
  EXPECT_EQ(p->stages[0].worker_id, "c");
  EXPECT_EQ(p->stages[0].data_address, "tcp://c:2");
  EXPECT_EQ(p->stages[2].data_address, "b:1");
  // What the scheduler attaches.
  EXPECT_EQ(p->plan_id(), 77u);
  EXPECT_EQ(p->spec.num_stages, 3);
  EXPECT_EQ(p->spec.kv_blocks, 40);
  EXPECT_EQ(p->spec.kv_block_size, 16);
  EXPECT_EQ(p->spec.max_batch_tokens, 256);
  EXPECT_NE(p->spec.first_stage, nullptr);
  // Each load has keys of its own.
  auto again = Loader().Load(target_, records_, &failed);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->results_key(), p->results_key());
}

TEST_F(LoaderTest, AFailedStageIsNamedAndItsWorkerListed) {
  workers_.FailLoadsOn("a");
  workers_.FailLoadsOn("b");
  std::vector<std::string> failed;
  auto p = Loader().Load(target_, records_, &failed);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("loading stage 1 on a"));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("out of memory (fake)"));
  EXPECT_THAT(failed, ElementsAre("a", "b"));
  EXPECT_EQ(workers_.loads().size(), 3u);  // every stage was tried at once
  EXPECT_EQ(sender_address_, "");          // no link to a pipeline that did not load
}

TEST_F(LoaderTest, AFirstStageLinkThatCannotBeMadeFailsTheLoadWithNoWorkerBlamed) {
  sender_error_ = absl::InvalidArgumentError("unknown scheme (fake)");
  std::vector<std::string> failed;
  auto p = Loader().Load(target_, records_, &failed);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(failed.empty());
}

TEST_F(LoaderTest, AWorkerPerStageIsRequired) {
  records_.pop_back();
  std::vector<std::string> failed;
  EXPECT_EQ(Loader().Load(target_, records_, &failed).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(workers_.loads().empty());
}

}  // namespace
}  // namespace cascade
