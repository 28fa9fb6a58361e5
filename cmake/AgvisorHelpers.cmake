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
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
endfunction()
