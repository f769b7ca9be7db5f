# Tests of the shared-memory ring (shm/) and the client library (client/): real processes
# (fork), real POSIX shared memory, real Unix sockets. A small test producer plays the daemon.
enable_language(C)

add_library(ringfeed_ring_test_producer STATIC ring_test_producer.cc)
target_include_directories(ringfeed_ring_test_producer PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(ringfeed_ring_test_producer PUBLIC ringfeed_shm PRIVATE nlohmann_json::nlohmann_json)

ringfeed_test(shm_ring_test SOURCES shm_ring_test.cc LIBS ringfeed_ring_test_producer TIMEOUT 60)
ringfeed_test(shm_claim_test SOURCES shm_claim_test.cc LIBS ringfeed_ring_test_producer TIMEOUT 60)
ringfeed_test(shm_segment_test SOURCES shm_segment_test.cc LIBS ringfeed_ring_test_producer TIMEOUT 60)
ringfeed_test(client_test SOURCES client_test.cc LIBS ringfeed_client ringfeed_ring_test_producer TIMEOUT 60)

# The C ABI, used from a file compiled as C.
ringfeed_test(client_c_abi_test SOURCES client_c_abi_test.cc client_c_abi_test.c
              LIBS ringfeed_client ringfeed_ring_test_producer TIMEOUT 60)
set_source_files_properties(client_c_abi_test.c PROPERTIES COMPILE_OPTIONS "-std=c11")

# The installed client library (pkg-config and find_package), built against by a trainer outside
# this tree: installs the build into a temporary prefix (needs the whole build: run after it).
# Not in sanitizer builds: their library needs the sanitizer runtime loaded first, which a
# trainer built without the flags does not do.
if(NOT RINGFEED_SANITIZE)
  add_test(NAME install_test
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install_test.sh ${PROJECT_BINARY_DIR} ${CMAKE_COMMAND}
                   ${CMAKE_CXX_COMPILER} ${CMAKE_C_COMPILER})
  set_tests_properties(install_test PROPERTIES TIMEOUT 300)
endif()
