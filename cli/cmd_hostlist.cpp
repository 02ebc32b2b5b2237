// muster hostlist: host lists as ClusterShell's nodeset sees them (-e, --fold, -c).
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/terminal_output.h"
#include "launcher/cluster/hostlist.h"

namespace muster::cli {

struct HostlistOptions {
  std::vector<std::string> lists;
  bool expand = false;  // the default; accepted as nodeset users type it
  bool fold = false;
  bool count = false;
};

CommandAction setup_hostlist(CLI::App& app) {
  auto options = std::make_shared<HostlistOptions>();
  app.add_option("lists", options->lists, "host lists, e.g. 'gpu[01-16]' 'r[1-2]n[001-004]'")
      ->required();
  auto* expand = app.add_flag("-e,--expand", options->expand,
                              "print the names one per word (nodeset -e; the default)");
  // No -f: in muster -f is the cluster file, whichever the command.
  auto* fold = app.add_flag("--fold", options->fold, "print the folded form (nodeset -f)");
  auto* count = app.add_flag("-c,--count", options->count, "print how many hosts (nodeset -c)");
  expand->excludes(fold, count);
  fold->excludes(count);
  app.footer("Without --fold or -c, prints the names one per word, as nodeset -e does.");
  return [options]() {
    std::vector<std::string> names;
    HostBudget budget;  // the limit holds for all the arguments together
    for (const auto& list : options->lists)
      for (auto& name : expand_hostlist(list, &budget)) names.push_back(std::move(name));
    if (options->fold) {
      print_out(fold_hostlist(names) + "\n");
    } else {
      auto sorted = sort_hostlist(names);
      if (options->count)
        print_out(fmt::format("{}\n", sorted.size()));
      else
        print_out(fmt::format("{}\n", fmt::join(sorted, " ")));
    }
    return 0;
  };
}

}  // namespace muster::cli
