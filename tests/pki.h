// Test helper: certificates for mTLS tests, made with the openssl tool.
#ifndef CASCADE_TESTS_PKI_H_
#define CASCADE_TESTS_PKI_H_

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace cascade::testing {

// A CA and a certificate for 127.0.0.1 and localhost signed by it ("node"), and another CA
// with its own ("intruder"), made with the openssl tool in `dir` (removed with the object).
class Pki {
 public:
  explicit Pki(const std::string& dir) : dir_(dir) {
    std::system(("mkdir -p " + dir).c_str());
    ok_ = Sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout ca.key -out ca.crt -days 1 -subj /CN=cascade-test-ca") &&
          Issue("node", "ca") &&
          Sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout other-ca.key -out other-ca.crt -days 1 -subj /CN=another-ca") &&
          Issue("intruder", "other-ca");
  }
  ~Pki() { std::system(("rm -rf " + dir_).c_str()); }
  bool ok() const { return ok_; }
  std::string Path(const std::string& f) const { return dir_ + "/" + f; }
  std::vector<std::string> Flags(const std::string& who, const std::string& ca = "ca") const {
    return {"--tls-cert", Path(who + ".crt"), "--tls-key", Path(who + ".key"), "--tls-ca",
            Path(ca + ".crt")};
  }
  std::string Read(const std::string& f) const {
    std::ifstream in(Path(f));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  bool Sh(const std::string& cmd) {
    return std::system(("cd " + dir_ + " && " + cmd + " >/dev/null 2>&1").c_str()) == 0;
  }
  bool Issue(const std::string& who, const std::string& ca) {
    std::ofstream(Path(who + ".ext"))
        << "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n";
    return Sh("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " +
              who + ".key -out " + who + ".csr -subj /CN=" + who) &&
           Sh("openssl x509 -req -in " + who + ".csr -CA " + ca + ".crt -CAkey " + ca +
              ".key -CAcreateserial -out " + who + ".crt -days 1 -extfile " + who + ".ext");
  }
  std::string dir_;
  bool ok_ = false;
};

}  // namespace cascade::testing

#endif  // CASCADE_TESTS_PKI_H_
