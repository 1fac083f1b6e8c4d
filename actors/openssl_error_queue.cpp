#include "actors/openssl_error_queue.hpp"

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdio>
#include <cstdlib>

namespace {

// OpenSSL's own definition of `name` (the next object after this executable that defines it).
template <class F>
F next_definition(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    std::fprintf(stderr, "troupe: cannot find OpenSSL's %s: %s\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}

__attribute__((visibility("default"))) int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

__attribute__((visibility("default"))) int SSL_connect(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

__attribute__((visibility("default"))) int SSL_accept(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

}  // extern "C"

namespace troupe::actors {

bool openssl_error_queue_guarded() {
  // The dynamic linker's SSL_read is this file's when the executable exports it.
  return dlsym(RTLD_DEFAULT, "SSL_read") == reinterpret_cast<void*>(&SSL_read);
}

}  // namespace troupe::actors
