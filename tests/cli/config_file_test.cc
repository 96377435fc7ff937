// `--config FILE`: the YAML file's shapes and errors
// (cli/config_file.h), and how CommandLine combines it with the command
// line: the command line wins, lists take the file's values first, every
// problem names the file, the line and the key.
#include "cli/config_file.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cli/command_line.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/cli_runner.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const ConfigSchema& Schema() {
  static const ConfigSchema* schema =
      new ConfigSchema{{"store", ConfigKind::kScalar},
                       {"window", ConfigKind::kScalar},
                       {"json", ConfigKind::kSwitch},
                       {"fail-if", ConfigKind::kList},
                       {"property", ConfigKind::kProperties}};
  return *schema;
}

absl::StatusOr<std::vector<ConfigSetting>> Parse(const std::string& yaml) {
  return ParseConfigFile(yaml, "/etc/bw/process.yaml", Schema());
}

std::string Error(const std::string& yaml) {
  absl::StatusOr<std::vector<ConfigSetting>> s = Parse(yaml);
  EXPECT_FALSE(s.ok()) << yaml;
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.status().message()).find('\n'), std::string::npos)
      << "one line: " << s.status().message();
  return std::string(s.status().message());
}

TEST(ConfigFile, EachShapeBecomesItsSettings) {
  absl::StatusOr<std::vector<ConfigSetting>> s = Parse(
      "# a comment\n"
      "store: /var/lib/bw\n"
      "window: 20s\n"
      "json: true\n"
      "fail-if: ['bubble_ratio>+0.05', 'utilization<-0.1']\n"
      "property:\n"
      "  security.protocol: SASL_SSL\n"
      "  sasl.password.file: /run/secrets/kafka\n"
      "  linger.ms: 5\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 5u);
  EXPECT_EQ((*s)[0].key, "store");
  EXPECT_THAT((*s)[0].values, ElementsAre("/var/lib/bw"));
  EXPECT_EQ((*s)[0].line, 2);
  EXPECT_THAT((*s)[1].values, ElementsAre("20s"));
  EXPECT_THAT((*s)[2].values, ElementsAre("true"));
  EXPECT_THAT((*s)[3].values,
              ElementsAre("bubble_ratio>+0.05", "utilization<-0.1"));
  EXPECT_EQ((*s)[4].line, 6);
  EXPECT_THAT(
      (*s)[4].values,
      ElementsAre("security.protocol=SASL_SSL",
                  "sasl.password.file=/run/secrets/kafka", "linger.ms=5"));
}

TEST(ConfigFile, ListsTakeOneScalarAndPropertiesAListOfAssignments) {
  absl::StatusOr<std::vector<ConfigSetting>> s = Parse(
      "fail-if: bubble_ratio>+0.05\njson: false\n"
      "property: [acks=all, 'sasl.oauthbearer.config=a=b c=d']\n"
      "store: ''\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 4u);
  EXPECT_THAT((*s)[0].values, ElementsAre("bubble_ratio>+0.05"));
  EXPECT_TRUE((*s)[1].values.empty());  // false: as if not given.
  EXPECT_THAT((*s)[2].values,
              ElementsAre("acks=all", "sasl.oauthbearer.config=a=b c=d"));
  EXPECT_THAT((*s)[3].values, ElementsAre(""));  // An empty value is one.
}

TEST(ConfigFile, AnEmptyFileSetsNothing) {
  absl::StatusOr<std::vector<ConfigSetting>> s = Parse("# nothing yet\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->empty());
}

TEST(ConfigFile, EveryProblemNamesTheFileTheLineAndTheKey) {
  EXPECT_EQ(Error("store: a\nstor: b\n"),
            "/etc/bw/process.yaml:2: 'stor': unknown key (not an option of "
            "this command; see --help)");
  EXPECT_THAT(Error("store: a\nstore: b\n"),
              HasSubstr("/etc/bw/process.yaml:2: 'store': given twice"));
  EXPECT_THAT(Error("\n\nstore: [a, b]\n"),
              HasSubstr("process.yaml:3: 'store': wrong type: want one value, "
                        "not a list"));
  EXPECT_THAT(Error("window:\n"),
              HasSubstr("process.yaml:1: 'window': wrong type: want one "
                        "value, not nothing"));
  EXPECT_THAT(Error("json: yes\n"),
              HasSubstr("process.yaml:1: 'json': wrong type: want true or "
                        "false"));
  EXPECT_THAT(Error("fail-if: {a: b}\n"),
              HasSubstr("process.yaml:1: 'fail-if': wrong type"));
  EXPECT_THAT(Error("fail-if:\n  - a\n  - [b]\n"),
              HasSubstr("process.yaml:3: 'fail-if': wrong type: a list item"));
  EXPECT_THAT(Error("property:\n  acks: all\n  tls: {a: b}\n"),
              HasSubstr("process.yaml:3: 'property: tls': wrong type"));
  EXPECT_THAT(Error("property:\n  acks: all\n  acks: 1\n"),
              HasSubstr("process.yaml:3: 'property: acks': given twice"));
  EXPECT_THAT(Error("X: {acks: all}\n"),
              HasSubstr("process.yaml:1: 'X': unknown key; -X is --property"));
  EXPECT_THAT(Error("--store: a\n"),
              HasSubstr("process.yaml:1: '--store': write option names "
                        "without dashes"));
  EXPECT_THAT(Error("store: a\nwindow: [10s\n"),
              HasSubstr("/etc/bw/process.yaml:3: not YAML"));
  EXPECT_THAT(Error("- store\n"),
              HasSubstr("process.yaml:1: want a map of option names"));
}

TEST(ConfigFile, ErrorsNeverQuoteAValue) {
  // A property list item without '=' may be a secret pasted on its own.
  const std::string e = Error("property: [acks=all, hunter2-secret]\n");
  EXPECT_THAT(e, HasSubstr("'property': a list item must look like key=value"));
  EXPECT_THAT(e, Not(HasSubstr("hunter2")));
  EXPECT_THAT(Error("property: {sasl.password: [hunter2-secret]}\n"),
              Not(HasSubstr("hunter2")));
}

TEST(ConfigFile, AMissingFileIsNamed) {
  absl::StatusOr<std::vector<ConfigSetting>> s =
      LoadConfigFile("/nonexistent/bw.yaml", Schema());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(),
              HasSubstr("config file '/nonexistent/bw.yaml': cannot read: No "
                        "such file"));
}

TEST(ConfigFile, ChangedKeysAreAddedRemovedOrDifferent) {
  auto a = Parse("store: s\nwindow: 10s\nproperty: {acks: all}\n");
  auto b = Parse("store: s\n\nwindow: 20s\njson: true\n");
  ASSERT_TRUE(a.ok() && b.ok());
  // store moved a line down but kept its value: unchanged.
  EXPECT_THAT(ChangedConfigKeys(*a, *b),
              ElementsAre("window", "json", "property"));
  EXPECT_TRUE(ChangedConfigKeys(*a, *a).empty());
}

// A command line like process's: one-value options, a switch, -X.
struct Flags {
  std::string store;
  absl::Duration window = absl::Seconds(10);
  int cache_mb = 64;
  bool json = false;
  std::vector<std::string> properties;
  std::vector<std::string> fail_if = {"built-in"};
};

class ConfigCommandLine : public ::testing::Test {
 protected:
  ConfigCommandLine() : cl_("bubblewatch test [options]", "test") {
    cl_.AddString("store", &f_.store, "DIR", "store");
    cl_.AddDuration("window", &f_.window, "DURATION", "window");
    cl_.AddInt("store-cache-mb", &f_.cache_mb, "MiB", "cache");
    cl_.AddBool("json", &f_.json, "json");
    cl_.AddList("property", &f_.properties, "KEY=VALUE", "-X");
    cl_.AddAlias('X', "property");
    cl_.AddList("fail-if", &f_.fail_if, "COND", "conditions");
  }

  std::string Config(const std::string& yaml) {
    const std::string path = dir_.Sub("bw.yaml");
    testing::WriteFile(path, yaml);
    return path;
  }

  absl::Status Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "test");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return cl_.Parse(static_cast<int>(argv.size()), argv.data(), &positional_);
  }

  testing::TempDir dir_;
  Flags f_;
  CommandLine cl_;
  std::vector<std::string> positional_;
};

