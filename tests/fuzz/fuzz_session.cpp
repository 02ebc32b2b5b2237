// libFuzzer: past the parsers, into what the head does with what agents say. Three scripted
// agents (the fake transport that speaks the real protocol) answer with fuzzed but whole
// frames: their hellos, their answers to the clock, port, probe and health requests, and the
// frames of a job (bindings, lines, exits, the node's report). The head then opens its
// session, runs the network pass and a job over it. Refusing any of it with muster's Error
// is right; any other exception, a crash or a hang is a finding.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/cluster/rank_plan.h"
#include "launcher/error.h"
#include "launcher/job/cluster_ping.h"
#include "launcher/job/session_job.h"
#include "launcher/remote/session.h"
#include "tests/fakes/fake_agent_transport.h"

namespace {

using namespace std::chrono_literals;

// An agent's words, taken from the input: each may be empty (the fake's own then).
struct Script {
  std::string hello, clock, ports, probe, health, done;
  std::vector<muster::Frame> job;
};

Script script_from(FuzzedDataProvider& input) {
  Script s;
  for (std::string* words : {&s.hello, &s.clock, &s.ports, &s.probe, &s.health, &s.done})
    *words = input.ConsumeRandomLengthString(2048);
  static constexpr muster::FrameKind kJobKinds[] = {muster::FrameKind::Bound, muster::FrameKind::Out,
                                                    muster::FrameKind::Err, muster::FrameKind::Exit,
                                                    muster::FrameKind::Fail};
  for (int n = input.ConsumeIntegralInRange(0, 4); n > 0; --n)
    s.job.push_back({input.PickValueInArray(kJobKinds), input.ConsumeIntegralInRange(-2, 4),
                     input.ConsumeRandomLengthString(1024)});
  return s;
}

struct Discard : muster::JobOutput {
  void line(int, muster::OutputStream, std::string_view) override {}
  void flush() override {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace muster;
  FuzzedDataProvider input(data, size);
  auto transport = std::make_shared<testing::FakeAgentTransport>();
  ClusterSpec cluster;
  cluster.source = "fuzz";
  for (int i = 1; i <= 3; ++i) {
    const Script s = script_from(input);
    testing::FakeAgentNode& node = transport->nodes["a" + std::to_string(i)];
    if (!s.hello.empty()) node.hello = s.hello;
    node.answer = [s](const std::string& op) {
      const std::string& said = op == "clock" ? s.clock : op == "ports" ? s.ports
                               : op == "probe" ? s.probe : s.health;
      return said.empty() ? std::string("{}") : said;
    };
    node.job_frames = s.job;
    if (!s.done.empty()) node.done = s.done;
    cluster.nodes.push_back(NodeSpec{"n" + std::to_string(i), "a" + std::to_string(i), {1}, {}, {}, {}});
  }
  try {
    SessionOptions options;
    options.reach = Reach::BestEffort;
    options.hello_timeout = 300ms;
    options.heartbeat_timeout = 5s;
    auto session = ClusterSession::open(transport, cluster, options, {});
    PingOptions ping;
    ping.round_trips = 2;
    ping.timeout = 100ms;
    ping.retry_after = 10ms;  // a fuzzed failure is retried at once, not a second later
    ping_cluster(*session, cluster, ping, {});
    LaunchRequest request;
    request.argv = {"true"};
    request.job.job_id = "fuzz";
    TeardownPolicy policy;
    policy.grace = 10ms;
    policy.kill_wait = 10ms;
    policy.timeout = 2s;
    Discard output;
    run_over_session(*session, make_rank_plan(cluster, std::nullopt, MapBy::Slot), request, policy, output, {});
  } catch (const Error&) {
    // refused, named: what the head does with a node that says nonsense
  }
  return 0;
}
