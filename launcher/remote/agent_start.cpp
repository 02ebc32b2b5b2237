#include "launcher/remote/agent_start.h"

#include <chrono>
#include <sstream>

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/local/self.h"
#include "launcher/remote/bundle.h"
#include "launcher/remote/shell_quote.h"
#include "launcher/text_bytes.h"

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;

// The start command's first line on stdout: the node has no bundle of this build, or how it
// started the agent (said before exec, so that the head learns it even when the start fails).
constexpr std::string_view kNoBundle = "MUSTER-NO-BUNDLE";
constexpr std::string_view kStartedAs = "MUSTER-START ";
constexpr std::string_view kShipped = "MUSTER-SHIPPED";

// Where bundles are looked for on a node, the first writable one being where muster ships.
constexpr const char* kBundleDirs = "\"$HOME/.cache/muster\" /usr/local/lib/muster /usr/lib/muster";


// How an attempt to start the agent ended.
struct Attempt {
  enum class Outcome { Hello, NoBundle, Failed } outcome = Outcome::Failed;
  StartedAgent agent;
  std::string started_as;  // "bundle DIR" or "installed PATH", as the node said; "" if unknown
  std::string ending;      // how the start command ended, when it ended before its hello
};

// The node's stderr, first lines only.
std::string node_words(const std::string& stderr_text) {
  std::istringstream in(stderr_text);
  std::string line, words;
  int kept = 0;
  while (std::getline(in, line) && kept < 4) {
    if (line.empty()) continue;
    words += (words.empty() ? "" : " / ") + line;
    ++kept;
  }
  return words;
}

// The start command's first line on stdout says what it found: a bundle or an installed
// muster it is about to exec (the agent's frames follow), or nothing to start. Anything
// else is taken for frames, which the frame reader then rejects in its own words.
class StartOutput {
 public:
  enum class Seen { Nothing, Marker, NoBundle, Frames };
  // Takes more of stdout; frames go to `reader`. Returns what the start command said so far.
  Seen take(std::string_view out, bool open, FrameReader& reader, std::string& started_as) {
    if (seen_ == Seen::Frames) {
      reader.feed(out);
      return seen_;
    }
    head_ += out;
    if (head_.empty()) return seen_;  // nothing said yet: a channel that closed silently answered nothing
    const auto newline = head_.find('\n');
    if (newline == std::string::npos) {
      const size_t n = std::min(head_.size(), kMarker.size());
      if (head_.compare(0, n, kMarker, 0, n) == 0 && open) return seen_;  // a marker, unfinished
    } else if (std::string_view line(head_.data(), newline); line == kNoBundle) {
      return seen_ = Seen::NoBundle;
    } else if (line.rfind(kStartedAs, 0) == 0) {
      started_as = line.substr(kStartedAs.size());
      head_.erase(0, newline + 1);
      seen_ = Seen::Marker;
      if (head_.empty()) return seen_;
    }
    seen_ = Seen::Frames;
    reader.feed(head_);
    head_.clear();
    return seen_;
  }

 private:
  static constexpr std::string_view kMarker = "MUSTER-";
  Seen seen_ = Seen::Nothing;
  std::string head_;  // stdout until its first line is known
};

