#include "coordinator/http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstring>
#include <cstdio>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "transport/address.h"
#include "util/logging.h"

namespace cascade {

const std::string& HttpRequest::Header(absl::string_view name) const {
  static const std::string kEmpty;
  auto it = headers.find(name);
  return it == headers.end() ? kEmpty : it->second;
}

namespace {

class Immediate final : public HttpReply {
 public:
  explicit Immediate(HttpHead head) : head_(std::move(head)) {}
  void SetWake(std::function<void()>) override {}
  std::optional<HttpHead> Head() override { return std::move(head_); }
  bool Body(std::string*) override { return false; }
  void Abandon() override {}

 private:
  HttpHead head_;
};

// Parks a connection while its reply has nothing new, and wakes it from any thread. The
// flag `woken` closes the window between a poll that found nothing and the suspension: a
// wake in that window cancels the suspension.
class Waker {
 public:
  explicit Waker(MHD_Connection* c) : conn_(c) {}

  void Wake() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    woken_ = true;
    if (conn_ != nullptr && suspended_) {
      suspended_ = false;
      MHD_resume_connection(conn_);
    }
  }
  // Event-loop thread, before polling the reply.
  void ClearWoken() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    woken_ = false;
  }
  // Event-loop thread, from the access handler or the content reader, after a poll found
  // nothing: suspends the connection unless a wake came since ClearWoken(). True when
  // suspended.
  bool SuspendUnlessWoken() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (woken_ || conn_ == nullptr) return false;
    suspended_ = true;
    MHD_suspend_connection(conn_);
    return true;
  }
  bool suspended() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return suspended_;
  }
  // The request is over: later wakes do nothing.
  void Detach() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    conn_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  MHD_Connection* conn_ ABSL_GUARDED_BY(mu_);
  bool suspended_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

// One request on one connection; touched only by the connection's event-loop thread
// (but `waker`).
struct Exchange {
  MHD_Connection* conn = nullptr;
  HttpRequest request;
  bool too_large = false;
  std::unique_ptr<HttpReply> reply;
  std::shared_ptr<Waker> waker;
  bool finished = false;  // the whole answer was handed to the server
  std::string out;        // streamed bytes not yet copied out
  size_t out_pos = 0;
  bool body_ended = false;
  const std::atomic<bool>* server_stopping = nullptr;
  std::atomic<bool> replying{false};  // the handler was called; the request is not over
};

