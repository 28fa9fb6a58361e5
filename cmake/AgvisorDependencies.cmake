# Third-party dependencies, all from Debian bookworm packages (scripts/setup-host installs them).
# A missing one fails configure with the apt package that provides it.
function(agvisor_require found what apt)
  if(NOT ${found})
    message(FATAL_ERROR "${what} not found: install it with `apt-get install ${apt}` "
                        "(or run scripts/setup-host, which installs every dependency)")
  endif()
endfunction()

find_package(Threads REQUIRED)
find_package(Boost 1.81 QUIET COMPONENTS json)
agvisor_require(Boost_FOUND "Boost 1.81 (Asio, Beast, JSON)" "libboost1.81-dev libboost-json1.81-dev")
find_package(OpenSSL 3 QUIET)
agvisor_require(OPENSSL_FOUND "OpenSSL 3" "libssl-dev")
find_package(fmt QUIET)
agvisor_require(fmt_FOUND "fmt" "libfmt-dev")
find_package(CLI11 QUIET)
agvisor_require(CLI11_FOUND "CLI11" "libcli11-dev")
# kubeconfig files (kube/kubeconfig.cc).
find_package(yaml-cpp QUIET)
agvisor_require(yaml-cpp_FOUND "yaml-cpp" "libyaml-cpp-dev")
find_package(ZLIB QUIET)
agvisor_require(ZLIB_FOUND "zlib (PNG screenshots of desktops)" "zlib1g-dev")
if(AGVISOR_BUILD_TESTS)
  find_package(GTest QUIET)
  agvisor_require(GTest_FOUND "GoogleTest" "libgtest-dev libgmock-dev")
endif()
