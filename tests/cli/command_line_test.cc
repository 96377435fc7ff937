// CommandLine (cli/command_line.h): a single-valued option given twice is a
// usage error, lists repeat; the --help layout. Then the same promises at
// the level of the `bubblewatch` binary, for every subcommand it lists.
#include "cli/command_line.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/cli_runner.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::RunBubblewatch;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

// Parses `args` (argv[0] is the subcommand, added here).
absl::Status ParseArgs(CommandLine& cl, std::vector<std::string> args,
                       std::vector<std::string>* positional) {
  args.insert(args.begin(), "cmd");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return cl.Parse(static_cast<int>(argv.size()), argv.data(), positional);
}

struct Flags {
  std::string store = "default";
  int top = 20;
  absl::Duration window = absl::Seconds(10);
  bool json = false;
  std::vector<std::string> properties;
};

CommandLine MakeCommandLine(Flags& f) {
  CommandLine cl("bubblewatch cmd [options]", "A command.");
  cl.AddString("store", &f.store, "DIR", "the store");
  cl.AddInt("top", &f.top, "N", "how many");
  cl.AddDuration("window", &f.window, "DURATION", "window length");
  cl.AddBool("json", &f.json, "print JSON");
  cl.AddList("property", &f.properties, "KEY=VALUE", "a property");
  cl.AddAlias('X', "property");
  cl.AddAlias('s', "store");
  return cl;
}

TEST(CommandLine, SingleValuedOptionsTakeTheirValue) {
  Flags f;
  CommandLine cl = MakeCommandLine(f);
  std::vector<std::string> positional;
  ASSERT_TRUE(
      ParseArgs(cl,
                {"--store", "A", "--top=5", "--window", "1m", "file", "--json"},
                &positional)
          .ok());
  EXPECT_EQ(f.store, "A");
  EXPECT_EQ(f.top, 5);
  EXPECT_EQ(f.window, absl::Minutes(1));
  EXPECT_TRUE(f.json);
  EXPECT_THAT(positional, ElementsAre("file"));
}

TEST(CommandLine, RepeatedSingleValuedOptionIsAnErrorNamingTheFlag) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--store", "A", "--store", "B"},
           {"--store=A", "--store=B"},
           {"--store", "A", "--store", "A"},  // Even with the same value.
           {"-s", "A", "--store", "B"},
           {"--top", "1", "--top", "2"},
           {"--window", "1s", "--window=2s"}}) {
    Flags f;
    CommandLine cl = MakeCommandLine(f);
    std::vector<std::string> positional;
    absl::Status s = ParseArgs(cl, args, &positional);
    const std::string name = args[0] == "-s"                         ? "store"
                             : absl::StartsWith(args[0], "--top")    ? "top"
                             : absl::StartsWith(args[0], "--window") ? "window"
                                                                     : "store";
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << args[0] << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("given more than once"));
    EXPECT_THAT(s.message(), HasSubstr("--" + name + " takes one value"));
  }
}

TEST(CommandLine, RepeatedAliasAndLongFormAreBothNamed) {
  Flags f;
  CommandLine cl = MakeCommandLine(f);
  std::vector<std::string> positional;
  absl::Status s = ParseArgs(cl, {"-sA", "--store", "B"}, &positional);
  EXPECT_THAT(s.message(), HasSubstr("'-s' and '--store'"));
}

TEST(CommandLine, ListsAndBooleanFlagsRepeat) {
  Flags f;
  CommandLine cl = MakeCommandLine(f);
  std::vector<std::string> positional;
  ASSERT_TRUE(
      ParseArgs(cl,
                {"-X", "a=1", "--property", "b=2", "-Xc=3", "--json", "--json"},
                &positional)
          .ok());
  EXPECT_THAT(f.properties, ElementsAre("a=1", "b=2", "c=3"));
  EXPECT_TRUE(f.json);
  EXPECT_THAT(positional, IsEmpty());
}

// The lines of the options block of a --help page ("options:" to the end).
std::vector<std::string> OptionLines(const std::string& help) {
  std::vector<std::string> lines = absl::StrSplit(help, '\n');
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  auto start = std::find(lines.begin(), lines.end(), "options:");
  if (start == lines.end()) return {};
  return std::vector<std::string>(start + 1, lines.end());
}

