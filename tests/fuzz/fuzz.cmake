# Included from tests/CMakeLists.txt: builds the libFuzzer targets
# (tests/fuzz/CMakeLists.txt, a project of its own) with clang in
# <build>/fuzz, whatever compiler builds the rest. Their short runs are
# `ctest --test-dir <build>/fuzz` (scripts/test.sh, stage "fuzz"), not part
# of this build's ctest: the suite runs them once, not in every build.
#
# VSOCKET_FUZZ: AUTO (default) builds them when a clang that links
# -fsanitize=fuzzer is found (Debian: clang and libclang-rt-14-dev), ON
# requires it, OFF skips them.
set(VSOCKET_FUZZ AUTO CACHE STRING "Build the libFuzzer targets (AUTO, ON, OFF)")
set_property(CACHE VSOCKET_FUZZ PROPERTY STRINGS AUTO ON OFF)

# Whether CLANG links a libFuzzer program: the compiler alone is not enough,
# the runtime comes in its own package.
function(vsocket_clang_has_libfuzzer clang out)
  set(dir ${CMAKE_BINARY_DIR}/fuzz-probe)
  file(WRITE ${dir}/probe.c
       "#include <stddef.h>\n#include <stdint.h>\n"
       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
  execute_process(COMMAND ${clang} -fsanitize=fuzzer,address,undefined ${dir}/probe.c
                          -o ${dir}/probe
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

if(NOT VSOCKET_FUZZ STREQUAL "OFF")
  find_program(VSOCKET_FUZZ_CLANG NAMES clang clang-14 clang-15 clang-16)
  set(fuzz_ok FALSE)
  if(VSOCKET_FUZZ_CLANG)
    vsocket_clang_has_libfuzzer(${VSOCKET_FUZZ_CLANG} fuzz_ok)
  endif()
  if(fuzz_ok)
    message(STATUS "fuzz targets: built with ${VSOCKET_FUZZ_CLANG} in ${CMAKE_BINARY_DIR}/fuzz")
    include(ExternalProject)
    ExternalProject_Add(vsocket_fuzz
      SOURCE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz
      BINARY_DIR ${CMAKE_BINARY_DIR}/fuzz
      CMAKE_GENERATOR ${CMAKE_GENERATOR}
      CMAKE_ARGS -DCMAKE_C_COMPILER=${VSOCKET_FUZZ_CLANG} -DCMAKE_BUILD_TYPE=RelWithDebInfo
      INSTALL_COMMAND ""
      # The sources live in src/ as well: let the inner build decide.
      BUILD_ALWAYS ON)
  elseif(VSOCKET_FUZZ STREQUAL "ON")
    message(FATAL_ERROR "VSOCKET_FUZZ=ON: no clang linking -fsanitize=fuzzer "
                        "(scripts/install-deps.sh installs clang and libclang-rt-14-dev)")
  else()
    message(STATUS "fuzz targets: skipped (no clang with libFuzzer)")
  endif()
endif()