Attempt attempt_start(SshConnection& connection, const std::string& host, Shipping shipping,
                      const std::string& agent_args, std::chrono::milliseconds limit,
                      const std::atomic<bool>& cancelled) {
  Attempt a;
  const auto started = Clock::now();
  a.agent.command = connection.start(agent_start_command(shipping, agent_args));
  const auto deadline = started + limit;
  StartOutput start_output;
  StartOutput::Seen seen = StartOutput::Seen::Nothing;
  for (;;) {
    if (cancelled.load()) throw SshError(SshFailure::Connection, host, "called off");
    std::string out, err;
    const bool open = a.agent.command->read(out, err, std::chrono::milliseconds(100));
    keep_first_words(a.agent.stderr_text, err, kKeptStderr);
    const StartOutput::Seen before = seen;
    seen = start_output.take(out, open, a.agent.reader, a.started_as);
    // The first line is the node's shell answering a command: a remote command's round
    // trip (channel, login shell, the start script), timed without running another.
    if (before == StartOutput::Seen::Nothing && seen != before)
      a.agent.command_rtt_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    if (seen == StartOutput::Seen::NoBundle) {
      a.outcome = Attempt::Outcome::NoBundle;
      return a;
    }
    while (auto frame = a.agent.reader.next()) {
      if (frame->kind == FrameKind::Hello) {
        a.agent.hello = node_hello_from_json(frame->payload);
        a.outcome = Attempt::Outcome::Hello;
        return a;
      }
      if (frame->kind == FrameKind::Fail)
        throw SshError(SshFailure::RemoteCommand, host, "the agent failed: " + frame->payload);
    }
    if (!open) {
      a.ending = describe_ending(a.agent.command->exit_status());
      return a;
    }
    if (Clock::now() > deadline) {
      const double seconds = std::chrono::duration<double>(limit).count();
      // The start command says something at once (its first line, before exec): silence
      // means the node's shell never got to it.
      if (seen == StartOutput::Seen::Nothing && a.agent.stderr_text.empty())
        throw SshError(SshFailure::Timeout, host,
                       fmt::format("the node's shell did not run muster's start command within {} s: "
                                   "a login script (~/.bashrc) that waits or hangs, or a node too loaded "
                                   "to answer; 'ssh {} true' shows which", seconds, host));
      throw SshError(SshFailure::Timeout, host,
                     fmt::format("the agent did not say hello within {:g} s{}", seconds,
                                 a.agent.stderr_text.empty() ? "" : ": " + node_words(a.agent.stderr_text)));
    }
  }
}

// Sends the bundle through the command's stdin; throws SshError with the node's words.
void ship(SshConnection& connection, const std::string& host, BundleArchive& bundle, bool replace) {
  const std::string& archive = bundle.get();
  auto command = connection.start(ship_command(replace));
  std::string out, err, more_err;
  try {
    command->write(archive);
  } catch (const SshError&) {
    // The node stopped reading (no tar, a full disk): its own words below say why.
  }
  command->close_stdin();
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (command->read(out, more_err, std::chrono::milliseconds(200))) {
    if (Clock::now() > deadline)
      throw SshError(SshFailure::Timeout, host, "shipping muster's bundle did not finish within 5 minutes");
    keep_first_words(err, more_err, kKeptStderr);
    more_err.clear();
    if (out.size() > kKeptStderr) out.erase(0, out.size() - kKeptStderr);  // "shipped" comes last
  }
  const auto ending = command->exit_status();
  if (ending && ending->success() && out.find(kShipped) != std::string::npos) return;
  throw SshError(SshFailure::RemoteCommand, host,
                 fmt::format("could not ship muster's bundle to the node ({}): {}; the "
                             "node needs a POSIX shell with tar and gzip (busybox's will do) and a "
                             "writable ~/.cache", describe_ending(ending),
                             err.empty() ? std::string("no message") : node_words(err)));
}

// What to tell the user when the agent did not start, by how it was started.
std::string start_failure(const Attempt& a, Shipping shipping, bool shipped_fresh) {
  const std::string words = node_words(a.agent.stderr_text);
  std::string advice;
  if (a.started_as.rfind("installed ", 0) == 0)
    advice = "install muster's libraries there (or a muster built for that node), or let muster "
             "ship its self-contained bundle (drop --no-ship)";
  else if (shipped_fresh)
    advice = "it was shipped fresh and still does not start: the bundle needs x86-64 Linux (kernel "
             "3.2 or newer) and a home directory that is not mounted noexec";
  else if (shipping == Shipping::Forbidden)
    advice = "the bundle there may be damaged: write it again with 'muster bundle DIR', or let "
             "muster ship a fresh one (drop --no-ship)";
  else
    advice = "the node's shell could not run muster's start command";
  return fmt::format("muster could not start there ({}{}){}; {}", a.ending,
                     a.started_as.empty() ? "" : ", started as " + a.started_as,
                     words.empty() ? "" : ": " + words, advice);
}

}  // namespace

