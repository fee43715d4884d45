// Tests of the TCP data plane: the wire format's checks (every malformed header, a body cut
// short, a stalled peer), frames carried in order through the same validation as the gRPC
// path, rejections answered, garbage and vanished peers handled without disturbing other
// connections, reconnection after the receiver restarts, and the connection limit.
#include "transport/tcp_link.h"
#include "transport/factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

namespace cascade {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr int64_t kDim = 4;

constexpr char kKey[] = "link-1-key";

FrameExpectations Stage1() {
  FrameExpectations e;
  e.link_key = kKey;
  e.plan_id = 11;
  e.stage = 1;
  e.dim = kDim;
  e.vocab_size = 100;
  e.max_batch_tokens = 16;
  e.context_length = 64;
  return e;
}

StageFrame Frame(uint64_t batch, int tokens) {
  StageFrame f;
  f.plan_id = 11;
  f.batch_id = batch;
  f.stage = 1;
  for (int i = 0; i < tokens; ++i) {
    TokenSlot s;
    s.seq = 100 + i;
    s.pos = i;
    s.token = 7;
    f.slots.push_back(s);
    for (int d = 0; d < kDim; ++d)
      f.hidden.push_back(static_cast<float>(batch * 1000 + i * 10 + d));
  }
  return f;
}

// Raw bytes of one frame with the given header fields.
std::string RawFrame(uint32_t magic, uint16_t version, uint16_t kind, uint32_t length,
                     const std::string& body) {
  std::string s(kTcpHeaderBytes, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((magic >> (8 * i)) & 0xff);
  s[4] = static_cast<char>(version & 0xff);
  s[5] = static_cast<char>(version >> 8);
  s[6] = static_cast<char>(kind & 0xff);
  s[7] = static_cast<char>(kind >> 8);
  for (int i = 0; i < 4; ++i) s[8 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return s + body;
}

// Reads one frame from the far end of a socket pair after `bytes` were written (and the
// writer closed, when `close_after`).
absl::StatusOr<ReadOutcome> ReadAfter(const std::string& bytes, bool close_after,
                                      std::string* body = nullptr,
                                      milliseconds stall = std::chrono::seconds(5)) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return absl::InternalError("socketpair");
  Fd a(sv[0]), b(sv[1]);
  if (!bytes.empty()) {
    EXPECT_EQ(::write(a.get(), bytes.data(), bytes.size()), ssize_t(bytes.size()));
  }
  if (close_after) a.reset();
  TcpFrameKind kind;
  std::string scratch;
  SocketStream stream(std::move(b));
  return ReadFrame(stream, 1 << 20, &kind, body ? body : &scratch, stall);
}

TEST(TcpWire, AFrameRoundTripsAndACleanCloseIsNotAnError) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  SocketStream a{Fd(sv[0])}, b{Fd(sv[1])};
  v1::FrameAck ack;
  ack.set_batch_id(42);
  ack.set_error("because");
  std::string scratch;
  ASSERT_TRUE(WriteFrame(a, TcpFrameKind::kAck, ack, &scratch).ok());
  a.Shutdown(SHUT_RDWR);
  TcpFrameKind kind;
  std::string body;
  auto got = ReadFrame(b, 1 << 20, &kind, &body);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(*got, ReadOutcome::kFrame);
  EXPECT_EQ(kind, TcpFrameKind::kAck);
  v1::FrameAck back;
  ASSERT_TRUE(back.ParseFromString(body));
  EXPECT_EQ(back.batch_id(), 42u);
  EXPECT_EQ(back.error(), "because");
  got = ReadFrame(b, 1 << 20, &kind, &body);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, ReadOutcome::kClosed);
}

TEST(TcpWire, EveryBadHeaderIsNamed) {
  auto magic = ReadAfter(RawFrame(0x20544547, 1, 1, 0, ""), true);  // "GET "
  EXPECT_EQ(magic.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(magic.status().message()), HasSubstr("not a Cascade data-plane frame"));
  auto version = ReadAfter(RawFrame(kTcpWireMagic, 2, 1, 0, ""), true);
  EXPECT_THAT(std::string(version.status().message()), HasSubstr("version 2"));
  auto kind = ReadAfter(RawFrame(kTcpWireMagic, 1, 9, 0, ""), true);
  EXPECT_THAT(std::string(kind.status().message()), HasSubstr("unknown kind 9"));
  // A length over the limit is refused from the header alone, before any allocation.
  auto huge = ReadAfter(RawFrame(kTcpWireMagic, 1, 1, 0xFFFFFFFFu, ""), true);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("4294967295 bytes exceeds"));
}

