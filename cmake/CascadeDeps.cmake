# Third-party dependencies, all from Debian 12 packages (see README.md, "Dependencies").
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)              # FindProtobuf (protobuf 3.21)
find_package(gRPC CONFIG REQUIRED)           # needs protobuf-compiler-grpc for the plugin
find_package(nlohmann_json 3.10 REQUIRED)    # JSON: config.json, tokenizer.json, HTTP API
find_package(CLI11 CONFIG REQUIRED)          # command-line parsing
find_package(spdlog CONFIG REQUIRED)         # logging
find_package(yaml-cpp CONFIG REQUIRED)       # YAML cluster files
find_package(MPI COMPONENTS C)               # OpenMPI transport (optional at build time)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)   # pre-tokenizer regexes
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)  # the HTTP API's server
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)    # prefix-cache block names (XXH3-128)

find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
if(CASCADE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)  # HTTP client in tests
endif()
if(CASCADE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
