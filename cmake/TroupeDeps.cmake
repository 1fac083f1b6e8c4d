# Finds Troupe's dependencies (all from Debian packages; see scripts/setup.sh).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)

if(NOT TROUPE_ENGINE_ONLY)
  # libcaf-dev (0.17.6) ships no CMake config: define imported targets by hand.
  find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
  find_package(OpenSSL REQUIRED)  # the cluster: TLS links (CAF::openssl), HMAC proofs of its secret
  find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
  find_library(CAF_IO_LIBRARY caf_io REQUIRED)
  find_library(CAF_OPENSSL_LIBRARY caf_openssl REQUIRED)  # TLS for the cluster's links
  if(NOT TARGET CAF::core)
    add_library(CAF::core SHARED IMPORTED)
    set_target_properties(CAF::core PROPERTIES IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}" INTERFACE_LINK_LIBRARIES Threads::Threads)
    add_library(CAF::io SHARED IMPORTED)
    set_target_properties(CAF::io PROPERTIES IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::core)
    add_library(CAF::openssl SHARED IMPORTED)
    set_target_properties(CAF::openssl PROPERTIES IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
      INTERFACE_LINK_LIBRARIES "CAF::io;OpenSSL::SSL")
  endif()
  find_package(Boost 1.74 REQUIRED COMPONENTS system)
  find_package(simdjson 3 REQUIRED CONFIG)
  find_package(RocksDB 7 REQUIRED CONFIG)
  find_package(tomlplusplus REQUIRED)
  find_package(spdlog REQUIRED)
  find_package(CLI11 REQUIRED)
  find_path(HNSWLIB_INCLUDE_DIR hnswlib/hnswlib.h REQUIRED)
endif()

if(TROUPE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
find_package(benchmark QUIET)
