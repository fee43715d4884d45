// Test helper: a one-member etcd (Debian's etcd-server) on free loopback ports with a data
// folder of its own, stopped and removed with the object. Kill() and Restart() (same
// ports, same data) let a test take etcd away while a cluster runs.
#ifndef CASCADE_TESTS_ETCD_PROCESS_H_
#define CASCADE_TESTS_ETCD_PROCESS_H_

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/subprocess.h"

namespace cascade::testing {

class EtcdProcess {
 public:
  // Starts etcd from PATH, listening on `host` (an address of this namespace); ok() false
  // (with skip_reason()) when it is not installed.
  explicit EtcdProcess(const std::string& dir, std::string host = "127.0.0.1")
      : dir_(dir), host_(std::move(host)) {
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
    const std::string client = absl::StrCat("http://", host_, ":", client_port_);
    process_ = Subprocess::Start(
        {"etcd", "--name", "t", "--data-dir", dir_ + "/etcd-data", "--listen-client-urls", client,
         "--advertise-client-urls", client, "--listen-peer-urls", peer,
         "--initial-advertise-peer-urls", peer, "--initial-cluster", "t=" + peer,
         "--log-level", "warn"},
        dir_ + "/etcd.log");
    return process_ != nullptr &&
           WaitForPort(host_, client_port_, std::chrono::seconds(20));
  }
  std::string Log() const { return process_ ? process_->Log() : ""; }

 private:
  std::string dir_, host_;
  int client_port_ = 0, peer_port_ = 0;
  bool ok_ = false;
  std::string skip_reason_;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace cascade::testing

#endif  // CASCADE_TESTS_ETCD_PROCESS_H_
