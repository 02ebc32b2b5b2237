#include "launcher/remote/muster_shipping.h"

#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "probes/digest.h"
#include "launcher/remote/shell_quote.h"

namespace muster {
namespace {

// This binary and its checksum, read once per process.
struct ThisBinary {
  std::string content;
  std::string sha256;
};

const ThisBinary& this_binary() {
  static const ThisBinary binary = [] {
    std::ifstream in("/proc/self/exe", std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    ThisBinary b{s.str(), ""};
    b.sha256 = sha256_hex(b.content);
    return b;
  }();
  return binary;
}

// Prints "path P", "cache P SHA" or "missing HOME". Fixed text: only the version, a
// constant of this build, is substituted, and it is quoted.
std::string probe_script() {
  const std::string version = shell_quote("muster " MUSTER_VERSION);
  const std::string dir = shell_quote(MUSTER_VERSION);
  return "v=" + version + "; c=\"$HOME/.cache/muster/\"" + dir + "/muster; "
         "p=$(command -v muster 2>/dev/null); "
         "if [ -n \"$p\" ] && [ \"$(\"$p\" --version 2>/dev/null)\" = \"$v\" ]; then "
         "echo \"path $p\"; exit 0; fi; "
         "if [ -x \"$c\" ] && [ \"$(\"$c\" --version 2>/dev/null)\" = \"$v\" ]; then "
         "echo \"cache $c $(sha256sum \"$c\" | cut -d' ' -f1)\"; exit 0; fi; "
         "echo \"missing $HOME\"";
}

}  // namespace

std::string ensure_muster_on_node(SshConnection& connection, const std::string& host,
                                  Shipping shipping) {
  std::istringstream probe(run_remote(connection, host, "sh -c " + shell_quote(probe_script())));
  std::string what, path, sha;
  probe >> what >> path >> sha;
  if (what == "path") return path;
  // A cached copy of another build of the same version would speak another protocol in
  // development; the checksum tells them apart.
  if (what == "cache" && (sha == this_binary().sha256 || shipping == Shipping::Forbidden))
    return path;
  if (shipping == Shipping::Forbidden)
    throw SshError(SshFailure::RemoteCommand, host,
                   fmt::format("no muster {} on the node's PATH or in ~/.cache/muster/{}/; install "
                               "it there, or let muster copy itself (drop --no-ship)",
                               MUSTER_VERSION, MUSTER_VERSION));
  const std::string home = what == "missing" ? path : path.substr(0, path.rfind("/.cache/"));
  const std::string dir = home + "/.cache/muster/" MUSTER_VERSION;
  std::random_device random;
  const std::string upload = fmt::format("{}/muster.upload.{:08x}", dir, random());
  run_remote(connection, host, "mkdir -p " + shell_quote(dir));
  connection.upload(this_binary().content, upload);
  std::string remote_sha = run_remote(connection, host, "sha256sum " + shell_quote(upload));
  if (remote_sha.substr(0, 64) != this_binary().sha256) {
    run_remote(connection, host, "rm -f " + shell_quote(upload));
    throw SshError(SshFailure::RemoteCommand, host,
                   "the copied muster binary arrived corrupted (checksum mismatch)");
  }
  // rename(2) is atomic: nodes sharing a home directory never see a half-written binary.
  run_remote(connection, host, "mv -f " + shell_quote(upload) + " " + shell_quote(dir + "/muster"));
  return dir + "/muster";
}

}  // namespace muster
