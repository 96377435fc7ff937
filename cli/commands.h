// The subcommands of the `bubblewatch` executable. Each takes the arguments
// after the subcommand name (argv[0] is the subcommand) and returns the
// process exit code (cli/exit_codes.h).
#ifndef BUBBLEWATCH_CLI_COMMANDS_H_
#define BUBBLEWATCH_CLI_COMMANDS_H_

namespace bubblewatch {

// `bubblewatch analyze [options] FILE`: one trace file in, a report out.
int RunAnalyzeCommand(int argc, char** argv);

// `bubblewatch diff [options] BEFORE AFTER`: two traces compared; with
// --fail-if conditions, a CI gate (exit 1 on a regression).
int RunDiffCommand(int argc, char** argv);

// `bubblewatch produce --brokers B --job J FILE...` or `... --synthetic`:
// sends traces to Kafka as EventBatch messages.
int RunProduceCommand(int argc, char** argv);

// `bubblewatch process --brokers B --store DIR`: the windowed consumer.
int RunProcessCommand(int argc, char** argv);

// `bubblewatch demo`: produce -> process -> store on the embedded cluster.
int RunDemoCommand(int argc, char** argv);

// `bubblewatch query job|fleet|jobs (--store DIR | --server URL)`: a job's
// last hour, the fleet's worst jobs, the job list.
int RunQueryCommand(int argc, char** argv);

// `bubblewatch serve --store DIR`: the HTTP API, /metrics and the dashboard.
int RunServeCommand(int argc, char** argv);

// `bubblewatch alerts check RULES...`: validates on-call rules files.
int RunAlertsCommand(int argc, char** argv);

// `bubblewatch topics create|describe --brokers B`: the fleet's Kafka
// topics (processor/fleet_topics.h).
int RunTopicsCommand(int argc, char** argv);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_COMMANDS_H_
