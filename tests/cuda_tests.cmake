# The CUDA uploader (client/cuda_uploader.h) against a shim that stands in for the NVIDIA driver:
# tests/cuda_shim/libcuda_shim.cc built as <build>/tests/cuda_shim/libcuda.so.1. The test loads
# it by path (UploaderOptions::libcuda_path / RINGFEED_LIBCUDA), never a real libcuda, so it
# runs on machines without a GPU (CI). The shim is never installed.
add_library(ringfeed_cuda_shim SHARED cuda_shim/libcuda_shim.cc)
set_target_properties(ringfeed_cuda_shim PROPERTIES
  OUTPUT_NAME cuda PREFIX lib SUFFIX .so.1
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/cuda_shim)

ringfeed_test(cuda_uploader_test SOURCES cuda_uploader_test.cc
              LIBS ringfeed_client ringfeed_ring_test_producer nlohmann_json::nlohmann_json ${CMAKE_DL_LIBS}
              TIMEOUT 60)
add_dependencies(cuda_uploader_test ringfeed_cuda_shim)
target_compile_definitions(cuda_uploader_test PRIVATE RINGFEED_CUDA_SHIM="$<TARGET_FILE:ringfeed_cuda_shim>")
