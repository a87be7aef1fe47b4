# Sanitized builds (docs/security.md, "Sanitizers and fuzzing"): KILN_SANITIZE=address gives
# ASan+UBSan, =thread TSan; KILN_FUZZ adds libFuzzer's coverage to every library and builds
# tests/fuzz. Both need clang; a plain build (neither set) is left exactly as it was.
set(KILN_SANITIZE "" CACHE STRING "Sanitizers for every target: address (ASan+UBSan), thread (TSan), or empty")
set_property(CACHE KILN_SANITIZE PROPERTY STRINGS "" address thread)
option(KILN_FUZZ "Build the fuzz targets of tests/fuzz (libFuzzer with clang, else corpus replayers)" OFF)

if(KILN_SANITIZE STREQUAL "address")
  # Every UB report aborts, so a finding fails its test instead of scrolling past.
  set(kiln_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=all)
elseif(KILN_SANITIZE STREQUAL "thread")
  set(kiln_sanitize_flags -fsanitize=thread)
elseif(NOT KILN_SANITIZE STREQUAL "")
  message(FATAL_ERROR "KILN_SANITIZE must be address, thread or empty, not '${KILN_SANITIZE}'")
endif()

if(kiln_sanitize_flags)
  # -O1 with line tables: about half the compile time of -O3 and readable stack traces; the
  # flags come after CMAKE_CXX_FLAGS_RELEASE, so this -O1 is the one that applies.
  set(kiln_host_flags ${kiln_sanitize_flags} -O1 -gline-tables-only -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${kiln_host_flags}>")
  add_link_options(${kiln_sanitize_flags})
endif()

# libFuzzer needs clang; tests/fuzz adds its coverage feedback to the libraries it fuzzes.
set(KILN_LIBFUZZER OFF)
if(KILN_FUZZ AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(KILN_LIBFUZZER ON)
endif()
