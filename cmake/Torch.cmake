# Finds LibTorch inside the project's virtual environment (.venv, made by
# deploy/dev.sh) through torch.utils.cmake_prefix_path, and Debian's gloo
# headers (the wheel ships c10d's Gloo backend but not gloo's headers; only
# the headers are used, the code is libtorch's own).
set(FRAMEWORM_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python of the virtual environment that carries torch")
execute_process(
  COMMAND "${FRAMEWORM_PYTHON}" -c "import torch; print(torch.utils.cmake_prefix_path)"
  OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _torch_rc)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "torch not importable from ${FRAMEWORM_PYTHON}: run deploy/dev.sh install")
endif()
list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
# No GPU is probed at configure time: name the architectures instead.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "8.0;9.0")
endif()
find_package(Torch REQUIRED)
find_path(GLOO_INCLUDE_DIR gloo/algorithm.h REQUIRED)
# CUDA/NCCL headers for the NCCL backend's one translation unit.
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS "${_torch_prefix}/../../../nvidia/nccl/include" /usr/local/cuda/include /usr/include)
# Torch's own CMake files (its CUDA build) have found the toolkit already;
# finding it a second time fails with Debian's CMake 3.25 where the toolkit
# has no nvToolsExt (CUDA 13): torch made CUDA::nvToolsExt an alias, which
# FindCUDAToolkit then tries to set a property on.
if(NOT CUDAToolkit_FOUND)
  find_package(CUDAToolkit QUIET)
endif()

add_library(frameworm_torch INTERFACE)
target_link_libraries(frameworm_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(frameworm_torch SYSTEM INTERFACE ${GLOO_INCLUDE_DIR})
target_compile_options(frameworm_torch INTERFACE -Wno-unused-parameter)