TEST_F(ConfigCommandLine, TheCommandLineWinsOverTheFile) {
  const std::string path = Config(
      "store: /from/file\nwindow: 30s\nstore-cache-mb: 128\n"
      "json: true\n"
      "property: {security.protocol: SASL_SSL, linger.ms: 5}\n"
      "fail-if: [a, b]\n");
  ASSERT_TRUE(Parse({"--store", "/from/cli", "--config", path, "-X",
                     "linger.ms=7", "--fail-if", "c", "FILE"})
                  .ok());
  EXPECT_EQ(f_.store, "/from/cli");
  EXPECT_EQ(f_.window, absl::Seconds(30));
  EXPECT_EQ(f_.cache_mb, 128);
  EXPECT_TRUE(f_.json);
  // The file's assignments first: a key given on both ends with the command
  // line's value (KafkaConfig: the last assignment wins).
  EXPECT_THAT(f_.properties, ElementsAre("security.protocol=SASL_SSL",
                                         "linger.ms=5", "linger.ms=7"));
  // After the built-in default, the file's, then the command line's.
  EXPECT_THAT(f_.fail_if, ElementsAre("built-in", "a", "b", "c"));
  EXPECT_THAT(positional_, ElementsAre("FILE"));
  EXPECT_EQ(cl_.config_path(), path);
  EXPECT_TRUE(cl_.GivenOnCommandLine("store"));
  EXPECT_FALSE(cl_.GivenOnCommandLine("window"));
  EXPECT_EQ(cl_.config_settings().size(), 6u);
}