// Checks the layout Help() promises: every entry starts at column 2 with
// '-', its help text (if on the same line) at kHelpColumn; every other line
// is a continuation indented exactly to kHelpColumn; no line is wider than
// kHelpWidth; "-h, --help" is the last entry and laid out like the others.
// Returns one message per problem.
std::vector<std::string> LayoutProblems(const std::string& page,
                                        const std::string& help) {
  constexpr size_t kColumn = CommandLine::kHelpColumn;
  std::vector<std::string> problems;
  std::vector<std::string> lines = OptionLines(help);
  if (lines.empty()) return problems;
  bool entry_wants_text = false;  // The last entry's text is still to come.
  for (const std::string& line : lines) {
    auto problem = [&](absl::string_view what) {
      problems.push_back(absl::StrCat(page, ": ", what, ": '", line, "'"));
    };
    if (line.size() > CommandLine::kHelpWidth) problem("wider than the page");
    if (line.empty() || line[0] != ' ') {
      problem("starts at column 0");
      continue;
    }
    if (line.rfind(' ') == line.size() - 1) problem("trailing space");
    const size_t first = line.find_first_not_of(' ');
    if (first == 2) {
      if (line[2] != '-') problem("entry does not start with '-'");
      if (entry_wants_text) problem("previous entry has no help text");
      // "  --name VALUE" then spaces then the text at kColumn, or the
      // left side alone (too wide), its text on the next line.
      const size_t gap = line.find("  ", 2);
      if (gap == std::string::npos) {
        entry_wants_text = true;
      } else {
        entry_wants_text = false;
        if (line.find_first_not_of(' ', gap) != kColumn) {
          problem("help text not at the help column");
        }
      }
    } else if (first == kColumn) {
      entry_wants_text = false;
    } else {
      problem("neither an entry (column 2) nor a continuation (help column)");
    }
  }
  if (lines.back().find("show this help") == std::string::npos) {
    problems.push_back(page + ": -h, --help is not the last entry");
  }
  const std::string help_line =
      "  -h, --help" + std::string(kColumn - 12, ' ') + "show this help";
  if (std::find(lines.begin(), lines.end(), help_line) == lines.end()) {
    problems.push_back(page + ": no '" + help_line + "' line");
  }
  return problems;
}

TEST(CommandLine, HelpWrapsLongTextIndentedAndReflowsLineBreaks) {
  std::string a, b;
  CommandLine cl("bubblewatch cmd", "A command.");
  cl.AddString("short", &a, "X",
               "a long help text that goes on and on, " + std::string(60, 'w') +
                   " and has a\nline break inside");
  cl.AddString("a-very-long-option-name", &b, "VALUE", "text");
  const std::string help = cl.Help();
  EXPECT_THAT(LayoutProblems("cmd", help), IsEmpty()) << help;
  EXPECT_THAT(help, Not(HasSubstr("a\nline")));
  EXPECT_THAT(help,
              HasSubstr("  --a-very-long-option-name VALUE\n" +
                        std::string(CommandLine::kHelpColumn, ' ') + "text\n"));
}

TEST(CommandLine, LayoutCheckFindsTheOldHelpLayout) {
  // The layout before the fix: a help text's own line break at column 0,
  // and "-h, --help" two columns right of the others.
  const std::string old_help =
      "options:\n"
      "  --store-no-sync           no fsync: a crash can\n"
      "lose the last commits\n"
      "  -h, --help                  show this help\n";
  EXPECT_THAT(LayoutProblems("old", old_help), SizeIs(3));
}

// The subcommands `bubblewatch --help` lists.
std::vector<std::string> Subcommands() {
  std::vector<std::string> names;
  bool in_commands = false;
  for (absl::string_view line :
       absl::StrSplit(RunBubblewatch("--help").out, '\n')) {
    if (line == "commands:") {
      in_commands = true;
      continue;
    }
    if (!in_commands) continue;
    if (line.empty()) break;
    std::vector<std::string> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    names.push_back(words.front());
  }
  return names;
}

TEST(CliHelp, EverySubcommandsOptionsAreLaidOutAlike) {
  const std::vector<std::string> commands = Subcommands();
  ASSERT_GE(commands.size(), 8u);
  for (const std::string& command : commands) {
    auto r = RunBubblewatch(command + " --help");
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_THAT(r.out, HasSubstr("usage: bubblewatch " + command)) << command;
    EXPECT_THAT(LayoutProblems(command, r.out), IsEmpty()) << r.out;
  }
}

TEST(CliFlags, RepeatedSingleValuedFlagIsAUsageErrorInEveryCommand) {
  struct Case {
    const char* args;
    const char* flag;
  };
  // Checked before any store, server or broker is touched.
  for (const Case& c : {
           Case{"query fleet --store A --store B", "--store"},
           Case{"query fleet --server http://a:1 --server http://b:1",
                "--server"},
           Case{"serve --store A --store B", "--store"},
           Case{"serve --store A --listen 127.0.0.1:1 --listen 127.0.0.1:2",
                "--listen"},
           Case{"process --brokers a:1 --brokers b:1 --store S", "--brokers"},
           Case{"produce --brokers a:1 --job j --job k f.json", "--job"},
           Case{"analyze --top 1 --top 2 f.json", "--top"},
           Case{"diff --format chrome --format nsys a b", "--format"},
           Case{"demo --jobs 1 --jobs 2", "--jobs"},
       }) {
    auto r = RunBubblewatch(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err,
                HasSubstr(std::string("'") + c.flag + "' given more than once"))
        << c.args;
    EXPECT_THAT(r.out, IsEmpty()) << c.args;
  }
}

}  // namespace
}  // namespace bubblewatch
