#include "common/tls_credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace weft {
namespace {

// Owns an OpenSSL BIO on a file.
struct FileBio {
  explicit FileBio(const std::string& path) : bio(BIO_new_file(path.c_str(), "r")) {}
  ~FileBio() {
    if (bio != nullptr) BIO_free(bio);
  }
  BIO* bio;
};

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

absl::Status CannotRead(absl::string_view what, const std::string& path) {
  return absl::InvalidArgumentError(
      absl::StrCat("cannot read the ", what, " file '", path, "': ", std::strerror(errno)));
}

unsigned int Seconds(absl::Duration d) {
  return static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(d)));
}

}  // namespace

absl::Status CheckCertificateFile(const std::string& path, absl::string_view what) {
  FileBio f(path);
  if (f.bio == nullptr) return CannotRead(what, path);
  X509* cert = PEM_read_bio_X509(f.bio, nullptr, nullptr, nullptr);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", what, " file '", path, "' holds no PEM certificate (", OpenSslError(), ")"));
  }
  X509_free(cert);
  return absl::OkStatus();
}

absl::Status CheckKeyPair(const std::string& cert_path, const std::string& key_path) {
  if (absl::Status s = CheckCertificateFile(cert_path, "certificate"); !s.ok()) return s;
  FileBio cf(cert_path);
  FileBio kf(key_path);
  if (kf.bio == nullptr) return CannotRead("private key", key_path);
  X509* cert = PEM_read_bio_X509(cf.bio, nullptr, nullptr, nullptr);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kf.bio, nullptr, nullptr, nullptr);
  absl::Status status = absl::OkStatus();
  if (key == nullptr) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "the private key file '", key_path, "' holds no PEM private key (", OpenSslError(), ")"));
  } else if (cert != nullptr && X509_check_private_key(cert, key) != 1) {
    ERR_clear_error();
    status = absl::InvalidArgumentError(absl::StrCat(
        "the private key '", key_path, "' does not belong to the certificate '", cert_path, "'"));
  }
  if (key != nullptr) EVP_PKEY_free(key);
  if (cert != nullptr) X509_free(cert);
  return status;
}

absl::Status ServerTlsFiles::Validate(absl::string_view what) const {
  if (!enabled()) return absl::OkStatus();
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": a certificate and its key are both needed (a client CA alone "
                     "cannot turn TLS on)"));
  }
  if (absl::Status s = CheckKeyPair(cert, key); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  if (!client_ca.empty()) {
    if (absl::Status s = CheckCertificateFile(client_ca, "client CA"); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ClientTlsFiles::Validate(absl::string_view what) const {
  if (!enabled()) return absl::OkStatus();
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a client certificate and its key come together"));
  }
  if (!cert.empty()) {
    if (absl::Status s = CheckKeyPair(cert, key); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
    }
  }
  if (!ca.empty()) {
    if (absl::Status s = CheckCertificateFile(ca, "CA"); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  if (absl::Status s = files.Validate("TLS"); !s.ok()) return s;
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.client_ca, Seconds(files.reload_interval));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!files.client_ca.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files, grpc::ChannelArguments* args) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  if (absl::Status s = files.Validate("TLS"); !s.ok()) return s;
  grpc::experimental::TlsChannelCredentialsOptions options;
  if (!files.ca.empty() || !files.cert.empty()) {
    options.set_certificate_provider(
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            files.key, files.cert, files.ca, Seconds(files.reload_interval)));
    if (!files.ca.empty()) options.watch_root_certs();  // else: the system roots
    if (!files.cert.empty()) options.watch_identity_key_cert_pairs();
  }
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(
      std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  if (!files.server_name.empty()) {
    args->SetString(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, files.server_name);
  }
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace weft
