# ringfeedd: order algorithms, sequencer, end-to-end runs with real processes.
ringfeed_test(shuffle_test SOURCES shuffle_test.cc LIBS ringfeed_daemon nlohmann_json::nlohmann_json)
ringfeed_test(sequencer_test SOURCES sequencer_test.cc LIBS ringfeed_daemon)
