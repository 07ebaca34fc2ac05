// gRPC credentials from PEM files, built in one place for every Weft binary.
//
// Server side (weft-scheduler's public and attach ports): TLS with the certificate chain
// and key; with a client CA, clients must present a certificate signed by it (mutual
// TLS). Client side (weft-worker dialing the attach port, the `weft` CLI): verifies the
// server's certificate against a CA bundle (the system roots when none is given) and its
// name (the dialed host, or `server_name`), and presents a client certificate when one is
// given. No files at all means plaintext, as before.
//
// Rotation: the files are watched by gRPC's FileWatcherCertificateProvider and re-read
// every `reload_interval` (new handshakes use the new files; established connections
// keep theirs), so cert-manager renewing a mounted Secret needs no restart. The files
// are also read and checked once when the credentials are made (a certificate and its
// key that do not match, or an unreadable file, is an error at start, not at the first
// handshake).
//
// Thread-safety: the functions are pure; the credentials they return are gRPC's.
#ifndef WEFT_COMMON_TLS_CREDENTIALS_H_
#define WEFT_COMMON_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace weft {

struct ServerTlsFiles {
  std::string cert;       // PEM certificate chain, the server's first
  std::string key;        // PEM private key of `cert`
  std::string client_ca;  // PEM bundle; non-empty: client certificates required, checked
  absl::Duration reload_interval = absl::Seconds(60);

  bool enabled() const { return !cert.empty() || !key.empty() || !client_ca.empty(); }
  // cert and key come together; a client CA needs them (TLS is what carries the client
  // certificate). `what` names the flags in the message ("--tls_cert/--tls_key").
  absl::Status Validate(absl::string_view what) const;
};

struct ClientTlsFiles {
  bool use_tls = false;     // implied by any file below
  std::string ca;           // PEM bundle that signed the server's certificate; empty: system roots
  std::string cert;         // client certificate chain (mutual TLS), optional
  std::string key;          // its key
  std::string server_name;  // name the server's certificate must carry; empty: the dialed host
  absl::Duration reload_interval = absl::Seconds(60);

  bool enabled() const { return use_tls || !ca.empty() || !cert.empty() || !key.empty(); }
  absl::Status Validate(absl::string_view what) const;
};

// Insecure credentials when !files.enabled().
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files);

// Insecure credentials when !files.enabled(). Sets the server-name override in `args`
// when files.server_name is given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files, grpc::ChannelArguments* args);

// Reads a PEM file and checks it holds at least one certificate ("CA bundle" or
// "certificate" in messages), or that `key` is a private key matching the first
// certificate of `cert`. Exposed for tests.
absl::Status CheckCertificateFile(const std::string& path, absl::string_view what);
absl::Status CheckKeyPair(const std::string& cert, const std::string& key);

}  // namespace weft

#endif  // WEFT_COMMON_TLS_CREDENTIALS_H_
