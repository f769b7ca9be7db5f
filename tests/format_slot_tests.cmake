# Parsing into caller memory (shared-memory slots): ColumnBuffer, external ExampleBatch,
# ExampleParser::Measure, ColumnCapacities. Included from tests/CMakeLists.txt.
ringfeed_test(example_slot_test SOURCES example_slot_test.cc TIMEOUT 120)
