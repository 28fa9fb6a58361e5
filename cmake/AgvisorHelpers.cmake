# agvisor_add_library(NAME SOURCES ... DEPS ...): target agvisor_NAME, alias agvisor::NAME.
function(agvisor_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(agvisor_${name} STATIC ${ARG_SOURCES})
  add_library(agvisor::${name} ALIAS agvisor_${name})
  target_link_libraries(agvisor_${name} PUBLIC agvisor_options ${ARG_DEPS})
endfunction()

# agvisor_add_test(NAME SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s]): a GoogleTest binary
# registered with CTest. Label `unit` unless LABELS says otherwise (`integration` needs dockerd).
function(agvisor_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT AGVISOR_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  # Tests may include shared test helpers as "tests/...".
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE agvisor_options ${ARG_DEPS} GTest::gtest GTest::gmock
                        GTest::gtest_main)
  # The test's own code is compiled with -Og: the code under test is the libraries', built with
  # the preset's optimisation. A test file at -O2 took twice the CPU of one at -Og (-O2 11.6 s,
  # -O1 8.5 s, -Og 6.4 s for sandbox_lifecycle_test.cc), and test files are most of the build.
  if(NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
    target_compile_options(${name} PRIVATE -Og)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
endfunction()

# agvisor_add_fuzzer(NAME SOURCES ...): a libFuzzer binary (AGVISOR_FUZZ=ON, clang) with ASan and
# UBSan, linked to agvisor::base only (list the sources under test in SOURCES, so they carry the
# coverage instrumentation), and a smoke test labelled `fuzz`: 20 s of fuzzing from seed 1, a
# run of more than 20 s on one input counted as a hang. Long runs are manual:
# build/fuzz/src/agvisor/<dir>/NAME -max_total_time=600 -timeout=20 <corpus dir>.
function(agvisor_add_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE -O1 -fsanitize=fuzzer,address,undefined
                                         -fno-sanitize-recover=undefined)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${name} PRIVATE agvisor_options agvisor::base Threads::Threads)
  if(AGVISOR_BUILD_TESTS)
    add_test(NAME ${name}_smoke COMMAND ${name} -max_total_time=20 -timeout=20 -seed=1
                                        -rss_limit_mb=2048)
    set_tests_properties(${name}_smoke PROPERTIES LABELS fuzz TIMEOUT 120)
  endif()
endfunction()