TEST_F(ConfigCommandLine, KeysTheFileLeavesOutKeepTheirDefaults) {
  ASSERT_TRUE(Parse({"--config=" + Config("json: false\n")}).ok());
  EXPECT_EQ(f_.window, absl::Seconds(10));
  EXPECT_EQ(f_.cache_mb, 64);
  EXPECT_FALSE(f_.json);
  EXPECT_TRUE(f_.properties.empty());
}

TEST_F(ConfigCommandLine, AFileValueThatDoesNotParseNamesItsLine) {
  absl::Status s =
      Parse({"--config", Config("store: s\nwindow: 10 parsecs\n")});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr(dir_.Sub("bw.yaml") + ":2: 'window': '10 parsecs' is "
                                              "not a duration"));
  // The command line's value would have won: the file's is not parsed.
  EXPECT_TRUE(
      Parse({"--window", "5s", "--config", Config("window: 10 parsecs\n")})
          .ok());
}

TEST_F(ConfigCommandLine, ConfigIsOneFileAndHelpReadsNone) {
  const std::string path = Config("store: s\n");
  EXPECT_THAT(Parse({"--config", path, "--config", path}).message(),
              HasSubstr("'--config' given more than once"));
  EXPECT_TRUE(Parse({"--config", dir_.Sub("missing.yaml"), "--help"}).ok());
  EXPECT_TRUE(cl_.help_requested());
  EXPECT_THAT(cl_.Help(), HasSubstr("  --config FILE"));
}

TEST_F(ConfigCommandLine, UnknownKeysAreUsageErrors) {
  absl::Status s = Parse({"--config", Config("store: s\nlast: 1h\n")});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("bw.yaml:2: 'last': unknown key"));
}

