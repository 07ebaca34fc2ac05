// HttpTls: the OpenSSL server context of the OpenAI HTTP API's TLS port, from the same
// PEM files as the gRPC public port (ServerTlsFiles: --tls_cert, --tls_key,
// --tls_client_ca) and with the same rotation: the files are re-read at most once per
// `reload_interval`, on the first handshake after it passes, so cert-manager renewing a
// mounted Secret needs no restart (new handshakes get the new files; established
// connections keep theirs). A version of the files that does not load (a certificate
// and a key that do not match, e.g. read half-way through a rotation; an unreadable
// file) is logged once and the previous one stays in force; it is tried again a second
// later.
//
// TLS 1.2 or newer, no compression. With a client CA, every client must present a
// certificate it signed (the handshake fails otherwise).
//
// cpp-httplib builds its SSL_CTX through Configure(); the per-connection certificate,
// key and client CA store are set from the current version in OpenSSL's certificate
// callback, which runs in every handshake before the server's certificate is sent.
//
// Ownership: the HttpTls must outlive the SSL_CTX it configured (the server).
// Thread-safety: Configure once; the callback runs on any connection thread.
#ifndef WEFT_SCHEDULER_SERVICE_HTTP_TLS_H_
#define WEFT_SCHEDULER_SERVICE_HTTP_TLS_H_

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/tls_credentials.h"

namespace weft {

class HttpTls {
 public:
  // Loads the files once (an error names the file: a bad flag). files.enabled() required.
  static absl::StatusOr<std::unique_ptr<HttpTls>> Load(const ServerTlsFiles& files);
  ~HttpTls();

  // Sets up `ctx` (protocol versions, client verification, the certificate callback).
  bool Configure(SSL_CTX& ctx);

  // Versions of the files loaded so far (1 after Load), for tests and logs.
  int loads() const;

 private:
  // One version of the files, shared by the handshakes that use it.
  struct Material;
  explicit HttpTls(ServerTlsFiles files) : files_(std::move(files)) {}
  static absl::StatusOr<std::shared_ptr<const Material>> Read(const ServerTlsFiles& files);
  // The version in force, re-read first when reload_interval has passed.
  std::shared_ptr<const Material> Current() ABSL_LOCKS_EXCLUDED(mu_);
  static int OnCertificate(SSL* ssl, void* self);

  const ServerTlsFiles files_;
  mutable Mutex mu_;
  std::shared_ptr<const Material> current_ ABSL_GUARDED_BY(mu_);
  absl::Time next_check_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);  // logged once per distinct error
  int loads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_HTTP_TLS_H_
