// The real agent (run_agent) on pipes, with the test as its head: what it does when the head
// misbehaves.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "launcher/remote/agent.h"
#include "launcher/remote/agent_protocol.h"
#include "launcher/remote/launch_spec.h"
#include "launcher/cluster/rank_plan.h"

namespace muster {
namespace {

using namespace std::chrono_literals;

// The head's ends of the agent's channel, and how run_agent ended. Shared with the agent's
// thread, which a failed test leaves behind.
struct Channel {
  int to_agent[2] = {-1, -1};
  int from_agent[2] = {-1, -1};
  std::promise<int> ended;
};

// A channel whose pipes are open.
std::shared_ptr<Channel> open_channel() {
  auto channel = std::make_shared<Channel>();
  if (pipe2(channel->to_agent, O_CLOEXEC) != 0 || pipe2(channel->from_agent, O_CLOEXEC) != 0)
    throw std::runtime_error("cannot make the agent's pipes");
  return channel;
}

// run_agent on a thread of its own over `channel`, as a node runs it; how it ended comes later.
std::future<int> start_agent(const std::shared_ptr<Channel>& channel, AgentSettings settings = {}) {
  auto ended = channel->ended.get_future();
  std::thread([channel, settings] {
    channel->ended.set_value(
        run_agent([&] { return HeadChannel{channel->to_agent[0], channel->from_agent[1]}; }, settings));
  }).detach();
  return ended;
}

// Reads frames from the agent until one of `kind` arrives or 30 s pass.
std::optional<Frame> read_until(int fd, FrameKind kind) {
  FrameReader reader(kMaxAgentFramePayload);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  char buffer[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    while (auto frame = reader.next())
      if (frame->kind == kind) return frame;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) return std::nullopt;
    reader.feed(std::string_view(buffer, size_t(n)));
  }
  return std::nullopt;
}

// The agent's topology stands in for PMIx's own discovery only where it lacks nothing PMIx
// looks for: a node without GPUs and with an RDMA device was discovered without its PCI tree.
TEST(Agent, PmixBorrowsTheTopologyUnlessItLacksTheNodesRdmaDevices) {
  Topology walked, without_walk;
  without_walk.pci_walked = false;
  NodeHello ethernet, rdma;
  rdma.rdma = true;
  EXPECT_TRUE(pmix_may_borrow(walked, ethernet));
  EXPECT_TRUE(pmix_may_borrow(walked, rdma));
  EXPECT_TRUE(pmix_may_borrow(without_walk, ethernet));
  EXPECT_FALSE(pmix_may_borrow(without_walk, rdma));
}

// A head that stops reading (stalled, or its machine swapping) fills the channel; the agent's
// replies then wait. It must still hear the head: a Stop, a Bye, a closed channel.
TEST(Agent, AHeadThatStopsReadingCanStillEndTheSession) {
  auto channel = open_channel();
  fcntl(channel->from_agent[1], F_SETPIPE_SZ, 4096);  // the smallest a pipe holds: fills soon
  AgentSettings settings;
  settings.head_silence_limit = 60s;  // the head is slow, not silent
  auto ended = start_agent(channel, settings);
  ASSERT_TRUE(read_until(channel->from_agent[0], FrameKind::Hello));

  // The head stops reading and sends specs the agent cannot take: each gets a Fail, far more
  // of them than the channel holds. Then it says goodbye.
  std::string frames;
  for (int run = 1; run <= 200; ++run)
    frames += encode_frame({FrameKind::Spec, run, "not a spec " + std::string(100, 'x')});
  frames += encode_frame({FrameKind::Bye, -1, ""});
  ASSERT_EQ(write(channel->to_agent[1], frames.data(), frames.size()), ssize_t(frames.size()));

  ASSERT_EQ(ended.wait_for(30s), std::future_status::ready)
      << "the agent did not hear the head's goodbye while its replies waited";
  EXPECT_EQ(ended.get(), 0);
  for (int* p : {channel->to_agent, channel->from_agent})
    for (int i = 0; i < 2; ++i) close(p[i]);
}

// A job the agent cannot start (here: a share of the plan that is another node's) ends the agent
// with a Fail frame that says why: the head names the node's own failure, not a lost node.
TEST(Agent, AJobThatCannotStartIsSaidToTheHead) {
  auto channel = open_channel();
  auto ended = start_agent(channel);
  ASSERT_TRUE(read_until(channel->from_agent[0], FrameKind::Hello));

  ClusterSpec cluster;
  cluster.source = "test";
  cluster.nodes.push_back(NodeSpec{"n1", "a1", {1}, {}, {}, {}});
  NodeLaunchSpec spec;
  spec.node = node_view(make_rank_plan(cluster, std::nullopt, MapBy::Slot), 0);
  spec.node.node_rank = 3;  // its rank is node 0's
  spec.request.argv = {"true"};
  const std::string frame = encode_frame({FrameKind::Spec, 1, to_json(spec)});
  ASSERT_EQ(write(channel->to_agent[1], frame.data(), frame.size()), ssize_t(frame.size()));

  EXPECT_TRUE(read_until(channel->from_agent[0], FrameKind::Fail)) << "the agent's failure never reached the head";
  ASSERT_EQ(ended.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(ended.get(), 1);
  for (int* p : {channel->to_agent, channel->from_agent})
    for (int i = 0; i < 2; ++i) close(p[i]);
}

// The rendezvous node of a launch is asked to probe every peer at once, and a probe waits on the
// network: an ask is answered beside one still waiting, never behind it (one at a time, n-1
// probes stood end to end on every launch's check).
TEST(Agent, AnAskIsAnsweredBesideAProbeStillWaiting) {
  // A peer that takes the probe's connection and never says a word: the probe waits out its
  // timeout.
  const int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(silent, 8), 0);
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len), 0);

  auto channel = open_channel();
  auto ended = start_agent(channel);
  ASSERT_TRUE(read_until(channel->from_agent[0], FrameKind::Hello));

  const std::string probe = fmt::format(
      R"({{"op":"probe","targets":[{{"address":"127.0.0.1","port":{},"secret":"s"}}],"count":1,"timeout_ms":3000}})",
      ntohs(addr.sin_port));
  const std::string frames = encode_frame({FrameKind::Ask, 1, probe}) +
                             encode_frame({FrameKind::Ask, 2, R"({"op":"clock"})"});
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_EQ(write(channel->to_agent[1], frames.data(), frames.size()), ssize_t(frames.size()));

  auto first = read_until(channel->from_agent[0], FrameKind::Answer);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->rank, 2) << "the clock was answered only after the probe gave up: " << first->payload;
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 2s);
  auto second = read_until(channel->from_agent[0], FrameKind::Answer);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->rank, 1);
  EXPECT_NE(second->payload.find("\"reachable\":false"), std::string::npos) << second->payload;

  const std::string bye = encode_frame({FrameKind::Bye, -1, ""});
  ASSERT_EQ(write(channel->to_agent[1], bye.data(), bye.size()), ssize_t(bye.size()));
  ASSERT_EQ(ended.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(ended.get(), 0);
  close(silent);
  for (int* p : {channel->to_agent, channel->from_agent})
    for (int i = 0; i < 2; ++i) close(p[i]);
}

}  // namespace
}  // namespace muster
