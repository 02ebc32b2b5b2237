#include "tests/support/chromium.h"

#include <unistd.h>

#include <vector>

namespace muster::testing {
namespace {

CommandResult run_chromium(const std::vector<std::string>& args) {
  TempDir profile;
  std::vector<std::string> argv = {"/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
                                   "--disable-quic", "--no-first-run", "--disable-background-networking",
                                   "--disable-component-update", "--disable-sync",
                                   "--user-data-dir=" + profile.path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, {}, std::chrono::seconds(120));
}

}  // namespace

std::string chromium_unavailable() {
  if (access("/usr/bin/chromium", X_OK) != 0) return "needs Debian's chromium (apt-get install chromium)";
  return "";
}

CommandResult chromium_dom(const std::string& page) { return run_chromium({"--dump-dom", "file://" + page}); }

size_t occurrences(const std::string& dom, const std::string& what) {
  size_t n = 0;
  for (size_t at = dom.find(what); !what.empty() && at != std::string::npos; at = dom.find(what, at + 1)) ++n;
  return n;
}

CommandResult chromium_screenshot(const std::string& page, const std::string& png, int width, int height) {
  return run_chromium({"--hide-scrollbars", "--window-size=" + std::to_string(width) + "," + std::to_string(height),
                       "--screenshot=" + png, "file://" + page});
}

}  // namespace muster::testing