const std::string& BundleArchive::get() {
  std::call_once(once_, [this] {
    try {
      archive_ = bundle_archive(bundle_files());
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  });
  if (!error_.empty()) throw Error(ErrorKind::Runtime, error_);
  return archive_;
}

// Unpacks the archive from stdin into a fresh directory, runs the muster in it once (which
// proves the loader, the libraries and the binary all work on this node), checks that the
// archive's last member says it is this build (its muster is muster-node, whose own build
// id differs: muster's covers it, since muster carries it), then makes it visible under the build id with an atomic symlink. Another
// head shipping at the same time loses the race harmlessly: its copy is the same bytes.
std::string ship_command(bool replace) {
  const std::string id = shell_quote(muster_build_id());
  std::string script =
      "set -e; umask 022; id=" + id + "; c=\"$HOME/.cache/muster\"; t=\"$c/.$id.$$\"; "
      "mkdir -p \"$c\"; rm -rf \"$t\"; mkdir \"$t\"; "
      "tar -xzf - -C \"$t\"; "
      "if ! v=$(\"$t/ld.so\" --library-path \"$t/lib\" \"$t/muster\" --version 2>&1); then "
      "echo \"the shipped bundle does not run on this node: $v\" >&2; rm -rf \"$t\"; exit 4; fi; "
      "read -r b < \"$t/build-id\" || b=; "
      "if [ \"$b\" != \"$id\" ]; then echo \"the shipped bundle says it is another build: $b\" >&2; "
      "rm -rf \"$t\"; exit 4; fi; "
      ": > \"$t/complete\"; ";
  // A bundle that failed to start, or a directory left without its completion mark, makes
  // way; the symlink then points at the fresh copy.
  script += replace ? "if true; then "
                    : "if { [ -e \"$c/$id\" ] || [ -L \"$c/$id\" ]; } && [ ! -f \"$c/$id/complete\" ]; then ";
  script += "mv \"$c/$id\" \"$c/.$id.old.$$\" 2>/dev/null && rm -rf \"$c/.$id.old.$$\" || true; fi; "
            "ln -sn \".$id.$$\" \"$c/$id\" 2>/dev/null || rm -rf \"$t\"; "
            "echo " + std::string(kShipped);
  return "sh -c " + shell_quote(script);
}

std::string agent_start_command(Shipping shipping, const std::string& agent_args) {
  std::string script =
      "id=" + shell_quote(muster_build_id()) + "; for d in " + kBundleDirs + "; do b=\"$d/$id\"; "
      "if [ -f \"$b/complete\" ]; then echo \"" + std::string(kStartedAs) + "bundle $b\"; "
      "export " + kBundleVariable + "=\"$b\"; "
      "exec \"$b/ld.so\" --library-path \"$b/lib\" --argv0 muster \"$b/muster\" " + agent_args + "; fi; done; ";
  if (shipping == Shipping::Forbidden)
    script += "if m=$(command -v muster 2>/dev/null); then echo \"" + std::string(kStartedAs) +
              "installed $m\"; exec \"$m\" " + agent_args + "; fi; ";
  script += "echo " + std::string(kNoBundle) + "; exit 3";
  return "sh -c " + shell_quote(script);
}

StartedAgent start_agent(SshConnection& connection, const std::string& host, Shipping shipping,
                         BundleArchive& bundle, const std::string& agent_args,
                         std::chrono::milliseconds hello_limit, const std::atomic<bool>& cancelled) {
  Attempt a = attempt_start(connection, host, shipping, agent_args, hello_limit, cancelled);
  bool shipped = false;
  if (a.outcome == Attempt::Outcome::NoBundle) {
    if (shipping == Shipping::Forbidden)
      throw SshError(SshFailure::RemoteCommand, host,
                     fmt::format("no muster bundle of this build ({}) in ~/.cache/muster, "
                                 "/usr/local/lib/muster or /usr/lib/muster, and no muster on the "
                                 "node's PATH; write one with 'muster bundle DIR' and copy it "
                                 "there, or let muster ship it (drop --no-ship)", muster_build_id()));
    ship(connection, host, bundle, false);
    shipped = true;
    a = attempt_start(connection, host, shipping, agent_args, hello_limit, cancelled);
  }
  // A bundle in the cache that does not start is damaged (a disk error, a half-copied file):
  // it is replaced once with a fresh one.
  if (a.outcome == Attempt::Outcome::Failed && shipping == Shipping::Allowed && !shipped &&
      a.started_as.find("/.cache/muster/") != std::string::npos) {
    ship(connection, host, bundle, true);
    shipped = true;
    a = attempt_start(connection, host, shipping, agent_args, hello_limit, cancelled);
  }
  if (a.outcome != Attempt::Outcome::Hello)
    throw SshError(SshFailure::RemoteCommand, host,
                   a.outcome == Attempt::Outcome::NoBundle
                       ? std::string("the shipped bundle could not be found right after shipping it")
                       : start_failure(a, shipping, shipped));
  a.agent.shipped = shipped;
  return std::move(a.agent);
}

}  // namespace muster
