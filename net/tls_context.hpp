#pragma once
// The server's TLS settings as an OpenSSL context (server.tls_cert, server.tls_key), loaded once
// at start. Its own translation unit: OpenSSL and Asio's ssl headers stay out of server.hpp.
#include <memory>
#include <string>

#include "common/result.hpp"

namespace boost::asio::ssl {
class context;
}

namespace troupe::net {

// A TLS 1.2+ server context from a PEM certificate chain and a PEM private key. The error names
// the key (server.tls_cert or server.tls_key), the file and OpenSSL's reason, and says so when
// the key does not match the certificate or only one of the two is set.
result<std::shared_ptr<boost::asio::ssl::context>> load_tls_context(const std::string& cert_file,
                                                                     const std::string& key_file);

}  // namespace troupe::net
