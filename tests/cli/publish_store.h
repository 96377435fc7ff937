// A store published as processors publish what they commit, for tests of
// `serve --brokers` against the real broker: every window to a windows
// topic (key JOB@START, co-partitioned as processor/fleet_topics.h says),
// and one partition snapshot (processor/state_changelog.h) to a state
// topic with every job's state, times and alert state.
#ifndef BUBBLEWATCH_TESTS_CLI_PUBLISH_STORE_H_
#define BUBBLEWATCH_TESTS_CLI_PUBLISH_STORE_H_

#include <memory>
#include <string>

#include "tests/cli/serve_process.h"

namespace bubblewatch::testing {

// Publishes the store at `store` (read-only) to `topic`.windows (created
// with 3 partitions) and `topic`.state (1 partition) on the test broker
// (BUBBLEWATCH_KAFKA_BROKERS).
void PublishStore(const std::string& store, const std::string& topic);

// Publishes `store` under a unique topic named after `topic_base`, starts
// `serve --brokers` with its own store at `serve_store`, and waits until it
// has caught up with both topics and lists every job of `store`. nullptr
// (after a test failure) when that does not happen within 60 s.
std::unique_ptr<ServeProcess> ServeThroughBrokers(
    const std::string& store, const std::string& serve_store,
    const std::string& topic_base);

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_CLI_PUBLISH_STORE_H_
