#include "transport/address.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cascade {
namespace {

constexpr int kMaxRank = 1 << 20;

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

const char* SchemeName(Scheme s) {
  switch (s) {
    case Scheme::kTcp:
      return "tcp";
    case Scheme::kGrpc:
      return "grpc";
    case Scheme::kInproc:
      return "inproc";
    case Scheme::kMpi:
      return "mpi";
    case Scheme::kNccl:
      return "nccl";
  }
  return "?";
}

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", text, "' is not host:port (e.g. 10.0.0.2:50062)"));
  }
  HostPort hp;
  absl::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", text, "': an IPv6 host must be written in brackets"));
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("address '", text, "' has no host"));
  }
  hp.host = std::string(host);
  if (!absl::SimpleAtoi(text.substr(colon + 1), &hp.port) || hp.port < 0 || hp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", text, "': port is not a number in 0-65535"));
  }
  return hp;
}

absl::StatusOr<Address> ParseAddress(absl::string_view text) {
  Address a;
  const size_t sep = text.find("://");
  if (sep == absl::string_view::npos) {
    a.scheme = Scheme::kGrpc;
    auto hp = ParseHostPort(text);
    if (!hp.ok()) return hp.status();
    a.host_port = std::move(*hp);
    return a;
  }
  const absl::string_view scheme = text.substr(0, sep);
  const absl::string_view rest = text.substr(sep + 3);
  auto host_port = [&]() -> absl::Status {
    auto hp = ParseHostPort(rest);
    if (!hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("address '", text, "': ", hp.status().message()));
    }
    a.host_port = std::move(*hp);
    return absl::OkStatus();
  };
  auto rank = [&]() -> absl::Status {
    if (!absl::SimpleAtoi(rest, &a.rank) || a.rank < 0 || a.rank > kMaxRank) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "': '", rest, "' is not a rank (0-", kMaxRank, ")"));
    }
    return absl::OkStatus();
  };
  absl::Status st;
  if (scheme == "tcp") {
    a.scheme = Scheme::kTcp;
    st = host_port();
  } else if (scheme == "grpc") {
    a.scheme = Scheme::kGrpc;
    st = host_port();
  } else if (scheme == "inproc") {
    a.scheme = Scheme::kInproc;
    if (!ValidName(rest)) {
      st = absl::InvalidArgumentError(
          absl::StrCat("address '", text, "': '", rest, "' is not an endpoint name"));
    }
    a.name = std::string(rest);
  } else if (scheme == "mpi") {
    a.scheme = Scheme::kMpi;
    st = rank();
  } else if (scheme == "nccl") {
    a.scheme = Scheme::kNccl;
    st = rank();
  } else {
    st = absl::InvalidArgumentError(absl::StrCat(
        "address '", text, "': unknown scheme '", scheme, "' (tcp, grpc, inproc, mpi, nccl)"));
  }
  if (!st.ok()) return st;
  return a;
}

std::string FormatAddress(const Address& a) {
  switch (a.scheme) {
    case Scheme::kTcp:
    case Scheme::kGrpc:
      return absl::StrCat(SchemeName(a.scheme), "://", a.host_port.ToString());
    case Scheme::kInproc:
      return absl::StrCat("inproc://", a.name);
    case Scheme::kMpi:
    case Scheme::kNccl:
      return absl::StrCat(SchemeName(a.scheme), "://", a.rank);
  }
  return "";
}

std::string AdvertisedHostPort(absl::string_view listen, int port) {
  std::string host(listen.substr(0, listen.rfind(':')));
  if (host == "0.0.0.0" || host == "[::]" || host == "::" || host.empty() || host == "*") {
    host = "127.0.0.1";
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace cascade
