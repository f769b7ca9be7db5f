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
