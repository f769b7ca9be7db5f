# ringfeedd: order algorithms, sequencer, end-to-end runs with real processes.
ringfeed_test(shuffle_test SOURCES shuffle_test.cc LIBS ringfeed_daemon nlohmann_json::nlohmann_json)
# Its [slowfs] case (a file on a slowfs mount) is a CTest entry of its own: slowfs_tests.cmake.
ringfeed_test(sequencer_test SOURCES sequencer_test.cc ARGS "~[slowfs]" LIBS ringfeed_daemon nlohmann_json::nlohmann_json)
ringfeed_test(sched_clock_test SOURCES sched_clock_test.cc LIBS ringfeed_daemon)
ringfeed_test(log_format_test SOURCES log_format_test.cc LIBS ringfeed_daemon)
ringfeed_test(status_report_test SOURCES status_report_test.cc LIBS ringfeed_daemon)
# End to end: ringfeedd and ringfeedctl run as real processes, consumers in forked children
# (tests/daemon_harness.h). The golden and /dev/shm tests may skip (testing::Skip), and are
# programs of their own, so that CTest reports them as skipped (a program reports a skip only
# when all its test cases skipped: tests/catch_main.cc).
add_library(ringfeed_daemon_harness STATIC daemon_harness.cc)
target_link_libraries(ringfeed_daemon_harness PUBLIC ringfeed_test_support ringfeed_client ringfeed_format
  nlohmann_json::nlohmann_json)
ringfeed_test(daemon_e2e_test SOURCES daemon_e2e_test.cc TIMEOUT 120
  LIBS ringfeed_daemon_harness ringfeed_client ringfeed_format nlohmann_json::nlohmann_json)
ringfeed_test(daemon_golden_test SOURCES daemon_golden_test.cc TIMEOUT 120
  LIBS ringfeed_daemon_harness ringfeed_client nlohmann_json::nlohmann_json ZLIB::ZLIB)
# When things go wrong, by area (one program each, so CTest runs them side by side):
ringfeed_test(daemon_consumers_test SOURCES daemon_consumers_test.cc TIMEOUT 120
  LIBS ringfeed_daemon_harness ringfeed_client nlohmann_json::nlohmann_json)
ringfeed_test(daemon_names_test SOURCES daemon_names_test.cc TIMEOUT 120
  LIBS ringfeed_daemon_harness ringfeed_client nlohmann_json::nlohmann_json)
ringfeed_test(daemon_data_limits_test SOURCES daemon_data_limits_test.cc TIMEOUT 120
  LIBS ringfeed_daemon_harness ringfeed_client ringfeed_format ringfeed_budget nlohmann_json::nlohmann_json)
ringfeed_test(daemon_control_signals_test SOURCES daemon_control_signals_test.cc TIMEOUT 120
  LIBS ringfeed_daemon_harness ringfeed_client nlohmann_json::nlohmann_json)
ringfeed_test(daemon_devshm_test SOURCES daemon_devshm_test.cc TIMEOUT 60 LIBS ringfeed_daemon_harness ringfeed_format)
# ringfeedctl list / status / dump against a fake daemon (replies of other types, another job's
# welcome) and dump's timeout in ranks mode.
ringfeed_test(ringfeedctl_test SOURCES ringfeedctl_test.cc TIMEOUT 120
  LIBS ringfeed_daemon_harness ringfeed_client nlohmann_json::nlohmann_json)
foreach(t daemon_e2e_test daemon_golden_test daemon_consumers_test daemon_names_test daemon_data_limits_test
    daemon_control_signals_test daemon_devshm_test ringfeedctl_test)
  add_dependencies(${t} ringfeedd ringfeedctl)
endforeach()
add_dependencies(daemon_e2e_test example_trainer)
ringfeed_test(batch_writer_test SOURCES batch_writer_test.cc LIBS ringfeed_daemon)
