# Warnings, ccache and sanitizers shared by every target.
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()

# Applied per target through cascade_set_warnings() so that generated protobuf code and
# third-party headers are not held to them.
# With clang, the locking the code states (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED on
# absl::Mutex) is checked at compile time, and a violation is an error.
function(cascade_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety -Werror=thread-safety>)
  endif()
endfunction()

if(CASCADE_SANITIZE)
  add_compile_options(-fsanitize=${CASCADE_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=${CASCADE_SANITIZE})
endif()

# Per-file ISA flags for the CPU kernels: each SIMD level lives in its own translation
# unit and is chosen at run time, so the binary still runs on CPUs without it.
set(CASCADE_AVX2_FLAGS -mavx2 -mfma -mf16c -mbmi2)
