# daemon/budget.h: CPU and memory budgets (cgroup trees in temp dirs, the real machine, the
# memory plan's arithmetic). The real cgroup v1 test needs root and a writable cpu hierarchy:
# it is its own CTest entry (hidden tag [.cgroup_v1] in the main run), skipped (testing::Skip,
# exit 77) where it cannot create a cgroup.
ringfeed_test(budget_test SOURCES budget_test.cc LIBS ringfeed_budget TIMEOUT 60)
add_test(NAME budget_cgroup_v1_test COMMAND budget_test "[.cgroup_v1]")
set_tests_properties(budget_cgroup_v1_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60
                     WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
