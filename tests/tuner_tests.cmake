# The autotuner's decisions (daemon/tuner.h) against a simulated pipeline whose optimum is
# computed by hand (tests/tuner_sim.h). Links the tuner alone: no threads, files or daemon.
ringfeed_test(tuner_test SOURCES tuner_test.cc tuner_sim.cc LIBS ringfeed_tuner TIMEOUT 60)
