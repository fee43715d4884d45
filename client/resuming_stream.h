// GenerateResuming: a client of the public gRPC API whose stream survives the loss of the
// coordinator serving it. It sends the request to the first of the cluster's coordinators
// that serves it (a standby refuses with Unavailable; the next is tried); when the stream
// breaks it sends the same request again, to whichever coordinator serves now, with the
// seed the first response reported and resume_after_tokens = the token ids received so
// far. The server generates the same tokens again and streams only the rest, so what
// `on_message` sees is exactly what an unbroken stream gives (inference.proto,
// GenerateRequest.resume_after_tokens).
//
// Contract:
// - A stream silent for `stall_timeout` is cancelled and resumed like a broken one.
// - Retries on the codes a lost or deposed coordinator gives (UNAVAILABLE, ABORTED,
//   CANCELLED by the server, INTERNAL/UNKNOWN for a reset stream, DEADLINE_EXCEEDED of a
//   connect) with a backoff from 50 ms doubling to 1 s, going round `servers`, until
//   `options.give_up_after` has passed since the last message; any other status is final.
// - `on_message` is called once per message received, in order, on the caller's thread;
//   returning false cancels the request (the result is then Cancelled).
// - Stats say how often it resumed and the longest wait between two messages that spanned
//   a resume. Thread-compatible (one call per thread).
#ifndef CASCADE_CLIENT_RESUMING_STREAM_H_
#define CASCADE_CLIENT_RESUMING_STREAM_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cascade/v1/inference.pb.h"

namespace cascade {

struct ResumeOptions {
  std::chrono::milliseconds give_up_after{60000};
  // A stream that brings nothing for this long is given up and resumed elsewhere: a
  // coordinator stopped (SIGSTOP) or cut off keeps the connection open but sends nothing.
  // Longer than the longest prefill a request may need before its first token.
  std::chrono::milliseconds stall_timeout{10000};
  std::string api_key;  // sent as "authorization: Bearer <key>" when set
};

struct ResumeStats {
  int resumes = 0;             // streams sent again after a break
  int attempts = 0;            // calls made, the first included
  double longest_resume_s = 0;  // the longest gap between messages across a break
  std::string last_error;      // what the last break said
};

absl::Status GenerateResuming(const std::vector<std::string>& servers, v1::GenerateRequest request,
                              const std::function<bool(const v1::GenerateResponse&)>& on_message,
                              const ResumeOptions& options = {}, ResumeStats* stats = nullptr);

}  // namespace cascade

#endif  // CASCADE_CLIENT_RESUMING_STREAM_H_
