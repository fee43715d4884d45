// Test helper: pretend hosts on one machine. Each host is a network namespace joined to a
// bridge the helper creates by a veth pair, with the address 10.77.<subnet>.<10 + i>
// (the bridge is .1, so the root namespace reaches every host); all removed with the
// object. Cut(i) makes host i drop every packet in and out (nftables in its namespace),
// Heal(i) undoes it. Needs root and iproute2 (nft for Cut); ok() says why not.
#ifndef CASCADE_TESTS_NETNS_HOSTS_H_
#define CASCADE_TESTS_NETNS_HOSTS_H_

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cascade::testing {

class NetnsHosts {
 public:
  // `tag` makes the names unique (e.g. the pid); `subnet` in [20, 250).
  NetnsHosts(const std::string& tag, int subnet, int hosts) : tag_(tag), subnet_(subnet) {
    bridge_ = absl::StrCat("cbr", tag_);
    if (::geteuid() != 0 || !Sh("ip netns list")) {
      why_ = "network namespaces need root and iproute2";
      return;
    }
    if (!Sh("ip link add " + bridge_ + " type bridge") ||
        !Sh(absl::StrCat("ip addr add 10.77.", subnet_, ".1/24 dev ", bridge_)) ||
        !Sh("ip link set " + bridge_ + " up")) {
      why_ = "cannot create a bridge (no CAP_NET_ADMIN?)";
      bridge_.clear();
      return;
    }
    for (int h = 0; h < hosts; ++h) {
      const std::string ns = Ns(h), host_if = absl::StrCat("cv", tag_, "h", h),
                        ns_if = absl::StrCat("cv", tag_, "n", h);
      if (!Sh("ip netns add " + ns)) {
        why_ = "cannot create network namespaces";
        return;
      }
      namespaces_.push_back(ns);
      if (!Sh("ip link add " + host_if + " type veth peer name " + ns_if) ||
          !Sh("ip link set " + ns_if + " netns " + ns) ||
          !Sh("ip link set " + host_if + " master " + bridge_) ||
          !Sh("ip link set " + host_if + " up") ||
          !Sh(absl::StrCat("ip netns exec ", ns, " ip addr add ", Ip(h), "/24 dev ", ns_if)) ||
          !Sh(absl::StrCat("ip netns exec ", ns, " ip link set ", ns_if, " up")) ||
          !Sh(absl::StrCat("ip netns exec ", ns, " ip link set lo up"))) {
        why_ = "cannot create veth pairs into the namespaces";
        return;
      }
    }
    ok_ = true;
  }
  ~NetnsHosts() {
    for (const auto& ns : namespaces_) Sh("ip netns del " + ns);
    if (!bridge_.empty()) Sh("ip link del " + bridge_);
  }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string Ns(int host) const { return absl::StrCat("cascade", tag_, "h", host); }
  std::string Ip(int host) const { return absl::StrCat("10.77.", subnet_, ".", 10 + host); }
  // The root namespace's address on the bridge (what every host reaches).
  std::string BridgeIp() const { return absl::StrCat("10.77.", subnet_, ".1"); }
  // The command prefix that runs a program on host `host`.
  std::vector<std::string> Prefix(int host) const { return {"ip", "netns", "exec", Ns(host)}; }

  bool Cut(int host) const {
    return std::system(("ip netns exec " + Ns(host) +
                        " nft -f - <<'EOF'\n"
                        "table inet cut {\n"
                        "  chain in { type filter hook input priority 0; policy drop; }\n"
                        "  chain out { type filter hook output priority 0; policy drop; }\n"
                        "}\nEOF")
                           .c_str()) == 0;
  }
  bool Heal(int host) const { return Sh("ip netns exec " + Ns(host) + " nft delete table inet cut"); }

 private:
  static bool Sh(const std::string& cmd) {
    return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
  }
  std::string tag_, bridge_, why_;
  int subnet_ = 0;
  bool ok_ = false;
  std::vector<std::string> namespaces_;
};

}  // namespace cascade::testing

#endif  // CASCADE_TESTS_NETNS_HOSTS_H_