MHD_Result AddHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* headers = static_cast<absl::flat_hash_map<std::string, std::string>*>(cls);
  if (key != nullptr) headers->insert_or_assign(absl::AsciiStrToLower(key), value ? value : "");
  return MHD_YES;
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}
  ~Impl() { Stop(); }

  absl::Status Start() {
    auto addr = ParseHostPort(options_.listen);
    if (!addr.ok()) return addr.status();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(addr->port);
    const char* host = addr->host.empty() ? nullptr : addr->host.c_str();
    if (int rc = getaddrinfo(host, port.c_str(), &hints, &found); rc != 0 || found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("HTTP listen address '", options_.listen,
                                                     "': ", gai_strerror(rc)));
    }
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
    unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME |
                         MHD_USE_ERROR_LOG;
    if (found->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    daemon_ = MHD_start_daemon(
        flags, 0, nullptr, nullptr, &Impl::OnRequest, this,  //
        MHD_OPTION_SOCK_ADDR, found->ai_addr,                 //
        MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(options_.max_connections),
        MHD_OPTION_CONNECTION_TIMEOUT,
        static_cast<unsigned int>(std::max<int64_t>(1, options_.idle_timeout.count())),
        MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned int>(std::max(1, options_.threads)),
        MHD_OPTION_NOTIFY_COMPLETED, &Impl::OnCompleted, this,  //
        MHD_OPTION_EXTERNAL_LOGGER, &Impl::OnLog, this,         //
        MHD_OPTION_END);
    if (daemon_ == nullptr) {
      return absl::UnavailableError(absl::StrCat("HTTP: cannot listen on ", options_.listen, ": ",
                                                 last_log(), " (is the port taken?)"));
    }
    const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
    port_ = info != nullptr ? info->port : addr->port;
    return absl::OkStatus();
  }

  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    if (daemon_ == nullptr) return;
    stopping_.store(true);
    const MHD_socket listener = MHD_quiesce_daemon(daemon_);
    if (listener != MHD_INVALID_SOCKET) ::close(listener);
    // Suspended connections must be resumed before the daemon stops; resumed, their
    // replies see `stopping_` and end (503, or the stream is cut). Wait (a little) for
    // every request the handler took to be over, so that its client gets that answer.
    for (int round = 0; round < 300; ++round) {
      std::vector<std::shared_ptr<Waker>> wakers;
      bool replying = false;
      {
        absl::MutexLock lock(&mu_);
        for (auto& [ptr, ex] : exchanges_) {
          wakers.push_back(ex->waker);
          replying |= ex->replying.load();
        }
      }
      if (!replying) break;
      for (auto& w : wakers) w->Wake();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int round = 0; round < 100; ++round) {  // none may stay suspended
      std::vector<std::shared_ptr<Waker>> wakers;
      {
        absl::MutexLock lock(&mu_);
        for (auto& [ptr, ex] : exchanges_) wakers.push_back(ex->waker);
      }
      bool suspended = false;
      for (auto& w : wakers) {
        w->Wake();
        suspended |= w->suspended();
      }
      if (!suspended) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    MHD_stop_daemon(daemon_);
    daemon_ = nullptr;
  }

  int port() const { return port_; }

 private:
  bool stopping() const { return stopping_.load(); }

  std::string last_log() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return last_log_;
  }

  static void OnLog(void* cls, const char* fmt, va_list ap) {
    char buf[512];
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    spdlog::debug("HTTP: {}", line);
    auto* self = static_cast<Impl*>(cls);
    absl::MutexLock lock(&self->mu_);
    self->last_log_ = std::move(line);
  }

  static MHD_Result Queue(MHD_Connection* c, const HttpHead& head, MHD_Response* r) {
    for (const auto& [k, v] : head.headers) MHD_add_response_header(r, k.c_str(), v.c_str());
    const MHD_Result ok = MHD_queue_response(c, static_cast<unsigned int>(head.status), r);
    MHD_destroy_response(r);
    return ok;
  }

  static MHD_Result QueueWhole(MHD_Connection* c, const HttpHead& head) {
    MHD_Response* r = MHD_create_response_from_buffer(
        head.body.size(), const_cast<char*>(head.body.data()), MHD_RESPMEM_MUST_COPY);
    if (r == nullptr) return MHD_NO;
    return Queue(c, head, r);
  }

  // 413 naming the limit (a declared length over it, or a body that grew past it).
  static MHD_Result QueueTooLarge(MHD_Connection* c, uint64_t max_body_bytes) {
    return QueueWhole(c, Plain(413, absl::StrCat("the body is larger than ", max_body_bytes,
                                                 " bytes")));
  }

  static HttpHead Plain(int status, std::string message) {
    HttpHead h;
    h.status = status;
    h.headers = {{"Content-Type", "application/json"}};
    h.body = absl::StrCat(R"({"error":{"message":")", message,
                          R"(","type":"invalid_request_error","param":null,"code":null}})");
    return h;
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* c, const char* url, const char* method,
                              const char*, const char* upload, size_t* upload_size, void** ctx) {
    auto* self = static_cast<Impl*>(cls);
    auto* ex = static_cast<Exchange*>(*ctx);
    if (ex == nullptr) {  // the headers are in
      auto owned = std::make_unique<Exchange>();
      ex = owned.get();
      ex->conn = c;
      ex->waker = std::make_shared<Waker>(c);
      ex->server_stopping = &self->stopping_;
      ex->request.method = method;
      ex->request.path = url;
      MHD_get_connection_values(c, MHD_HEADER_KIND, &AddHeader, &ex->request.headers);
      {
        absl::MutexLock lock(&self->mu_);
        self->exchanges_.emplace(ex, std::move(owned));
      }
      *ctx = ex;
      uint64_t length = 0;
      if (const std::string& cl = ex->request.Header("content-length");
          !cl.empty() && absl::SimpleAtoi(cl, &length) && length > self->options_.max_body_bytes) {
        ex->finished = true;
        return QueueTooLarge(c, self->options_.max_body_bytes);
      }
      return MHD_YES;
    }
    if (*upload_size > 0) {  // a piece of the body
      if (ex->request.body.size() + *upload_size > self->options_.max_body_bytes) {
        ex->too_large = true;
      } else if (!ex->too_large) {
        ex->request.body.append(upload, *upload_size);
      }
      *upload_size = 0;
      return MHD_YES;
    }
    if (ex->finished) return MHD_YES;
    if (ex->too_large) {
      ex->finished = true;
      return QueueTooLarge(c, self->options_.max_body_bytes);
    }
    if (ex->reply == nullptr) {
      if (self->stopping()) {
        ex->finished = true;
        return QueueWhole(c, Plain(503, "the server is shutting down"));
      }
      ex->replying = true;
      ex->reply = self->handler_(std::move(ex->request));
      std::weak_ptr<Waker> weak = ex->waker;
      ex->reply->SetWake([weak] {
        if (auto w = weak.lock()) w->Wake();
      });
    }
    for (;;) {
      ex->waker->ClearWoken();
      std::optional<HttpHead> head = ex->reply->Head();
      if (head.has_value()) {
        if (!head->streamed) {
          ex->finished = true;
          return QueueWhole(c, *head);
        }
        MHD_Response* r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, &Impl::Read, ex, nullptr);
        if (r == nullptr) return MHD_NO;
        return Queue(c, *head, r);
      }
      if (self->stopping()) {
        ex->finished = true;
        ex->reply->Abandon();
        return QueueWhole(c, Plain(503, "the server is shutting down"));
      }
      if (ex->waker->SuspendUnlessWoken()) return MHD_YES;
    }
  }

  // The content reader of a streamed body.
  static ssize_t Read(void* cls, uint64_t, char* buf, size_t max) {
    auto* ex = static_cast<Exchange*>(cls);
    for (;;) {
      if (ex->out_pos < ex->out.size()) {
        const size_t n = std::min(max, ex->out.size() - ex->out_pos);
        std::memcpy(buf, ex->out.data() + ex->out_pos, n);
        ex->out_pos += n;
        return static_cast<ssize_t>(n);
      }
      if (ex->body_ended) {
        ex->finished = true;
        return MHD_CONTENT_READER_END_OF_STREAM;
      }
      ex->out.clear();
      ex->out_pos = 0;
      ex->waker->ClearWoken();
      if (!ex->reply->Body(&ex->out)) {
        ex->body_ended = true;
        continue;
      }
      if (!ex->out.empty()) continue;
      if (ex->server_stopping->load()) {
        return MHD_CONTENT_READER_END_WITH_ERROR;  // Abandon() follows in OnCompleted
      }
      if (ex->waker->SuspendUnlessWoken()) return 0;
    }
  }

  static void OnCompleted(void* cls, MHD_Connection*, void** ctx, MHD_RequestTerminationCode) {
    auto* self = static_cast<Impl*>(cls);
    auto* ex = static_cast<Exchange*>(*ctx);
    if (ex == nullptr) return;
    *ctx = nullptr;
    ex->waker->Detach();
    if (ex->reply != nullptr && !ex->finished) ex->reply->Abandon();
    std::unique_ptr<Exchange> owned;
    {
      absl::MutexLock lock(&self->mu_);
      auto it = self->exchanges_.find(ex);
      if (it != self->exchanges_.end()) {
        owned = std::move(it->second);
        self->exchanges_.erase(it);
      }
    }
  }

  const HttpServerOptions options_;
  const HttpHandler handler_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
  absl::Mutex mu_;
  std::atomic<bool> stopping_{false};
  std::string last_log_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Exchange*, std::unique_ptr<Exchange>> exchanges_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<HttpReply> ImmediateReply(HttpHead head) {
  return std::make_unique<Immediate>(std::move(head));
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                             HttpHandler handler) {
  auto impl = std::make_unique<Impl>(options, std::move(handler));
  if (absl::Status st = impl->Start(); !st.ok()) return st;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Stop(); }
void HttpServer::Stop() { impl_->Stop(); }
int HttpServer::port() const { return impl_->port(); }

}  // namespace cascade
