// The shared test broker: the one ops/test starts for the tests labelled
// kafka and names in BUBBLEWATCH_KAFKA_BROKERS. Its address, names that no
// other test (or checkout) uses on it, and topics with a chosen partition
// count. Reading topics back is topic_reader.h; a broker of a test's own,
// to kill and restart, is own_broker.h.
#ifndef BUBBLEWATCH_TESTS_TESTING_KAFKA_BROKER_H_
#define BUBBLEWATCH_TESTS_TESTING_KAFKA_BROKER_H_

#include <string>

namespace bubblewatch::testing {

// BUBBLEWATCH_KAFKA_BROKERS. Unset or empty is a test failure (these tests
// fail, never skip, without their broker), and then returns "127.0.0.1:1",
// where nothing listens, so that whatever the test goes on to do fails
// quickly instead of reaching some other broker.
std::string Brokers();

// `base` + "-" + this process's pid + "-" + a steady-clock count: a topic,
// group or file name that differs between calls, between tests run at once
// and between runs against the same broker.
std::string Unique(const std::string& base);

// Creates `topic` with `partitions` partitions on `brokers` (whose
// auto-created topics have one) and waits until its metadata shows them.
// Fails the test (fatally: call it under ASSERT_NO_FATAL_FAILURE, or
// directly from the test body) if it existed already or did not appear
// within 30 s.
void CreateTopic(const std::string& topic, int partitions,
                 const std::string& brokers = Brokers());

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_KAFKA_BROKER_H_
