// OwnBroker: a Kafka broker that one integration test starts, kills or stops,
// and restarts on the same data, for fault tests that must not disturb the
// shared test broker (ops/test's, named by BUBBLEWATCH_KAFKA_BROKERS).
//
// It runs ops/kafka/start on the shared broker's port + an offset the test
// picks (its controller takes the next port; tests run one at a time under
// ops/test, but each fault test takes its own pair so that a leftover broker
// of one never answers another). A restart relaunches the broker process's
// own command line, keeping its data (ops/kafka/start always formats fresh
// storage, which would lose what was acknowledged before the stop). The
// destructor stops it with ops/kafka/stop and, unless the test failed,
// removes its state directory (broker.log explains a failure).
//
// BUBBLEWATCH_TEST_KEEP_BROKER=1 leaves the broker running (stop it with
// ops/kafka/stop --port PORT --state-dir DIR) so that topics can be
// inspected with kcat.
#ifndef BUBBLEWATCH_TESTS_TESTING_OWN_BROKER_H_
#define BUBBLEWATCH_TESTS_TESTING_OWN_BROKER_H_

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/time/time.h"

namespace bubblewatch::testing {

// The shared test broker's port (from BUBBLEWATCH_KAFKA_BROKERS, 39092 if
// unset) + `offset`.
int PortAboveSharedBroker(int offset);

class OwnBroker {
 public:
  // `name` tells state directories apart (it goes into the path).
  // `kafka_version`, when not empty, is the Kafka release to run
  // (BUBBLEWATCH_KAFKA_VERSION for ops/kafka/start, e.g. "3.9.1" for a
  // broker older than the shared one); empty runs the shared broker's.
  OwnBroker(int port, const std::string& name,
            const std::string& kafka_version = "");
  ~OwnBroker();
  OwnBroker(const OwnBroker&) = delete;
  OwnBroker& operator=(const OwnBroker&) = delete;

  // ops/kafka/start, retried: it can misreport a broker that is still being
  // exec'd as "exited during start-up", and cleans up after itself then.
  bool Start();
  void Stop();

  // Ends the broker process with `signal` (SIGTERM: a clean shutdown;
  // SIGKILL: a crash, recovered from its logs at the next start), waits
  // until it is gone, and starts the same command line again on the same
  // data. Returns once the new broker logged "Kafka Server started", with
  // `down_for` the time from the signal to then; false with `error` set.
  bool Restart(int signal, absl::Duration* down_for, std::string* error);

  std::string brokers() const;
  const std::string& state_dir() const { return state_dir_; }
  int port() const { return port_; }

 private:
  std::string pid_file() const { return state_dir_ + "/broker.pid"; }
  std::string log_file() const { return state_dir_ + "/broker.log"; }
  size_t CountStarted() const;

  int port_;
  std::string state_dir_;
  std::string kafka_version_;
  std::string ops_;
  pid_t relaunched_pid_ = 0;  // Our child once restarted.
};

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_OWN_BROKER_H_
