// Certificates for TLS tests, made at test time with OpenSSL: a CA, a
// server certificate for 127.0.0.1 and localhost, client certificates
// (valid, expired, and one from another CA). Test-only.
#ifndef ENGRAM_COMMON_TESTING_TEST_CERTS_H_
#define ENGRAM_COMMON_TESTING_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace engram::testing {

// PEM files, all in one directory.
struct TestCerts {
  std::string ca_cert;
  std::string server_cert, server_key;      // CN engram-shard, SAN IP:127.0.0.1, DNS:localhost
  std::string client_cert, client_key;      // signed by ca_cert, valid
  std::string expired_cert, expired_key;    // signed by ca_cert, expired yesterday
  std::string other_ca_cert;                // an unrelated CA
  std::string stranger_cert, stranger_key;  // signed by other_ca_cert
};

// Writes a fresh set into `dir` (which must exist). EC P-256 keys.
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

}  // namespace engram::testing

#endif  // ENGRAM_COMMON_TESTING_TEST_CERTS_H_
