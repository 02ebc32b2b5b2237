// Fan-out and exec logic against a recording fake transport.
#include "launcher/remote/remote_exec.h"

#include <csignal>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "launcher/cluster/hostfile.h"
#include "launcher/local/exit_status.h"
#include "launcher/remote/shell_quote.h"
#include "tests/fakes/fake_ssh_transport.h"

namespace muster {
namespace {

using testing::FakeHost;
using testing::FakeSshTransport;

ClusterSpec cluster_of(int n, FakeSshTransport& transport, FakeHost host = {}) {
  ClusterSpec spec = parse_host_option(fmt::format("n[1-{}]", n));
  for (const auto& node : spec.nodes) transport.hosts[node.address] = host;
  return spec;
}

TEST(RemoteExec, NeverMoreHandshakesAtOnceThanTheWindow) {
  FakeSshTransport transport;
  ClusterSpec cluster = cluster_of(20, transport, {std::chrono::milliseconds(10)});
  auto results = exec_on_nodes(transport, cluster, {"true"}, 3, {});
  EXPECT_EQ(results.size(), 20u);
  EXPECT_EQ(transport.most_at_once, 3);
  EXPECT_EQ(transport.commands.size(), 20u);
}

TEST(RemoteExec, ASlowNodeHoldsOnlyItsOwnSlot) {
  FakeSshTransport transport;
  ClusterSpec cluster = cluster_of(6, transport, {std::chrono::milliseconds(1)});
  transport.hosts["n1"].handshake = std::chrono::milliseconds(2000);  // room for a busy machine
  exec_on_nodes(transport, cluster, {"true"}, 2, {});
  // n1 started first yet finished last: the other five went through the second slot.
  ASSERT_EQ(transport.finished_connects.size(), 6u);
  EXPECT_EQ(transport.finished_connects.back(), "n1");
}

TEST(RemoteExec, EveryWordIsQuotedOnItsOwn) {
  FakeSshTransport transport;
  ClusterSpec cluster = cluster_of(1, transport);
  exec_on_nodes(transport, cluster, {"echo", "a b", "$(x)", "it's"}, 8, {});
  ASSERT_EQ(transport.commands.size(), 1u);
  EXPECT_EQ(transport.commands[0], "n1: 'echo' 'a b' '$(x)' 'it'\\''s'");
}

TEST(RemoteExec, FailuresAreKeptPerNodeAndTheStatusIsTheLargest) {
  FakeSshTransport transport;
  ClusterSpec cluster = cluster_of(3, transport, {{}, std::nullopt, "hi\n", 0});
  transport.hosts["n2"].exit_status = 7;
  transport.hosts["n3"].refuse = SshFailure::Authentication;
  std::vector<std::string> lines;
  std::mutex lock;
  auto results = exec_on_nodes(transport, cluster, {"x"}, 8,
                               [&](const std::string& host, OutputStream, std::string_view line) {
                                 std::lock_guard g(lock);
                                 lines.push_back(host + " " + std::string(line));
                               });
  EXPECT_EQ(results[1].status, 7);
  ASSERT_TRUE(results[2].failure.has_value());
  EXPECT_EQ(*results[2].failure, "n3: authentication: scripted failure");
  EXPECT_EQ(exec_exit_status(results), 255);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"n1 hi", "n2 hi"}));
  results[2].failure.reset();
  results[2].status = 0;
  EXPECT_EQ(exec_exit_status(results), 7);
}

TEST(RemoteExec, ACommandKilledByASignalGets128PlusItsNumberAndADroppedOneNoStatus) {
  FakeSshTransport transport;
  ClusterSpec cluster = cluster_of(3, transport, {{}, std::nullopt, "", 0});
  transport.hosts["n1"].exit_signal = SIGKILL;
  transport.hosts["n2"].exit_signal = SIGSEGV;
  transport.hosts["n3"].exit_status = -1;  // no status and no signal: the connection dropped
  auto results = exec_on_nodes(transport, cluster, {"x"}, 8, nullptr);
  EXPECT_EQ(results[0].status, 137);
  EXPECT_FALSE(results[0].failure.has_value());
  EXPECT_EQ(results[1].status, 139);
  ASSERT_TRUE(results[2].failure.has_value());
  EXPECT_EQ(*results[2].failure, "n3: connection: the command ended without a status");
}

TEST(RemoteExec, SignalNamesAsSshdSendsThem) {
  EXPECT_EQ(signal_number("TERM"), SIGTERM);
  EXPECT_EQ(signal_number("ABRT"), SIGABRT);
  EXPECT_EQ(signal_number("HUP"), SIGHUP);
  EXPECT_EQ(signal_number(""), 0);
  EXPECT_EQ(signal_number("SIGTERM"), 0);  // sshd names signals without the prefix
  EXPECT_EQ(signal_number("BOGUS"), 0);
}

}  // namespace
}  // namespace muster
