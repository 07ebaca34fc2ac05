#include "scheduler/edge/http_tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {
namespace {

constexpr absl::Duration kRetryAfterFailure = absl::Seconds(1);

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

}  // namespace

struct HttpTls::Material {
  X509* leaf = nullptr;
  STACK_OF(X509)* chain = nullptr;  // intermediates after the leaf (may be empty)
  EVP_PKEY* key = nullptr;
  X509_STORE* client_cas = nullptr;  // null: no client certificates asked for

  Material() = default;
  Material(const Material&) = delete;
  Material& operator=(const Material&) = delete;
  ~Material() {
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
    X509_STORE_free(client_cas);
  }
};

absl::StatusOr<std::shared_ptr<const HttpTls::Material>> HttpTls::Read(
    const ServerTlsFiles& files) {
  auto m = std::make_shared<Material>();
  {
    BIO* bio = BIO_new_file(files.cert.c_str(), "r");
    if (bio == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read the certificate '", files.cert, "': ", OpenSslError()));
    }
    m->leaf = PEM_read_bio_X509_AUX(bio, nullptr, nullptr, nullptr);
    m->chain = sk_X509_new_null();
    while (m->leaf != nullptr) {
      X509* next = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
      if (next == nullptr) break;
      sk_X509_push(m->chain, next);
    }
    ERR_clear_error();  // the end of the file reads as an error
    BIO_free(bio);
    if (m->leaf == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("no PEM certificate in '", files.cert, "'"));
    }
  }
  {
    BIO* bio = BIO_new_file(files.key.c_str(), "r");
    if (bio == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read the key '", files.key, "': ", OpenSslError()));
    }
    m->key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    if (m->key == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("no PEM private key in '", files.key, "': ", OpenSslError()));
    }
  }
  if (X509_check_private_key(m->leaf, m->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "the key '", files.key, "' does not match the certificate '", files.cert, "'"));
  }
  if (!files.client_ca.empty()) {
    if (absl::Status s = CheckCertificateFile(files.client_ca, "client CA"); !s.ok()) return s;
    m->client_cas = X509_STORE_new();
    if (m->client_cas == nullptr ||
        X509_STORE_load_locations(m->client_cas, files.client_ca.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot load the client CA '", files.client_ca, "': ", OpenSslError()));
    }
  }
  return std::shared_ptr<const Material>(std::move(m));
}

absl::StatusOr<std::unique_ptr<HttpTls>> HttpTls::Load(const ServerTlsFiles& files) {
  if (!files.enabled()) return absl::InvalidArgumentError("HTTP TLS: no files given");
  if (absl::Status s = files.Validate("HTTP TLS"); !s.ok()) return s;
  auto first = Read(files);
  if (!first.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP TLS: ", first.status().message()));
  }
  std::unique_ptr<HttpTls> tls(new HttpTls(files));
  MutexLock lock(&tls->mu_);
  tls->current_ = std::move(*first);
  tls->next_check_ = absl::Now() + files.reload_interval;
  tls->loads_ = 1;
  return tls;
}

HttpTls::~HttpTls() = default;

int HttpTls::loads() const {
  MutexLock lock(&mu_);
  return loads_;
}

std::shared_ptr<const HttpTls::Material> HttpTls::Current() {
  MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now < next_check_) return current_;
  // One handshake re-reads the files (a few KB) while the others wait for it: at most
  // once per reload_interval.
  auto next = Read(files_);
  if (next.ok()) {
    current_ = std::move(*next);
    ++loads_;
    last_error_.clear();
    next_check_ = now + files_.reload_interval;
  } else {
    if (std::string(next.status().message()) != last_error_) {
      last_error_ = std::string(next.status().message());
      LOG(WARNING) << "HTTP TLS: the files do not load (" << last_error_
                   << "); the previous certificate stays in force";
    }
    next_check_ = now + kRetryAfterFailure;
  }
  return current_;
}

int HttpTls::OnCertificate(SSL* ssl, void* self) {
  std::shared_ptr<const Material> m = static_cast<HttpTls*>(self)->Current();
  // The SSL object takes its own references: the material may be replaced meanwhile.
  if (SSL_use_cert_and_key(ssl, m->leaf, m->key, m->chain, /*override=*/1) != 1) {
    LOG(WARNING) << "HTTP TLS: cannot use the certificate: " << OpenSslError();
    return 0;  // the handshake fails
  }
  if (m->client_cas != nullptr && SSL_set1_verify_cert_store(ssl, m->client_cas) != 1) {
    LOG(WARNING) << "HTTP TLS: cannot use the client CA: " << OpenSslError();
    return 0;
  }
  return 1;
}

bool HttpTls::Configure(SSL_CTX& ctx) {
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1) return false;
  if (!files_.client_ca.empty()) {
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  SSL_CTX_set_cert_cb(&ctx, &HttpTls::OnCertificate, this);
  return true;
}

}  // namespace weft
