// Test certificates made at test time by common/testing/make_test_certs.sh (openssl),
// never committed. See the script for the files and who signed what.
#ifndef WEFT_COMMON_TESTING_TEST_CERTS_H_
#define WEFT_COMMON_TESTING_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace weft::testing {

// Makes the certificates in a fresh directory under $TEST_TMPDIR (or /tmp); returns it.
// "<dir>/ca.crt", "<dir>/server.key" ...
absl::StatusOr<std::string> MakeTestCerts();

}  // namespace weft::testing

#endif  // WEFT_COMMON_TESTING_TEST_CERTS_H_
