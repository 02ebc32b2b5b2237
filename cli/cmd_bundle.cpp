// muster bundle DIR: the self-contained bundle muster ships to nodes, written to a directory
// so that it can be installed where shipping is not wanted.
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/terminal_output.h"
#include "launcher/local/self.h"
#include "launcher/remote/bundle.h"

namespace muster::cli {

CommandAction setup_bundle(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  app.add_option("dir", *dir, "where to write it (it goes in a directory named by the build id)")
      ->required();
  app.footer("Nodes look for the bundle in ~/.cache/muster/, /usr/local/lib/muster/ and "
             "/usr/lib/muster/.\nExample: muster bundle /usr/local/lib/muster   (then copy that "
             "directory to every node, or share it)");
  return [dir]() {
    const std::string written = write_bundle(*dir);
    print_out(fmt::format("{}\n", written));
    print_note(fmt::format("wrote the bundle of build {}; nodes that have it in ~/.cache/muster/, "
                           "/usr/local/lib/muster/ or /usr/lib/muster/ start muster from it "
                           "(--no-ship needs no copy then)", muster_build_id()));
    return 0;
  };
}

}  // namespace muster::cli
