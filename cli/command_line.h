// CommandLine: declarative options for one subcommand, with GNU-style
// parsing (--name=value, --name value, --flag, -X key=value), generated
// --help text, and typed values parsed by Abseil's flag marshalling
// (absl::ParseFlag: integers, doubles, durations like "10s").
//
// An option that takes one value may be given once: a second occurrence is a
// usage error naming the flag, never a silent override (`query fleet --store
// A --store B` must not quietly read only B). Only AddList options repeat;
// a repeated boolean flag is harmless and accepted.
//
// `--config FILE` (every command with options has it): the options read
// from a YAML file (cli/config_file.h; docs/config.md). A one-value option
// given on the command line wins over the file's; a repeatable option takes
// the file's values first, then the command line's (for -X, where the last
// assignment of a key wins, the command line's value of a key wins). A
// problem with the file is a usage error naming the file, the line and the
// key.
//
// Why not absl/flags directly: its flags are process-global, so every
// subcommand's --help would list every other subcommand's flags, and a usage
// error exits with status 1 where bubblewatch promises 2.
#ifndef BUBBLEWATCH_CLI_COMMAND_LINE_H_
#define BUBBLEWATCH_CLI_COMMAND_LINE_H_

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cli/config_file.h"

namespace bubblewatch {

class CommandLine {
 public:
  // `usage` is the synopsis line, e.g. "bubblewatch analyze [options] FILE".
  // `description` is a paragraph shown under it in --help.
  CommandLine(std::string usage, std::string description);

  // Each Add* binds an option to `target`, which keeps its value as the
  // default when the option is absent; targets must outlive Parse().
  void AddString(std::string name, std::string* target, std::string value_name,
                 std::string help);
  void AddInt(std::string name, int* target, std::string value_name,
              std::string help);
  void AddInt64(std::string name, int64_t* target, std::string value_name,
                std::string help);
  void AddDuration(std::string name, absl::Duration* target,
                   std::string value_name, std::string help);
  void AddBool(std::string name, bool* target, std::string help);
  // The one repeatable kind of option; each occurrence appends its value.
  void AddList(std::string name, std::vector<std::string>* target,
               std::string value_name, std::string help);
  // `short_name` (a single letter, used as "-X value") for option `name`.
  void AddAlias(char short_name, std::string name);

  // Parses argv[1..argc) (argv[0] is the subcommand). Non-option arguments
  // go to `positional`; "--" ends options. Returns kInvalidArgument with a
  // one-line reason for unknown options, missing or malformed values, and a
  // single-valued option given more than once; then applies --config's file
  // (unless --help was asked for), whose problems are one line too:
  // "FILE:LINE: 'key': reason".
  // Sets help_requested() for -h/--help instead of failing.
  absl::Status Parse(int argc, char** argv,
                     std::vector<std::string>* positional);

  // Parse() plus the handling every subcommand shares: a usage error is
  // printed to stderr as "bubblewatch NAME: reason" with a --help hint and
  // gives kExitUsage; -h/--help prints Help() to stdout and gives kExitOk.
  // Returns nullopt when the command should go on.
  std::optional<int> ParseOrExit(int argc, char** argv,
                                 std::vector<std::string>* positional);

  bool help_requested() const { return help_requested_; }

  // --config's file ("" without one) and what it set when Parse read it.
  const std::string& config_path() const { return config_path_; }
  const std::vector<ConfigSetting>& config_settings() const {
    return config_settings_;
  }
  // Whether option `name` (long name) was given on the command line, where
  // it wins over the config file.
  bool GivenOnCommandLine(absl::string_view name) const {
    return given_on_command_line_.contains(name);
  }
  // Reads config_path() again, with the same checks as Parse (e.g. for a
  // SIGHUP reload); applies nothing. Values are not parsed.
  absl::StatusOr<std::vector<ConfigSetting>> ReadConfigFile() const;
  // The --help page: usage, description, then one entry per option. Every
  // entry starts at column 2 (`--name VALUE` or `-X, --name VALUE`, the
  // built-in `-h, --help` last); its help text starts at column
  // kHelpColumn, at least two spaces after the left side (else on the next
  // line), and is wrapped to kHelpWidth columns, each continuation line
  // indented to kHelpColumn. Line breaks inside an option's help text are
  // reflowed.
  std::string Help() const;

  static constexpr int kHelpColumn = 28;
  static constexpr int kHelpWidth = 100;

 private:
  struct Option {
    std::string name;
    std::string value_name;  // Empty for boolean flags.
    std::string help;
    std::string default_text;
    std::function<absl::Status(absl::string_view)> set;
    bool repeatable = false;  // AddList (and boolean flags: no value).
    ConfigKind kind = ConfigKind::kScalar;
    std::vector<std::string>* list = nullptr;  // AddList's target.
  };
  const Option* Find(absl::string_view name) const;
  void Add(Option option);
  ConfigSchema Schema() const;
  // Applies config_settings_ below what the command line gave;
  // `list_sizes`: each list target's size before the command line's values.
  absl::Status ApplyConfig(
      const std::vector<std::pair<const Option*, size_t>>& list_sizes);

  std::string usage_;
  std::string description_;
  std::vector<Option> options_;
  std::vector<std::pair<char, std::string>> aliases_;
  bool help_requested_ = false;
  std::string config_path_;
  std::vector<ConfigSetting> config_settings_;
  absl::flat_hash_set<std::string> given_on_command_line_;
};

// A library's options error (Validate(): "invalid AnalyzerOptions:
// window_ns must be ...") in the terms of the command the user typed: each
// field of `flags` becomes its flag ("--window must be ..."), and
// "invalid <Struct>" becomes "invalid options". Fields without a flag stay
// as they are.
std::string InFlagTerms(
    absl::string_view message,
    std::initializer_list<std::pair<absl::string_view, absl::string_view>>
        flags);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_COMMAND_LINE_H_
