// The MPI data plane between two ranks (ctest: mpirun -np 2, label "mpi"): frames arrive
// in order and validated, results come back, refused frames are counted at the sender,
// frames without the link key reach nothing, and a message over the receiver's limit is
// dropped before any buffer is sized from it, after which the link still works.
#include "transport/mpi_link.h"

#include <mpi.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

FrameExpectations Stage1() {
  FrameExpectations e;
  e.link_key = "key-into-1";
  e.plan_id = 7;
  e.stage = 1;
  e.dim = 4;
  e.vocab_size = 100;
  e.max_batch_tokens = 16;
  e.context_length = 64;
  return e;
}

StageFrame Frame(uint64_t batch, uint64_t plan = 7) {
  StageFrame f;
  f.plan_id = plan;
  f.batch_id = batch;
  f.stage = 1;
  f.slots = {{5, 11, static_cast<int32_t>(batch), true}};
  f.hidden = {1, 2, 3, static_cast<float>(batch)};
  return f;
}

// Waits until fn() or 10 s pass.
template <typename Fn>
bool Eventually(Fn fn) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!fn()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(MpiDataPlane, FramesInOrderResultsBackAndRefusals) {
  auto plane = MpiDataPlane::Start(MPI_COMM_WORLD);
  ASSERT_TRUE(plane.ok()) << plane.status();
  MpiDataPlane& p = **plane;
  EXPECT_EQ(p.address(), "mpi://" + std::to_string(Rank()));
  if (Rank() == 1) {
    FrameRouter router;
    auto inbox = std::make_shared<FrameInbox>(Stage1(), 64);
    router.SetInbox(inbox);
    ASSERT_TRUE(p.SetHandlers({&router, nullptr}).ok());
    MPI_Barrier(MPI_COMM_WORLD);  // rank 1 takes frames from here on
    auto receiver = inbox->MakeReceiver();
    for (uint64_t b = 0; b < 50; ++b) {
      std::optional<StageFrame> f = receiver->Receive();
      ASSERT_TRUE(f.has_value());
      ASSERT_EQ(f->batch_id, b);
      EXPECT_EQ(f->hidden[3], static_cast<float>(b));
    }
    // The refused frames (a wrong plan: answered; a wrong key: not) never reached the stage;
    // the router counted both.
    EXPECT_TRUE(Eventually([&] { return router.rejected() == 2; })) << router.rejected();
    SenderOptions o;
    o.link_key = "results-key";
    auto results = p.MakeResultSender(0, o);
    ASSERT_TRUE(results.ok());
    for (uint64_t b = 0; b < 10; ++b) {
      StepResult r;
      r.plan_id = 7;
      r.batch_id = b;
      r.tokens = {{11, static_cast<int32_t>(b), 0.0f, static_cast<int32_t>(b) + 1, {}}};
      ASSERT_TRUE((*results)->Send(std::move(r)).ok());
    }
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 has its results
    p.ClearHandlers({&router, nullptr});
  } else if (Rank() == 0) {
    absl::Mutex mu;
    std::vector<uint64_t> got;
    DataPlaneHandlers h;
    h.results = [&](const v1::StepResult& r, const std::string& peer) {
      EXPECT_EQ(peer, "mpi://1");
      EXPECT_EQ(r.link_key(), "results-key");
      absl::MutexLock lock(&mu);
      got.push_back(r.batch_id());
      return absl::OkStatus();
    };
    ASSERT_TRUE(p.SetHandlers(h).ok());
    EXPECT_EQ(p.SetHandlers(h).code(), absl::StatusCode::kAlreadyExists);
    // Frames that reach a rank before it runs a stage are dropped (the coordinator routes
    // to a stage only once it is loaded), so wait for rank 1's handlers.
    MPI_Barrier(MPI_COMM_WORLD);
    SenderOptions o;
    o.link_key = "key-into-1";
    auto sender = p.MakeActivationSender(1, o);
    ASSERT_TRUE(sender.ok());
    for (uint64_t b = 0; b < 50; ++b) ASSERT_TRUE((*sender)->Send(Frame(b)).ok());
    ASSERT_TRUE((*sender)->Send(Frame(99, /*plan=*/8)).ok());  // refused with an answer
    SenderOptions stranger;
    stranger.link_key = "not-the-key";
    auto other = p.MakeActivationSender(1, stranger);
    ASSERT_TRUE((*other)->Send(Frame(100)).ok());  // refused silently
    EXPECT_TRUE(Eventually([&] { return (*sender)->rejected() == 1; }));
    EXPECT_TRUE(Eventually([&] {
      absl::MutexLock lock(&mu);
      return got.size() == 10;
    }));
    {
      absl::MutexLock lock(&mu);
      for (uint64_t b = 0; b < got.size(); ++b) EXPECT_EQ(got[b], b);
    }
    (*sender)->Close();
    EXPECT_THAT((*sender)->Send(Frame(1)).message(), ::testing::HasSubstr("closed"));
    MPI_Barrier(MPI_COMM_WORLD);
    p.ClearHandlers(h);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  p.Shutdown();
}

TEST(MpiDataPlane, AnOversizedMessageIsDroppedAndTheLinkGoesOn) {
  // Rank 1 takes at most 64 KiB; rank 0 may send up to the default limit.
  auto plane = MpiDataPlane::Start(MPI_COMM_WORLD, Rank() == 1 ? 64 << 10 : kMaxMessageBytes);
  ASSERT_TRUE(plane.ok());
  MpiDataPlane& p = **plane;
  if (Rank() == 1) {
    FrameRouter router;
    auto inbox = std::make_shared<FrameInbox>(Stage1(), 8);
    router.SetInbox(inbox);
    ASSERT_TRUE(p.SetHandlers({&router, nullptr}).ok());
    MPI_Barrier(MPI_COMM_WORLD);  // rank 1 takes frames from here on
    std::optional<StageFrame> f = inbox->MakeReceiver()->Receive();
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->batch_id, 2u);  // the 1 MiB frame before it never arrived
    EXPECT_EQ(p.oversized(), 1u);
    MPI_Barrier(MPI_COMM_WORLD);
    p.ClearHandlers({&router, nullptr});
  } else if (Rank() == 0) {
    MPI_Barrier(MPI_COMM_WORLD);  // wait for rank 1's handlers
    SenderOptions o;
    o.link_key = "key-into-1";
    auto sender = p.MakeActivationSender(1, o);
    StageFrame big = Frame(1);
    big.hidden.assign(1 << 18, 0.5f);  // 1 MiB
    EXPECT_TRUE((*sender)->Send(std::move(big)).ok());
    EXPECT_TRUE((*sender)->Send(Frame(2)).ok());
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  p.Shutdown();
}

TEST(MpiDataPlane, TheFactorySendsToRegisteredRanks) {
  auto plane = MpiDataPlane::Start(MPI_COMM_WORLD);
  ASSERT_TRUE(plane.ok());
  (*plane)->RegisterWithFactory();
  EXPECT_TRUE(MakeActivationSender("mpi://1").ok());
  EXPECT_THAT(MakeActivationSender("mpi://99").status().message(),
              ::testing::HasSubstr("this MPI job has"));
  auto listener = ListenOnTransport(Scheme::kMpi, {nullptr, [](const v1::StepResult&, const std::string&) {
                                                      return absl::OkStatus();
                                                    }});
  ASSERT_TRUE(listener.ok());
  EXPECT_EQ((*listener)->address(), "mpi://" + std::to_string(Rank()));
  listener->reset();
  (*plane)->Shutdown();
  EXPECT_EQ(MakeActivationSender("mpi://1").status().code(), absl::StatusCode::kUnimplemented);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace cascade

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  if (cascade::Rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    std::unique_ptr<::testing::TestEventListener> quiet(
        listeners.Release(listeners.default_result_printer()));
  }
  const int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
