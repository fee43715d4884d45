# CUDA is optional: CASCADE_CUDA=AUTO builds kernels/cuda when nvcc is found, ON requires
# it, OFF skips it. Nothing here needs a GPU to compile; programs that find no GPU at run
# time say so and use the CPU backend.
set(CASCADE_HAVE_CUDA OFF)
if(NOT CASCADE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # CMake 3.25 has no CUDA::nccl target: look for the library and header directly.
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                 /usr/local/cuda/lib /usr/local/cuda/lib64)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    set(CASCADE_HAVE_CUDA ON)
    message(STATUS "Cascade: CUDA ${CUDAToolkit_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES}, NCCL: ${NCCL_LIBRARY}")
  elseif(CASCADE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "CASCADE_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "Cascade: no CUDA compiler found; building the CPU backend only")
  endif()
endif()