TEST_F(ConfigCommandLine, ReadConfigFileSeesTheFileAsItIsNow) {
  const std::string path = Config("store: s\nwindow: 10s\n");
  ASSERT_TRUE(Parse({"--config", path}).ok());
  Config("store: s\nwindow: 20s\n");
  absl::StatusOr<std::vector<ConfigSetting>> now = cl_.ReadConfigFile();
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_THAT(ChangedConfigKeys(cl_.config_settings(), *now),
              ElementsAre("window"));
  EXPECT_EQ(f_.window, absl::Seconds(10));  // Nothing applied.
  Config("store: s\nwindw: 20s\n");
  EXPECT_THAT(cl_.ReadConfigFile().status().message(),
              HasSubstr("bw.yaml:2: 'windw': unknown key"));
}

// The binary: a file's options act as the same flags would; every problem
// is a usage error (exit 2) naming the file, the line and the key, before
// anything starts.
TEST(ConfigBinary, AnalyzeWithAConfigPrintsWhatTheFlagsPrint) {
  testing::TempDir dir;
  const std::string trace =
      std::string(BUBBLEWATCH_TESTDATA_DIR) + "/timeline/seed_sample.json";
  const std::string config = dir.Sub("analyze.yaml");
  // The seed's sample has two bubbles: --top 1 and --top 2 differ.
  testing::WriteFile(config, "json: true\ntop: 1\nwindow: 5ms\n");
  auto analyze = [&](const std::string& args) {
    testing::CliResult r = testing::RunBubblewatch("analyze " + args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    return r.out;
  };
  const std::string top1 = analyze("--json --top 1 --window 5ms " + trace);
  const std::string top2 = analyze("--json --top 2 --window 5ms " + trace);
  ASSERT_NE(top1, top2);
  EXPECT_TRUE(analyze("--config " + config + " " + trace) == top1);
  // The command line's --top wins over the file's.
  EXPECT_TRUE(analyze("--config " + config + " --top 2 " + trace) == top2);
}

TEST(ConfigBinary, ProblemsAreOneUsageErrorNamingFileLineAndKey) {
  testing::TempDir dir;
  const std::string bad = dir.Sub("process.yaml");
  testing::WriteFile(
      bad, "brokers: 127.0.0.1:1\nstore: " + dir.Sub("s") + "\nwindw: 10s\n");
  testing::CliResult r = testing::RunBubblewatch("process --config " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("bubblewatch process: " + bad +
                               ":3: 'windw': unknown key"));
  EXPECT_TRUE(r.out.empty());

  r = testing::RunBubblewatch("query --config " + dir.Sub("none.yaml") +
                              " jobs");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("config file '" + dir.Sub("none.yaml") +
                               "': cannot read"));

  testing::WriteFile(bad, "store: [a, b]\n");
  r = testing::RunBubblewatch("serve --config " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(bad + ":1: 'store': wrong type"));
  // A command without options has no --config.
  EXPECT_EQ(
      testing::RunBubblewatch("alerts --config " + bad + " check x").exit_code,
      2);
}

TEST(ConfigBinary, AMissingSecretFileIsAUsageErrorThatNamesOnlyThePath) {
  testing::TempDir dir;
  const std::string missing = dir.Sub("kafka-password");
  for (const std::string& command :
       {"process --brokers 127.0.0.1:1 --store " + dir.Sub("s"),
        std::string("produce --brokers 127.0.0.1:1 --synthetic --duration 1s"),
        std::string("topics describe --brokers 127.0.0.1:1")}) {
    testing::CliResult r = testing::RunBubblewatch(
        command + " -X sasl.password.file=" + missing, ".", 60);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("sasl.password.file: cannot read the secret "
                                 "file '" +
                                 missing + "'"))
        << command;
  }
  // In a config file too.
  const std::string config = dir.Sub("process.yaml");
  testing::WriteFile(
      config, "brokers: 127.0.0.1:1\nstore: " + dir.Sub("s") +
                  "\nproperty:\n  sasl.password.file: " + missing + "\n");
  testing::CliResult r =
      testing::RunBubblewatch("process --config " + config, ".", 60);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cannot read the secret file '" + missing));
}

}  // namespace
}  // namespace bubblewatch
