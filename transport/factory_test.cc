// The transport factory and the in-process transport: a scheme picks the transport, a
// frame sent to an inproc:// endpoint goes through the same validation as one from the
// network, and schemes without a registered transport are refused by name.
#include "transport/factory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/inproc.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

FrameExpectations Stage0() {
  FrameExpectations e;
  e.link_key = "key-0";
  e.plan_id = 5;
  e.stage = 0;
  e.first_stage = true;
  e.dim = 8;
  e.vocab_size = 100;
  e.max_batch_tokens = 16;
  e.context_length = 64;
  return e;
}

StageFrame TokenFrame(uint64_t batch, int32_t token) {
  StageFrame f;
  f.plan_id = 5;
  f.batch_id = batch;
  f.stage = 0;
  f.slots.push_back({.token = token, .seq = 1, .pos = 0, .want_logits = false});
  return f;
}

TEST(TransportFactory, InprocFramesAreValidatedLikeNetworkFrames) {
  FrameRouter router;
  auto inbox = std::make_shared<FrameInbox>(Stage0(), 8);
  router.SetInbox(inbox);
  auto receiver = inbox->MakeReceiver();
  auto endpoint = InProcEndpoint::Register("factory-test-stage", {&router, nullptr});
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_EQ(InProcEndpoint::Register("factory-test-stage", {&router, nullptr}).status().code(),
            absl::StatusCode::kAlreadyExists);
  auto sender = MakeActivationSender((*endpoint)->address(), {.link_key = "key-0"});
  ASSERT_TRUE(sender.ok()) << sender.status();
  ASSERT_TRUE((*sender)->Send(TokenFrame(1, 42)).ok());
  auto f = receiver->Receive();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->batch_id, 1u);
  EXPECT_EQ(f->slots[0].token, 42);
  // A token outside the vocabulary: refused, counted, and the batch reported lost.
  ASSERT_TRUE((*sender)->Send(TokenFrame(2, 1000)).ok());
  EXPECT_EQ((*sender)->rejected(), 1u);
  auto lost = receiver->Receive();
  ASSERT_TRUE(lost.has_value());
  EXPECT_THAT(lost->error, HasSubstr("outside the vocabulary"));
  // A sender with another key is refused before anything of its frame is looked at.
  auto stranger = MakeActivationSender((*endpoint)->address(), {.link_key = "guess"});
  ASSERT_TRUE(stranger.ok());
  EXPECT_EQ((*stranger)->Send(TokenFrame(9, 1)).code(), absl::StatusCode::kUnavailable);
  // Once the endpoint is gone, sends fail naming it.
  endpoint->reset();
  absl::Status st = (*sender)->Send(TokenFrame(3, 1));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(st.message()), HasSubstr("inproc://factory-test-stage"));
}

TEST(TransportFactory, InprocResultsReachTheHandler) {
  std::vector<uint64_t> got;
  DataPlaneHandlers h;
  h.results = [&](const v1::StepResult& r, const std::string&) {
    got.push_back(r.batch_id());
    return absl::OkStatus();
  };
  auto endpoint = InProcEndpoint::Register("factory-test-coordinator", h);
  ASSERT_TRUE(endpoint.ok());
  auto sender = MakeResultSender("inproc://factory-test-coordinator");
  ASSERT_TRUE(sender.ok());
  StepResult r;
  r.batch_id = 77;
  ASSERT_TRUE((*sender)->Send(r).ok());
  EXPECT_EQ(got, std::vector<uint64_t>{77});
}

TEST(TransportFactory, NetworkSchemesMakeLazySenders) {
  // Nothing listens on port 1: creating the sender succeeds, its first Send fails.
  for (const char* a : {"tcp://127.0.0.1:1", "grpc://127.0.0.1:1", "127.0.0.1:1"}) {
    auto s = MakeActivationSender(a, {.connect_timeout = std::chrono::milliseconds(200)});
    ASSERT_TRUE(s.ok()) << a << ": " << s.status();
    absl::Status st = (*s)->Send(TokenFrame(1, 1));
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << a;
    EXPECT_THAT(std::string(st.message()), HasSubstr("127.0.0.1:1")) << a;
  }
}

TEST(TransportFactory, UnregisteredAndMalformedAddressesAreRefused) {
  auto mpi = MakeActivationSender("mpi://1");
  EXPECT_EQ(mpi.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(mpi.status().message()), HasSubstr("mpi transport"));
  EXPECT_EQ(MakeResultSender("nccl://0").status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(MakeActivationSender("bogus").status().code(), absl::StatusCode::kInvalidArgument);
  // A registered transport is used for its scheme.
  int made = 0;
  RegisterTransport(Scheme::kMpi, {.activation = [&](const Address& a, const SenderOptions&)
                                       -> absl::StatusOr<std::unique_ptr<ActivationSender>> {
                                     ++made;
                                     EXPECT_EQ(a.rank, 4);
                                     return absl::UnavailableError("test transport");
                                   },
                                   .result = nullptr,
                                   .listen = nullptr});
  EXPECT_EQ(MakeActivationSender("mpi://4").status().message(), "test transport");
  EXPECT_EQ(made, 1);
  EXPECT_EQ(MakeResultSender("mpi://4").status().code(), absl::StatusCode::kUnimplemented);
  UnregisterTransport(Scheme::kMpi);
  EXPECT_EQ(MakeActivationSender("mpi://4").status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace cascade
