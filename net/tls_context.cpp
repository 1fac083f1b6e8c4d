// Loads server.tls_cert / server.tls_key into an OpenSSL context (net/tls_context.hpp).
#include "net/tls_context.hpp"

#include <boost/asio/ssl/context.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fstream>

namespace troupe::net {

namespace ssl = boost::asio::ssl;

namespace {

// OpenSSL's own words for the last error ("no start line", "key values mismatch"), which name
// the problem better than Asio's generic category message.
std::string openssl_reason(const boost::system::error_code& ec) {
  const unsigned long e = ERR_peek_last_error() != 0 ? ERR_peek_last_error() : static_cast<unsigned long>(ec.value());
  ERR_clear_error();
  const char* reason = ERR_reason_error_string(e);
  return reason ? reason : ec.message();
}

bool readable(const std::string& path) {
  std::ifstream f(path);
  return f.good();
}

}  // namespace

result<std::shared_ptr<ssl::context>> load_tls_context(const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() != key_file.empty())
    return make_error(cert_file.empty() ? "server.tls_key is set but server.tls_cert is not: TLS needs both"
                                        : "server.tls_cert is set but server.tls_key is not: TLS needs both");
  if (!readable(cert_file)) return make_error("server.tls_cert: cannot read '" + cert_file + "'");
  if (!readable(key_file)) return make_error("server.tls_key: cannot read '" + key_file + "'");
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  // TLS 1.2 and 1.3 only; no compression (CRIME); no renegotiation (a client-driven CPU sink).
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression |
                       SSL_OP_NO_RENEGOTIATION,
                   ec);
  if (ec) return make_error("TLS setup failed: " + ec.message());
  ERR_clear_error();
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) return make_error("server.tls_cert: '" + cert_file + "' is not a PEM certificate (" + openssl_reason(ec) + ")");
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) {
    const std::string why = openssl_reason(ec);
    if (why.find("mismatch") != std::string::npos)  // X509_R_KEY_VALUES_MISMATCH: a key, but another's
      return make_error("server.tls_key: '" + key_file + "' does not match the certificate in server.tls_cert ('" +
                        cert_file + "')");
    return make_error("server.tls_key: '" + key_file + "' is not a PEM private key (" + why + ")");
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    return make_error("server.tls_key: '" + key_file + "' does not match the certificate in server.tls_cert ('" +
                      cert_file + "')");
  }
  return ctx;
}

}  // namespace troupe::net
