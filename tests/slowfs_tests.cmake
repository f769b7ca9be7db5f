# slowfs (bench/slowfs): the slow-storage FUSE filesystem, mounted for real. The test runs the
# slowfs binary, so the target must exist whenever tests are built: bench/CMakeLists.txt adds it
# when RINGFEED_BENCH=ON (the default); otherwise it is added here. Without libfuse3 neither the
# binary nor the test is built (a configure warning says so). Where /dev/fuse is missing or
# mounting is not permitted, the test skips (testing::Skip, exit 77: CTest's "Skipped").
if(NOT RINGFEED_BENCH)
  add_subdirectory(${PROJECT_SOURCE_DIR}/bench/slowfs ${PROJECT_BINARY_DIR}/bench/slowfs)
endif()
pkg_check_modules(SLOWFS_FUSE3 QUIET fuse3)
if(SLOWFS_FUSE3_FOUND)
  ringfeed_test(slowfs_test SOURCES slowfs_test.cc TIMEOUT 60 LIBS ringfeed_format nlohmann_json::nlohmann_json)
  add_dependencies(slowfs_test slowfs)
  target_compile_definitions(slowfs_test PRIVATE RINGFEED_SLOWFS_BIN="$<TARGET_FILE:slowfs>")
endif()

# The sequencer's interleave with one file on a slow mount (deterministic: false takes the other
# files' records meanwhile); skips without FUSE.
add_test(NAME sequencer_slowfs_test COMMAND sequencer_test "[slowfs]")
set_tests_properties(sequencer_slowfs_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60
                     WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
if(SLOWFS_FUSE3_FOUND)
  add_dependencies(sequencer_test slowfs)
  target_compile_definitions(sequencer_test PRIVATE RINGFEED_SLOWFS_BIN="$<TARGET_FILE:slowfs>")
endif()

# The autotuner and budgets end to end (real ringfeedd, consumers, and a slowfs mount for the
# slow-storage case, which skips without FUSE).
# The slow-mount case may skip (no FUSE): it runs as a CTest entry of its own, so that a skip
# does not hide the other cases' results.
ringfeed_test(daemon_autotune_test SOURCES daemon_autotune_test.cc TIMEOUT 180 ARGS "~[slowfs]"
  LIBS ringfeed_daemon_harness ringfeed_client ringfeed_format nlohmann_json::nlohmann_json)
add_test(NAME daemon_autotune_slowfs_test COMMAND daemon_autotune_test "[slowfs]")
set_tests_properties(daemon_autotune_slowfs_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120
                     WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_dependencies(daemon_autotune_test ringfeedd ringfeedctl)
# A command wrapper in which io_uring_setup fails (seccomp), for ringfeedd without io_uring.
add_executable(no_io_uring no_io_uring.cc)
add_dependencies(daemon_autotune_test no_io_uring)
target_compile_definitions(daemon_autotune_test PRIVATE RINGFEED_NO_IO_URING_BIN="$<TARGET_FILE:no_io_uring>")
if(SLOWFS_FUSE3_FOUND)
  add_dependencies(daemon_autotune_test slowfs)
  target_compile_definitions(daemon_autotune_test PRIVATE RINGFEED_SLOWFS_BIN="$<TARGET_FILE:slowfs>")
endif()
