// HttpServer: the HTTP/1.1 server under the OpenAI-compatible API, on libmicrohttpd's
// epoll event loop (Debian's libmicrohttpd), so that a connection costs a socket and a
// little memory, not a thread: idle, slow or half-sent requests cannot hold the server's
// threads, and a valid request is served while hundreds of them sit open.
//
// How a request flows: the server reads the request line, the headers and the body (at
// most `max_body_bytes`; a larger Content-Length is answered 413 before the body is read,
// a malformed one 400 by libmicrohttpd itself), then calls the handler once, on an
// event-loop thread, with the whole request. The handler must not block: it returns an
// HttpReply at once, and the server asks that reply for its head and body whenever the
// reply calls its wake function (from any thread, e.g. the scheduler's), the connection
// being suspended, not polled, in between. A streamed body goes out with chunked encoding
// as the reply produces it.
//
// Limits: `max_connections` open connections (more wait in the listen queue); a connection
// that sends or accepts nothing for `idle_timeout` is closed (while it waits for the
// headers, the body or the next request on a kept-alive connection; never while its reply
// is pending). No SO_REUSEPORT: a port another process holds is an error at Start().
//
// Contract: Start() fails (Unavailable, naming the address) when it cannot listen.
// Abandon() is called once on every reply whose client went away or was cut off by
// Stop() before its body ended. Stop() (and the destructor) ends every pending reply
// (503, or a cut stream), closes every connection and joins the threads; the handler is
// never called after Stop() returns. Thread-safe.
#ifndef CASCADE_COORDINATOR_HTTP_SERVER_H_
#define CASCADE_COORDINATOR_HTTP_SERVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cascade {

struct HttpServerOptions {
  std::string listen;  // host:port; port 0 picks a free one
  int max_connections = 1000;
  std::chrono::seconds idle_timeout{30};
  size_t max_body_bytes = 8 << 20;
  int threads = 2;  // event-loop threads
};

struct HttpRequest {
  std::string method;
  std::string path;  // without the query string
  absl::flat_hash_map<std::string, std::string> headers;  // names in lower case
  std::string body;

  // The header's value, "" when absent; `name` in lower case.
  const std::string& Header(absl::string_view name) const;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpHead {
  int status = 200;
  HttpHeaders headers;
  std::string body;       // the whole body, unless `streamed`
  bool streamed = false;  // the body comes from HttpReply::Body(), chunk by chunk
};

// One request's answer, produced as it becomes known. The server calls Head() until it
// gives a head, then (streamed) Body() until it returns false; each time either has
// nothing new, the server waits for the wake function. All calls but the wake come from
// one event-loop thread at a time.
class HttpReply {
 public:
  virtual ~HttpReply() = default;
  // Called once, before anything else: call `wake` (from any thread, any number of times)
  // whenever Head() or Body() may have something new.
  virtual void SetWake(std::function<void()> wake) = 0;
  // The head once known; nullopt while pending.
  virtual std::optional<HttpHead> Head() = 0;
  // Streamed bodies: appends what is ready to `out` (perhaps nothing); false once the body
  // has ended (with `out` holding its last bytes).
  virtual bool Body(std::string* out) = 0;
  // The client went away or the server stopped before the body ended.
  virtual void Abandon() = 0;
};

// A reply known at once.
std::unique_ptr<HttpReply> ImmediateReply(HttpHead head);

using HttpHandler = std::function<std::unique_ptr<HttpReply>(HttpRequest request)>;

class HttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                          HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Stop();
  int port() const;

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_HTTP_SERVER_H_
