#include "coordinator/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using Clock = std::chrono::steady_clock;

// A plain TCP client: the tests need to send what no HTTP library would.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  void Send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // Reads until the peer closes, `until` appears, or the timeout passes.
  std::string Read(std::chrono::milliseconds timeout, const std::string& until = "") {
    std::string out;
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      const int ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (::poll(&p, 1, std::max(ms, 1)) <= 0) break;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      if (!until.empty() && absl::StrContains(out, until)) break;
    }
    return out;
  }
  // True when the server closed the connection within the timeout.
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char buf[4096];
        ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
        if (n <= 0) return true;
      }
    }
    return false;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string Get(int port, const std::string& path) {
  RawClient c(port);
  c.Send(absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  return c.Read(std::chrono::seconds(10));
}

// A reply that becomes known when the test says so, from another thread.
class Deferred final : public HttpReply {
 public:
  struct Shared {
    absl::Mutex mu;
    std::function<void()> wake ABSL_GUARDED_BY(mu);
    std::vector<std::string> chunks ABSL_GUARDED_BY(mu);
    bool ended ABSL_GUARDED_BY(mu) = false;
    std::atomic<bool> abandoned{false};
    void Add(std::string chunk, bool end) {
      std::function<void()> w;
      {
        absl::MutexLock lock(&mu);
        chunks.push_back(std::move(chunk));
        ended = end;
        w = wake;
      }
      if (w) w();
    }
  };
  Deferred(std::shared_ptr<Shared> s, bool streamed) : s_(std::move(s)), streamed_(streamed) {}
  void SetWake(std::function<void()> wake) override {
    absl::MutexLock lock(&s_->mu);
    s_->wake = std::move(wake);
  }
  std::optional<HttpHead> Head() override {
    absl::MutexLock lock(&s_->mu);
    HttpHead h;
    if (streamed_) {
      h.streamed = true;
      return h;
    }
    if (!s_->ended) return std::nullopt;
    for (auto& c : s_->chunks) h.body += c;
    return h;
  }
  bool Body(std::string* out) override {
    absl::MutexLock lock(&s_->mu);
    for (auto& c : s_->chunks) *out += c;
    s_->chunks.clear();
    return !s_->ended;
  }
  void Abandon() override { s_->abandoned = true; }

 private:
  std::shared_ptr<Shared> s_;
  bool streamed_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions o = {}) {
    if (o.listen.empty()) o.listen = "127.0.0.1:0";
    auto s = HttpServer::Start(o, [this](HttpRequest r) -> std::unique_ptr<HttpReply> {
      ++calls_;
      if (r.path == "/deferred") return std::make_unique<Deferred>(shared_, false);
      if (r.path == "/stream") return std::make_unique<Deferred>(shared_, true);
      HttpHead h;
      h.headers = {{"X-Method", r.method}};
      h.body = absl::StrCat("path=", r.path, " body=", r.body, " ct=", r.Header("content-type"));
      return ImmediateReply(std::move(h));
    });
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  int port() const { return server_->port(); }

  std::unique_ptr<HttpServer> server_;
  std::shared_ptr<Deferred::Shared> shared_ = std::make_shared<Deferred::Shared>();
  std::atomic<int> calls_{0};
};

TEST_F(HttpServerTest, ServesRequestsWithBodiesAndKeepAlive) {
  Start();
  RawClient c(port());
  ASSERT_TRUE(c.connected());
  const std::string body = R"({"a":1})";
  for (int i = 0; i < 3; ++i) {  // three requests on one kept-alive connection
    c.Send(absl::StrCat("POST /x?q=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Content-Length: ",
                        body.size(), "\r\n\r\n", body));
    const std::string r = c.Read(std::chrono::seconds(10), "ct=application/json");
    EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 200")) << r;
    EXPECT_TRUE(absl::StrContains(r, "path=/x body={\"a\":1}")) << r;
    EXPECT_TRUE(absl::StrContains(r, "X-Method: POST")) << r;
  }
  EXPECT_EQ(calls_.load(), 3);
}

TEST_F(HttpServerTest, MalformedContentLengthIs400AndOversizedBodyIs413Unread) {
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  Start(o);
  for (const char* cl : {"-1", "abc", "1 2", "", "+5"}) {
    RawClient c(port());
    c.Send(absl::StrCat("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: ", cl, "\r\n\r\n{}"));
    const std::string r = c.Read(std::chrono::seconds(5), "\r\n\r\n");
    EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 400")) << "Content-Length: " << cl << " -> " << r;
  }
  {  // a length no server could take
    RawClient c(port());
    c.Send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n");
    EXPECT_TRUE(absl::StartsWith(c.Read(std::chrono::seconds(5), "\r\n\r\n"), "HTTP/1.1 413"));
  }
  RawClient big(port());
  big.Send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");  // body never sent
  const std::string r = big.Read(std::chrono::seconds(5), "}}");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 413")) << r;
  EXPECT_TRUE(absl::StrContains(r, "larger than 1000 bytes")) << r;
  // A chunked body that grows past the limit.
  RawClient chunked(port());
  chunked.Send("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 3; ++i) chunked.Send(absl::StrCat("200\r\n", std::string(512, 'a'), "\r\n"));
  chunked.Send("0\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(chunked.Read(std::chrono::seconds(5), "}}"), "HTTP/1.1 413"));
  EXPECT_EQ(calls_.load(), 0);  // the handler saw none of them
}

// Hundreds of idle connections and half-sent requests hold no thread: a valid request on a
// new connection is answered at once, and the idle ones are closed after the timeout.
TEST_F(HttpServerTest, IdleAndHalfSentConnectionsDoNotDelayOthers) {
  HttpServerOptions o;
  o.idle_timeout = std::chrono::seconds(2);
  Start(o);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 300; ++i) {
    idle.push_back(std::make_unique<RawClient>(port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  std::vector<std::unique_ptr<RawClient>> half;
  for (int i = 0; i < 16; ++i) {
    half.push_back(std::make_unique<RawClient>(port()));
    half.back()->Send(i % 2 ? "POST /x HTTP/1.1\r\nHost: x\r\nContent-Le"
                            : "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\"");
  }
  const auto t0 = Clock::now();
  const std::string r = Get(port(), "/valid");
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 200")) << r;
  EXPECT_LT(waited, 1.0) << "a valid request waited behind idle connections";
  // Idle and half-sent connections are closed once they have been silent for the timeout.
  EXPECT_TRUE(idle.front()->ClosedWithin(std::chrono::seconds(10)));
  EXPECT_TRUE(half.front()->ClosedWithin(std::chrono::seconds(10)));
  EXPECT_TRUE(half.back()->ClosedWithin(std::chrono::seconds(10)));
}

// Beyond the limit a connection waits in the listen queue (it is not served, and it takes
// no memory of the server's) until a slot frees.
TEST_F(HttpServerTest, ConnectionLimitHoldsTheExcessUntilASlotFrees) {
  HttpServerOptions o;
  o.max_connections = 8;
  o.threads = 1;
  Start(o);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 8; ++i) held.push_back(std::make_unique<RawClient>(port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the server accept them
  RawClient extra(port());
  extra.Send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(extra.Read(std::chrono::milliseconds(500)), "");
  held.clear();
  EXPECT_TRUE(absl::StartsWith(extra.Read(std::chrono::seconds(5), "path="), "HTTP/1.1 200"));
}

TEST_F(HttpServerTest, DeferredReplyIsSentWhenWokenFromAnotherThread) {
  Start();
  RawClient c(port());
  c.Send("GET /deferred HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(c.Read(std::chrono::milliseconds(300)), "");  // pending: nothing sent yet
  // Meanwhile the server answers others.
  EXPECT_TRUE(absl::StartsWith(Get(port(), "/other"), "HTTP/1.1 200"));
  std::thread([s = shared_] { s->Add("done-later", true); }).join();
  const std::string r = c.Read(std::chrono::seconds(5), "done-later");
  EXPECT_TRUE(absl::StrContains(r, "done-later")) << r;
  EXPECT_FALSE(shared_->abandoned.load());
}

TEST_F(HttpServerTest, StreamedBodyIsChunkedAndAClientThatLeavesIsAbandoned) {
  Start();
  {
    RawClient c(port());
    c.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    std::thread([s = shared_] { s->Add("first-chunk", false); }).join();
    const std::string r = c.Read(std::chrono::seconds(5), "first-chunk");
    EXPECT_TRUE(absl::StrContains(r, "Transfer-Encoding: chunked")) << r;
    EXPECT_TRUE(absl::StrContains(r, "first-chunk")) << r;
  }  // the client leaves mid-stream
  // The server notices when it next writes.
  for (int i = 0; i < 50 && !shared_->abandoned.load(); ++i) {
    shared_->Add("more", false);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(shared_->abandoned.load());
}

TEST_F(HttpServerTest, StopEndsPendingRepliesAndTheHandlerIsNotCalledAfter) {
  Start();
  RawClient pending(port());
  pending.Send("GET /deferred HTTP/1.1\r\nHost: x\r\n\r\n");
  RawClient streaming(port());
  streaming.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  const std::string answer = pending.Read(std::chrono::seconds(2));
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 503")) << answer;
  EXPECT_TRUE(shared_->abandoned.load());
  const int calls = calls_.load();
  RawClient late(port());
  EXPECT_FALSE(late.connected() && absl::StartsWith(late.Read(std::chrono::milliseconds(300)),
                                                    "HTTP"));
  EXPECT_EQ(calls_.load(), calls);
}

TEST_F(HttpServerTest, ATakenPortIsAnError) {
  Start();
  HttpServerOptions o;
  o.listen = absl::StrCat("127.0.0.1:", port());
  auto second = HttpServer::Start(o, [](HttpRequest) { return ImmediateReply({}); });
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), o.listen)) << second.status();
}

}  // namespace
}  // namespace cascade
