# Compiler options shared by every agvisor target.
add_library(agvisor_options INTERFACE)
target_compile_options(agvisor_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Woverloaded-virtual -Wno-missing-field-initializers>)
if(AGVISOR_WERROR)
  target_compile_options(agvisor_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
target_include_directories(agvisor_options INTERFACE ${PROJECT_SOURCE_DIR}/src)
