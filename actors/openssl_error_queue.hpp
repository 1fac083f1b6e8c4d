#pragma once
// A workaround for CAF 0.17's OpenSSL layer (libcaf_openssl, the cluster's TLS links).
//
// OpenSSL keeps one error queue per thread and requires it to be empty before each TLS I/O call
// (SSL_get_error(3): "the current thread's error queue must be empty before the TLS/SSL I/O
// operation is attempted, or SSL_get_error() will not work reliably"). CAF's session code does
// not clear it, and leaves an entry behind when a peer's connection ends with an error (its
// SSL_ERROR_SYSCALL path drains nothing). All links share the multiplexer's thread, so the next
// routine "want read" on any other link was read as a fatal error: a kill -9 of one worker
// closed the front's links to every other worker (each declared dead, its streams moved), 3 of
// 3 times over TLS, never over plain TCP.
//
// The fix is in the process rather than in CAF (Debian's libcaf-openssl 0.17.6): this program
// defines SSL_read, SSL_write, SSL_connect and SSL_accept, which the dynamic linker binds
// libcaf_openssl's calls to (an executable's symbols come first); each clears the calling
// thread's queue, then calls OpenSSL's own (dlsym RTLD_NEXT). Boost.Asio's TLS (the HTTP port)
// clears it itself; the extra clear changes nothing there.
namespace troupe::actors {

// Whether the wrappers are the ones the process calls (they are when this object is linked into
// the executable, which calling this function ensures). Logged at a cluster's start.
bool openssl_error_queue_guarded();

}  // namespace troupe::actors
