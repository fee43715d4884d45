// Test helper: a one-member etcd (Debian's etcd-server) on free loopback ports with a data
// folder of its own, stopped and removed with the object. Kill() and Restart() (same
// ports, same data) let a test take etcd away while a cluster runs.
#ifndef CASCADE_TESTS_ETCD_PROCESS_H_
#define CASCADE_TESTS_ETCD_PROCESS_H_

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/subprocess.h"

namespace cascade::testing {

// TLS for the client port: etcd's certificate and key, and the CA its clients' certificates
// must come from (etcd's --client-cert-auth); empty: plain http.
struct EtcdServerTls {
  std::string cert, key, client_ca;
};

class EtcdProcess {
 public:
  // Starts etcd from PATH, listening on `host` (an address of this namespace); ok() false
  // (with skip_reason()) when it is not installed.
  explicit EtcdProcess(const std::string& dir, std::string host = "127.0.0.1",
                       EtcdServerTls tls = {})
      : dir_(dir), host_(std::move(host)), tls_(std::move(tls)) {
    if (std::system("command -v etcd >/dev/null 2>&1") != 0) {
      skip_reason_ = "etcd is not installed (Debian: etcd-server; scripts/setup.sh installs it)";
      return;
    }
    std::system(("mkdir -p " + dir_).c_str());
    client_port_ = FreePort();
    peer_port_ = FreePort();
    ok_ = Restart();
  }
  ~EtcdProcess() {
    process_.reset();
    std::system(("rm -rf " + dir_ + "/etcd-data").c_str());
  }
  bool ok() const { return ok_; }
  const std::string& skip_reason() const { return skip_reason_; }
  std::string endpoint() const { return absl::StrCat(host_, ":", client_port_); }

  void Kill() {
    if (process_) process_->Signal(SIGKILL);
    process_.reset();
  }
  // Starts it again on the same ports and data; true once it listens.
  bool Restart() {
    const std::string peer = absl::StrCat("http://", host_, ":", peer_port_);
    const std::string client =
        absl::StrCat(tls_.cert.empty() ? "http" : "https", "://", host_, ":", client_port_);
    std::vector<std::string> argv = {
        "etcd", "--name", "t", "--data-dir", dir_ + "/etcd-data", "--listen-client-urls", client,
        "--advertise-client-urls", client, "--listen-peer-urls", peer,
        "--initial-advertise-peer-urls", peer, "--initial-cluster", "t=" + peer,
        "--log-level", "warn"};
    if (!tls_.cert.empty()) {
      argv.insert(argv.end(), {"--cert-file", tls_.cert, "--key-file", tls_.key});
    }
    if (!tls_.client_ca.empty()) {
      argv.insert(argv.end(), {"--client-cert-auth", "--trusted-ca-file", tls_.client_ca});
    }
    process_ = Subprocess::Start(argv, dir_ + "/etcd.log");
    return process_ != nullptr &&
           WaitForPort(host_, client_port_, std::chrono::seconds(20));
  }
  std::string Log() const { return process_ ? process_->Log() : ""; }

 private:
  std::string dir_, host_;
  EtcdServerTls tls_;
  int client_port_ = 0, peer_port_ = 0;
  bool ok_ = false;
  std::string skip_reason_;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace cascade::testing

#endif  // CASCADE_TESTS_ETCD_PROCESS_H_
