// muster exec: a command once per node, like pdsh; --fold groups identical outputs like clush -b.
#include <map>
#include <memory>
#include <mutex>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cluster_input.h"
#include "cli/flag_checks.h"
#include "cli/commands.h"
#include "cli/remote_options.h"
#include "cli/terminal_output.h"
#include "launcher/cluster/cluster_input.h"
#include "launcher/cluster/hostlist.h"
#include "launcher/cluster/hostfile.h"
#include "launcher/error.h"
#include "launcher/job/exec_here.h"
#include "launcher/remote/remote_exec.h"
#include "launcher/remote/slurm_exec.h"

namespace muster::cli {

// How exec marks each line with its node: "[host] " (muster's own, as run's), "host: " (pdsh's,
// which dshbak and existing scripts read), or nothing (pdsh -N).
enum class ExecTag { Host, Pdsh, None };

struct ExecOptions {
  ClusterInput cluster;
  RemoteFlags remote;
  std::vector<std::string> command;
  bool fold = false;
  bool no_prefix = false;
  ExecTag tag = ExecTag::Host;
};

namespace {

// clush -b: one block per distinct output, under the folded list of the hosts that gave it.
void print_folded(const std::vector<NodeExecResult>& results) {
  std::map<std::string, std::vector<std::string>> hosts_by_output;
  for (const auto& r : results)
    if (!r.failure)
      hosts_by_output[r.out + r.err + (r.cut ? fmt::format("\n[output cut at {} MiB]\n", kMaxKeptOutput >> 20) : "")]
          .push_back(r.host);
  for (const auto& [text, hosts] : hosts_by_output) {
    std::string title = fmt::format("{} ({})", fold_hostlist(hosts), hosts.size());
    std::string rule(std::max<size_t>(15, title.size()), '-');
    print_out(fmt::format("{}\n{}\n{}\n{}{}", rule, title, rule, text,
                          text.empty() || text.back() == '\n' ? "" : "\n"));
  }
}

int run_exec(const ExecOptions& options) {
  if (options.command.empty() || options.command.front().empty())
    throw Error(ErrorKind::Usage, fmt::format("{}, as in 'muster exec -f cluster.yaml -- uname -r'",
                                              options.command.empty() ? "no command to run: put it after '--'"
                                                                      : "the command to run is an empty word: name a program"));
  ClusterSpec cluster = load_cluster(options.cluster);
  const ExecTag tag = options.no_prefix ? ExecTag::None : options.tag;
  std::mutex print_lock;  // lines arrive from several node threads
  ExecLineSink sink = [&](const std::string& host, OutputStream stream, std::string_view line) {
    // No host: srun's own words, as srun prints them.
    std::string text = host.empty() || tag == ExecTag::None ? fmt::format("{}\n", line)
                       : tag == ExecTag::Pdsh             ? fmt::format("{}: {}\n", host, line)
                                                          : fmt::format("[{}] {}\n", host, line);
    std::lock_guard lock(print_lock);
    if (stream == OutputStream::Stdout) print_out(text);
    else print_note_raw(text);
  };
  if (cluster.launcher == Launcher::Slurm) {
    SrunExec step = exec_through_srun(cluster, options.command, Environment::current(),
                                      options.fold ? ExecLineSink() : sink);
    if (options.fold) print_folded(step.nodes);
    print_note_raw(step.srun_said);
    return step.exit_status;
  }
  // This machine alone: the command runs here, as run's ranks do, with no SSH.
  if (only_this_machine(cluster)) {
    auto results = exec_here(cluster, options.command, options.fold ? ExecLineSink() : sink);
    if (options.fold) print_folded(results);
    return exec_exit_status(results);
  }
  auto transport = make_libssh_transport();
  auto results = exec_on_nodes(*transport, cluster, options.command, options.remote.fanout,
                               options.fold ? ExecLineSink() : sink);
  if (options.fold) print_folded(results);
  for (const auto& r : results)
    if (r.failure) print_error(*r.failure);
  return exec_exit_status(results);
}

}  // namespace

CommandAction setup_exec(CLI::App& app) {
  auto options = std::make_shared<ExecOptions>();
  add_cluster_input_options(app, options->cluster, RankFlags::Omitted);
  options->cluster.use = ClusterUse::Command;  // a machine listed twice runs the command twice
  add_remote_flags(app, options->remote, RemoteUse::Command);
  auto* fold = app.add_flag("--fold", options->fold,
                            "print each distinct output once, under the hosts that gave it (clush -b)");
  auto* no_prefix = app.add_flag("-N,--no-prefix", options->no_prefix,
                                 "print lines without the '[host] ' prefix (pdsh -N)");
  static const std::map<std::string, ExecTag> kTags = {{"host", ExecTag::Host},
                                                       {"pdsh", ExecTag::Pdsh},
                                                       {"none", ExecTag::None}};
  add_choice(app, "--tag", options->tag, kTags,
             "prefix of each output line: host, '[host] '; pdsh, 'host: ' as pdsh prints it, for "
             "dshbak and scripts written for pdsh; none, like -N", "host")
      ->excludes(no_prefix);
  fold->excludes(no_prefix);
  app.add_option("command", options->command, "the command, after --; its words arrive verbatim");
  app.footer("Without -f, -H or --hostfile: this machine, without SSH.\n"
             "Exit status: the largest of the nodes' (255 for a node that could not be reached, "
             "128+N for a command killed by signal N); 127 when the command is not found here, "
             "126 when it is not executable; 2 for usage or configuration errors.");
  return [options]() { return run_exec(*options); };
}

}  // namespace muster::cli