TEST(TcpWire, TruncatedAndStalledFramesAreErrors) {
  auto body = ReadAfter(RawFrame(kTcpWireMagic, 1, 1, 100, std::string(10, 'x')), true);
  EXPECT_EQ(body.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(body.status().message()), HasSubstr("after 10 of 100 bytes"));
  auto header = ReadAfter(RawFrame(kTcpWireMagic, 1, 1, 0, "").substr(0, 5), true);
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(header.status().message()), HasSubstr("header after 5 of 12"));
  // The writer stays connected but sends no more: a stalled peer, not an idle link.
  auto stalled = ReadAfter(RawFrame(kTcpWireMagic, 1, 1, 100, std::string(10, 'x')), false, nullptr,
                           milliseconds(200));
  EXPECT_EQ(stalled.status().code(), absl::StatusCode::kDeadlineExceeded);
}

// A stage's receiving end: StagePipe service + inbox + TCP server.
class TcpStage {
 public:
  explicit TcpStage(int port = 0, int max_connections = 64)
      : inbox_(std::make_shared<FrameInbox>(Stage1(), 64)), receiver_(inbox_->MakeReceiver()) {
    router_.SetInbox(inbox_);
    auto s = TcpFrameServer::Start(absl::StrCat("127.0.0.1:", port), "test stage",
                                   DataPlaneHandler({&router_, nullptr}), max_connections);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) server_ = std::move(*s);
  }
  ~TcpStage() {
    inbox_->Close();
    if (server_) server_->Shutdown();
  }
  int port() const { return server_ ? server_->port() : 0; }
  std::string address() const { return absl::StrCat("tcp://127.0.0.1:", port()); }
  std::optional<StageFrame> Next() { return receiver_->Receive(); }
  uint64_t rejected() const { return inbox_->rejected(); }
  // Waits up to 5 s until the server serves n connections.
  bool WaitForConnections(int n) {
    for (int i = 0; i < 500; ++i) {
      if (server_->open_connections() == n) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }
  void Shutdown() { server_->Shutdown(); }
  void CloseConnections() { server_->CloseConnections(); }

 private:
  FrameRouter router_;
  std::shared_ptr<FrameInbox> inbox_;
  std::unique_ptr<ActivationReceiver> receiver_;
  std::unique_ptr<TcpFrameServer> server_;
};

