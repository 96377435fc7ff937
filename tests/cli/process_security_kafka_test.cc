// `bubblewatch process` whose security settings do not match the broker's
// listener exits at startup, with one line that says why, instead of waiting
// for ever as if the broker were down. Against the real
// broker (ctest label kafka), which listens in PLAINTEXT: a SASL client and a
// TLS client. And a PLAINTEXT client against a listener that drops what it
// reads, as a TLS listener drops a plaintext request. And a broker without
// idempotent producers or consumer groups (as librdkafka sees it).
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/cli_runner.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::CliResult;
using ::bubblewatch::testing::RunBubblewatch;
using ::testing::AnyOf;
using ::testing::HasSubstr;

// Without the fix `process` never exits: it is killed after this long, and
// the test fails on its exit code. With it, it exits within a second or two.
constexpr int kKillAfterS = 60;
constexpr auto kPromptly = std::chrono::seconds(20);

using testing::Brokers;

struct Timed {
  CliResult result;
  std::chrono::steady_clock::duration took;
};

Timed RunProcess(const std::string& brokers, const std::string& flags) {
  testing::TempDir dir;
  const std::string name = testing::Unique("it-security");
  const auto start = std::chrono::steady_clock::now();
  CliResult r = RunBubblewatch("process --brokers " + brokers + " --topic " +
                                   name + " --group " + name + " --store '" +
                                   dir.Sub("store") + "' " + flags,
                               ".", kKillAfterS);
  return {std::move(r), std::chrono::steady_clock::now() - start};
}

// The last line on stderr: the one the command exits with.
std::string LastLine(const std::string& text) {
  std::vector<std::string> lines =
      absl::StrSplit(text, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : lines.back();
}

TEST(ProcessSecurity, SaslAgainstAPlaintextListenerExitsAtStartup) {
  const std::string brokers = Brokers();
  ASSERT_FALSE(HasFailure());  // Not set: no broker to test against.
  Timed t = RunProcess(brokers,
                       "-X security.protocol=SASL_PLAINTEXT "
                       "-X sasl.mechanism=PLAIN -X sasl.username=u "
                       "-X sasl.password=p");
  EXPECT_EQ(t.result.exit_code, 1) << t.result.err;
  EXPECT_LT(t.took, kPromptly);
  const std::string line = LastLine(t.result.err);
  EXPECT_THAT(line, HasSubstr("bubblewatch process: the Kafka broker refused "
                              "the connection at startup (_AUTHENTICATION)"));
  EXPECT_THAT(line, HasSubstr("SASL PLAIN mechanism handshake failed"));
  EXPECT_THAT(line, HasSubstr("security.protocol"));
  EXPECT_EQ(t.result.out, "");
}

TEST(ProcessSecurity, TlsAgainstAPlaintextListenerExitsAtStartup) {
  const std::string brokers = Brokers();
  ASSERT_FALSE(HasFailure());  // Not set: no broker to test against.
  Timed t = RunProcess(brokers, "-X security.protocol=SSL");
  EXPECT_EQ(t.result.exit_code, 1) << t.result.err;
  EXPECT_LT(t.took, kPromptly);
  const std::string line = LastLine(t.result.err);
  EXPECT_THAT(line, HasSubstr("refused the connection at startup"));
  // OpenSSL's reading of the dropped handshake (_SSL), or librdkafka's
  // "connecting to a PLAINTEXT broker listener?" (_TRANSPORT).
  EXPECT_THAT(line, AnyOf(HasSubstr("(_SSL)"), HasSubstr("(_TRANSPORT)")));
  EXPECT_THAT(line, HasSubstr("SSL handshake failed"));
}

// A listener that accepts, reads the first request and hangs up, as a TLS
// listener does with a plaintext ApiVersion request.
class DroppingListener {
 public:
  DroppingListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        timeval two_s{.tv_sec = 2, .tv_usec = 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &two_s, sizeof(two_s));
        char buffer[4096];
        (void)!read(c, buffer, sizeof(buffer));
        close(c);
      }
    });
  }
  ~DroppingListener() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);  // Wakes accept().
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(ProcessSecurity, PlaintextAgainstATlsListenerExitsAtStartup) {
  DroppingListener listener;
  ASSERT_NE(listener.port(), 0);
  Timed t = RunProcess("127.0.0.1:" + std::to_string(listener.port()), "");
  EXPECT_EQ(t.result.exit_code, 1) << t.result.err;
  EXPECT_LT(t.took, kPromptly);
  const std::string line = LastLine(t.result.err);
  EXPECT_THAT(line,
              HasSubstr("refused the connection at startup (_TRANSPORT)"));
  EXPECT_THAT(line, HasSubstr("incorrect security.protocol configuration"));
}

// A broker without idempotent producers or consumer groups: the
// real broker, seen through librdkafka told not to ask its API versions and
// to assume an old release instead (broker.version.fallback), so that the
// feature set librdkafka negotiates lacks them. `produce` and `process` log
// that set and exit 1 with one line, before sending or joining anything.
TEST(BrokerFeatures, ProduceRefusesABrokerWithoutIdempotentProducers) {
  const std::string brokers = Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string topic = testing::Unique("it-features");
  CliResult r = RunBubblewatch(
      "produce --brokers " + brokers + " --topic " + topic +
          " --synthetic --jobs 1 --duration 1s --log-level info "
          "-X api.version.request=false -X broker.version.fallback=0.9.0",
      ".", kKillAfterS);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("features (librdkafka "));
  EXPECT_THAT(LastLine(r.err),
              HasSubstr("bubblewatch produce: the Kafka broker at " + brokers +
                        " does not support idempotent producers"));
  EXPECT_THAT(LastLine(r.err), HasSubstr("disabled IdempotentProducer"));
}

TEST(BrokerFeatures, ProcessRefusesABrokerWithoutConsumerGroups) {
  const std::string brokers = Brokers();
  ASSERT_FALSE(HasFailure());
  Timed t = RunProcess(brokers,
                       "-X api.version.request=false "
                       "-X broker.version.fallback=0.8.2 "
                       "-X enable.idempotence=false");
  EXPECT_EQ(t.result.exit_code, 1) << t.result.err;
  EXPECT_LT(t.took, kPromptly);
  EXPECT_THAT(t.result.err, HasSubstr("features (librdkafka "));
  const std::string line = LastLine(t.result.err);
  EXPECT_THAT(line, HasSubstr("bubblewatch process: the Kafka broker at " +
                              brokers + " does not support consumer groups"));
  EXPECT_THAT(line, HasSubstr("disabled BrokerBalancedConsumer"));
  EXPECT_THAT(line, ::testing::Not(HasSubstr("idempotent")));
}

// Against the real broker the same commands log a set with both, and go on.
TEST(BrokerFeatures, ProduceLogsTheRealBrokersFeatures) {
  const std::string brokers = Brokers();
  ASSERT_FALSE(HasFailure());
  CliResult r =
      RunBubblewatch("produce --brokers " + brokers + " --topic " +
                         testing::Unique("it-features") +
                         " --synthetic --jobs 1 --duration 1s --log-level info",
                     ".", kKillAfterS);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::ContainsRegex(
                         "info Kafka broker [0-9.:]+ features \\(librdkafka "
                         "[^)]*\\): [A-Za-z0-9,]*IdempotentProducer"));
}

}  // namespace
}  // namespace bubblewatch
