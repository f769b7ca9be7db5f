# systemd integration: the sd_notify wrapper (daemon/systemd_notify.h) against a fake service
# manager socket, and the template unit (systemd/ringfeed@.service) checked by assertion and by
# `systemd-analyze verify` (that test case skipped, testing::Skip, where systemd-analyze is absent).
# Included from tests/CMakeLists.txt.
include(GNUInstallDirs)

ringfeed_test(systemd_notify_test SOURCES systemd_notify_test.cc LIBS ringfeed_systemd TIMEOUT 60)

ringfeed_test(systemd_unit_test SOURCES systemd_unit_test.cc TIMEOUT 60)
# The install-prefix case runs `cmake --install` of the unit's component into a temporary prefix.
target_compile_definitions(systemd_unit_test PRIVATE RINGFEED_CMAKE_COMMAND="${CMAKE_COMMAND}"
  RINGFEED_SYSTEMD_UNIT_DIR="${RINGFEED_SYSTEMD_UNIT_DIR}")
set_property(TEST systemd_unit_test APPEND PROPERTY ENVIRONMENT "SYSTEMD_LOG_COLOR=0")