// A raw client connection to a stage; Closed() waits for the server to drop it.
struct RawClient {
  explicit RawClient(int port) {
    auto f = ConnectTcp({"127.0.0.1", port}, std::chrono::seconds(5));
    EXPECT_TRUE(f.ok()) << f.status();
    if (f.ok()) fd = std::move(*f);
  }
  void Write(const std::string& s) { ::send(fd.get(), s.data(), s.size(), MSG_NOSIGNAL); }
  bool ClosedByPeer(milliseconds within = std::chrono::seconds(5)) {
    timeval tv{static_cast<time_t>(within.count() / 1000),
               static_cast<suseconds_t>((within.count() % 1000) * 1000)};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    for (;;) {
      const ssize_t n = ::recv(fd.get(), &c, 1, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }
  Fd fd;
};

TEST(TcpActivationSender, FramesArriveInOrderWithTheirPayload) {
  TcpStage stage;
  auto owned = *MakeActivationSender(stage.address(), {.link_key = kKey});
  ActivationSender& sender = *owned;
  constexpr int kFrames = 50;
  auto sent = std::async(std::launch::async, [&] {
    for (int b = 0; b < kFrames; ++b) {
      if (!sender.Send(Frame(b, 1 + b % 5)).ok()) return false;
    }
    return true;
  });
  for (int b = 0; b < kFrames; ++b) {
    auto f = stage.Next();
    ASSERT_TRUE(f.has_value());
    const StageFrame want = Frame(b, 1 + b % 5);
    EXPECT_EQ(f->batch_id, want.batch_id);
    ASSERT_EQ(f->slots.size(), want.slots.size());
    EXPECT_EQ(f->slots.back().seq, want.slots.back().seq);
    EXPECT_EQ(f->hidden, want.hidden);
  }
  EXPECT_TRUE(sent.get());
  EXPECT_EQ(sender.rejected(), 0u);
}

TEST(TcpActivationSender, ARejectedFrameIsAnsweredAndTheLinkKeepsWorking) {
  TcpStage stage;
  auto owned = *MakeActivationSender(stage.address(), {.link_key = kKey});
  ActivationSender& sender = *owned;
  StageFrame bad = Frame(5, 2);
  bad.hidden.pop_back();  // shape [2, 4] with 7 floats
  ASSERT_TRUE(sender.Send(bad).ok());
  // The stage learns of the lost batch as an error frame, the sender through an ack.
  auto err = stage.Next();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->batch_id, 5u);
  EXPECT_THAT(err->error, HasSubstr("rejected the frame"));
  for (int i = 0; i < 200 && sender.rejected() == 0; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(sender.rejected(), 1u);
  ASSERT_TRUE(sender.Send(Frame(6, 1)).ok());
  auto good = stage.Next();
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->batch_id, 6u);
  EXPECT_TRUE(good->error.empty());
}

TEST(TcpFrameServer, GarbageAndBrokenFramesCloseOnlyTheirConnection) {
  TcpStage stage;
  auto owned = *MakeActivationSender(stage.address(), {.link_key = kKey});
  ActivationSender& sender = *owned;
  ASSERT_TRUE(sender.Send(Frame(1, 1)).ok());
  ASSERT_TRUE(stage.Next().has_value());
  {
    RawClient http(stage.port());
    http.Write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(http.ClosedByPeer());
  }
  {
    RawClient undecodable(stage.port());
    undecodable.Write(RawFrame(kTcpWireMagic, 1, 1, 6, "\xff\xff\xff\xff\xff\xff"));
    EXPECT_TRUE(undecodable.ClosedByPeer());
  }
  {
    RawClient wrong_kind(stage.port());
    wrong_kind.Write(
        RawFrame(kTcpWireMagic, 1, static_cast<uint16_t>(TcpFrameKind::kResult), 0, ""));
    EXPECT_TRUE(wrong_kind.ClosedByPeer());
  }
  {
    RawClient truncated(stage.port());
    truncated.Write(RawFrame(kTcpWireMagic, 1, 1, 1000, std::string(10, '\0')));
  }  // closed mid-frame
  // None of it reached the stage, and the sender's connection is untouched.
  ASSERT_TRUE(sender.Send(Frame(2, 3)).ok());
  auto f = stage.Next();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->batch_id, 2u);
  EXPECT_TRUE(f->error.empty());
  EXPECT_EQ(stage.rejected(), 0u);  // no frame was rejected: none was decoded
}

TEST(TcpFrameServer, AtTheLimitIdleConnectionsMakeRoomAndTheLinkKeepsItsPlace) {
  TcpStage stage(0, 2);
  auto owned = *MakeActivationSender(stage.address(), {.link_key = kKey});
  ASSERT_TRUE(owned->Send(Frame(1, 1)).ok());  // the pipeline's link: it has delivered
  ASSERT_TRUE(stage.Next().has_value());
  RawClient idle(stage.port());
  ASSERT_TRUE(stage.WaitForConnections(2));
  // A third connection: the idle one (no frame yet) is dropped to make room for it.
  RawClient newcomer(stage.port());
  EXPECT_TRUE(idle.ClosedByPeer());
  EXPECT_FALSE(newcomer.ClosedByPeer(milliseconds(100)));
  // The link that proved itself is never the one dropped.
  RawClient another(stage.port());
  EXPECT_TRUE(newcomer.ClosedByPeer());
  ASSERT_TRUE(owned->Send(Frame(2, 1)).ok());
  auto f = stage.Next();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->batch_id, 2u);
}

TEST(TcpFrameServer, AFrameWithoutTheLinkKeyClosesItsConnectionAndTouchesNoBatch) {
  TcpStage stage;
  auto stranger = *MakeActivationSender(stage.address(), {.link_key = "a guess"});
  ASSERT_TRUE(stranger->Send(Frame(7, 1)).ok());
  // Refused before anything of it is looked at: no error frame reaches the stage (that
  // would let a stranger cancel other people's batches), and the connection is dropped.
  // The two senders use different connections, so wait for the refusal to be counted
  // before the owned frame goes: nothing orders one connection's reads after another's.
  for (int i = 0; i < 500 && stage.rejected() == 0; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  auto owned = *MakeActivationSender(stage.address(), {.link_key = kKey});
  ASSERT_TRUE(owned->Send(Frame(8, 1)).ok());
  auto f = stage.Next();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->batch_id, 8u);
  EXPECT_TRUE(f->error.empty());
  EXPECT_EQ(stage.rejected(), 1u);
  // It may connect again; each of its frames meets the same end.
  for (uint64_t b = 20; b < 25; ++b) {
    (void)stranger->Send(Frame(b, 1));
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(owned->Send(Frame(9, 1)).ok());
  auto g = stage.Next();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->batch_id, 9u);  // nothing of the stranger's came in between
  EXPECT_GE(stage.rejected(), 2u);
}

TEST(TcpFrameServer, ANewConnectionMustStartAFrameInTime) {
  TcpStage stage;
  RawClient quiet(stage.port());
  // Dropped after the first-frame deadline (10 s), not kept forever.
  EXPECT_TRUE(quiet.ClosedByPeer(std::chrono::seconds(15)));
}

TEST(TcpActivationSender, UnreachableNextStageIsNamedInTheError) {
  auto sender = MakeTcpActivationSender({"127.0.0.1", 1}, {.connect_timeout = milliseconds(300), .link_key = ""});
  absl::Status st = sender->Send(Frame(1, 1));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(st.message()), HasSubstr("next stage at tcp://127.0.0.1:1"));
}

TEST(TcpActivationSender, CloseAndStopReconnectingEndAWaitForConnection) {
  for (bool close : {true, false}) {
    auto owned = MakeTcpActivationSender({"127.0.0.1", 1}, {.connect_timeout = std::chrono::seconds(60), .link_key = ""});
    ActivationSender& sender = *owned;
    auto send = std::async(std::launch::async, [&] { return sender.Send(Frame(1, 1)); });
    std::this_thread::sleep_for(milliseconds(200));
    if (close) {
      sender.Close();
    } else {
      sender.StopReconnecting();
    }
    ASSERT_EQ(send.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    EXPECT_EQ(send.get().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(sender.Send(Frame(2, 1)).code(), absl::StatusCode::kUnavailable);
  }
}

TEST(TcpActivationSender, ReconnectsAfterTheNextStageDropsTheConnection) {
  TcpStage stage;
  auto sender = *MakeActivationSender(stage.address(),
                                      {.connect_timeout = milliseconds(2000), .link_key = kKey});
  ASSERT_TRUE(sender->Send(Frame(1, 1)).ok());
  ASSERT_TRUE(stage.Next().has_value());
  ASSERT_TRUE(stage.WaitForConnections(1));
  // The stage drops every connection (as a restarted peer would) and keeps listening.
  stage.CloseConnections();
  ASSERT_TRUE(stage.WaitForConnections(0));
  // Sends go on. A Send that finds the link broken reconnects; one that wrote into the
  // dying connection before its end was seen may fail (Unavailable) or be lost, and is
  // never resent. What arrives arrives whole and in order, and the link works again.
  std::vector<uint64_t> ok;
  for (uint64_t b = 2; b < 12; ++b) {
    absl::Status st = sender->Send(Frame(b, 2));
    if (st.ok()) {
      ok.push_back(b);
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_FALSE(ok.empty());
  ASSERT_EQ(ok.back(), 11u);
  uint64_t last = 1;
  for (;;) {
    auto f = stage.Next();
    ASSERT_TRUE(f.has_value());
    EXPECT_TRUE(f->error.empty());
    EXPECT_GT(f->batch_id, last);
    EXPECT_EQ(f->hidden, Frame(f->batch_id, 2).hidden);
    last = f->batch_id;
    if (last == 11) break;
  }
}

TEST(TcpResultSender, ResultsReachTheHandler) {
  std::promise<v1::StepResult> got;
  DataPlaneHandlers handlers;
  handlers.results = [&](const v1::StepResult& r, const std::string&) {
    got.set_value(r);
    return absl::OkStatus();
  };
  auto server = TcpFrameServer::Start("127.0.0.1:0", "test coordinator", DataPlaneHandler(handlers));
  ASSERT_TRUE(server.ok()) << server.status();
  auto sender = *MakeResultSender(absl::StrCat("tcp://127.0.0.1:", (*server)->port()));
  StepResult r;
  r.plan_id = 3;
  r.batch_id = 9;
  r.tokens.push_back({.seq = 4, .token = 17, .logprob = -0.5f, .position = 12, .top = {}});
  ASSERT_TRUE(sender->Send(r).ok());
  auto fut = got.get_future();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const v1::StepResult back = fut.get();
  EXPECT_EQ(back.batch_id(), 9u);
  ASSERT_EQ(back.tokens_size(), 1);
  EXPECT_EQ(back.tokens(0).token(), 17);
  EXPECT_EQ(back.tokens(0).position(), 12);
  sender->Close();
}

}  // namespace
}  // namespace cascade
