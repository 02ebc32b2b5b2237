// Pure pieces of remote launch: quoting, checksums, and the agent's wire format.
#include <climits>
#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "launcher/local/self.h"
#include "launcher/remote/agent_protocol.h"
#include "launcher/remote/agent_start.h"
#include "launcher/remote/bundle.h"
#include "launcher/cluster/rank_plan.h"
#include "launcher/error.h"
#include "launcher/remote/launch_spec.h"
#include "probes/digest.h"
#include "launcher/remote/shell_quote.h"

namespace muster {
namespace {

// The ship command as a node's shell runs it, on a bundle made here: the system's loader as
// ld.so, /bin/true as its muster (it starts, whatever its --version), and a build-id file.
class ShipCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/muster-ship-XXXXXX";
    home_ = mkdtemp(pattern);
    std::filesystem::create_directories(home_ + "/staged/lib");
    std::filesystem::copy_file("/lib64/ld-linux-x86-64.so.2", home_ + "/staged/ld.so");
    std::filesystem::copy_file("/bin/true", home_ + "/staged/muster");
  }
  void TearDown() override { std::filesystem::remove_all(home_); }

  struct Shipped {
    int exit_code = -1;
    std::string out, err;
  };
  Shipped ship(const std::string& build_id) {
    std::ofstream(home_ + "/staged/build-id") << build_id << "\n";
    const std::string archive = home_ + "/bundle.tar.gz";
    EXPECT_EQ(std::system(("tar -czf " + shell_quote(archive) + " -C " + shell_quote(home_ + "/staged") + " .").c_str()), 0);
    const std::string run = "HOME=" + shell_quote(home_) + " " + ship_command(false) + " < " +
                            shell_quote(archive) + " > " + shell_quote(home_ + "/out") + " 2> " +
                            shell_quote(home_ + "/err");
    Shipped s;
    const int status = std::system(run.c_str());
    s.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    s.out = slurp(home_ + "/out");
    s.err = slurp(home_ + "/err");
    return s;
  }
  static std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::string cache() const { return home_ + "/.cache/muster"; }
  std::string home_;
};

TEST_F(ShipCommand, ABundleOfThisBuildIsPublishedUnderItsBuildId) {
  Shipped s = ship(muster_build_id());
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("MUSTER-SHIPPED"), std::string::npos) << s.out;
  EXPECT_TRUE(std::filesystem::exists(cache() + "/" + muster_build_id() + "/complete"));
}

TEST_F(ShipCommand, ABundleThatSaysItIsAnotherBuildIsRefusedAndLeavesNothing) {
  Shipped s = ship("0123456789abcdef");
  EXPECT_EQ(s.exit_code, 4);
  EXPECT_NE(s.err.find("the shipped bundle says it is another build: 0123456789abcdef"),
            std::string::npos) << s.err;
  EXPECT_TRUE(std::filesystem::is_empty(cache())) << "the unpacked copy is removed";
}

// muster trusts a muster-node beside it by this: the same build id as the one it carries.
TEST(ElfBuildId, ReadsTheNoteOfAnElfFileAndNothingElse) {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  const std::string self((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(muster_build_id().empty());
  EXPECT_EQ(elf_build_id(self), muster_build_id());
  EXPECT_EQ(elf_build_id("#!/bin/sh\necho muster-node\n"), "");
  EXPECT_EQ(elf_build_id(self.substr(0, 40)), "") << "headers cut short";

  // A note that says it is longer than its segment is no build id.
  ElfW(Nhdr) note{4, 20, NT_GNU_BUILD_ID};
  std::string notes(reinterpret_cast<const char*>(&note), sizeof note);
  notes += std::string("GNU\0", 4) + std::string(20, '\x5a');
  std::string hex;
  for (int i = 0; i < 20; ++i) hex += "5a";
  EXPECT_EQ(build_id_in_notes(notes), hex);
  EXPECT_EQ(build_id_in_notes(notes.substr(0, notes.size() - 1)), "");
}

// MPI's fences and fetches between agents and the head: any bytes survive, and what is not
// one of these messages is refused, never half read.
TEST(FenceMessages, CarryAnyBytesAndRefuseWhatIsNotOne) {
  const std::string blob("a\0b\nc 9\n", 9);
  const FencePart part = decode_fence(encode_fence({"pmix", 3, blob}));
  EXPECT_EQ(part.protocol, "pmix");
  EXPECT_EQ(part.number, 3);
  EXPECT_EQ(part.bytes, blob);

  const auto [header, parts] = decode_fenced(encode_fenced("pmi1", 0, {blob, "", "x"}));
  EXPECT_EQ(header.protocol, "pmi1");
  EXPECT_EQ(header.number, 0);
  EXPECT_EQ(parts, (std::vector<std::string>{blob, "", "x"}));

  EXPECT_EQ(decode_fetch(encode_fetch(7, 12)), std::make_pair(7, 12));
  const auto [request, status, data] = decode_fetched(encode_fetched(7, -46, blob));
  EXPECT_EQ(request, 7);
  EXPECT_EQ(status, -46);
  EXPECT_EQ(data, blob);

  for (const char* bad : {"", "pmix", "pmix x\n", "pm ix 1\n", "toolongprotocol 1\n"})
    EXPECT_THROW(decode_fence(bad), Error) << bad;
  for (const char* bad : {"pmix 1\n5\nabc", "pmix 1\nx\n", "pmix 1\n99999999999999999999999\n"})
    EXPECT_THROW(decode_fenced(bad), Error) << bad;
  for (const char* bad : {"", "1", "1 x", "-1 2", "1 2 3"}) EXPECT_THROW(decode_fetch(bad), Error) << bad;
  for (const char* bad : {"", "1 2", "x 2\n", "1 --2\n"}) EXPECT_THROW(decode_fetched(bad), Error) << bad;
}

TEST(ShellQuote, EveryArgumentIsOneInertWord) {
  EXPECT_EQ(shell_quote("plain"), "'plain'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_command({"echo", "a b", "$(x)", "`y`;z"}), "'echo' 'a b' '$(x)' '`y`;z'");
}

TEST(Sha256, MatchesTheStandardTestVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(AgentProtocol, FramesSurviveArbitraryPayloadsAndSplitReads) {
  const std::string tricky = "a line\nwith 'quotes' $(x) `y`; \xc3\xa9\n\0end";
  std::string wire = encode_frame({FrameKind::Out, 3, tricky}) + encode_frame({FrameKind::Stop, -1, ""});
  FrameReader reader(kMaxAgentFramePayload);
  std::vector<Frame> frames;
  for (char c : wire) {  // one byte at a time: the worst split a channel can deliver
    reader.feed(std::string_view(&c, 1));
    while (auto f = reader.next()) frames.push_back(*f);
  }
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].kind, FrameKind::Out);
  EXPECT_EQ(frames[0].rank, 3);
  EXPECT_EQ(frames[0].payload, tricky);
  EXPECT_EQ(frames[1].kind, FrameKind::Stop);
}

// A frame longer than its sender ever needs is refused from its header, before its bytes are
// kept: an agent says a line (at most 1 MiB) or a report, never a gigabyte.
TEST(AgentProtocol, AFrameOverItsSendersLimitIsRefusedFromItsHeader) {
  FrameReader from_agent(kMaxAgentFramePayload);
  from_agent.feed(fmt::format("OUT 0 {}\n", kMaxAgentFramePayload + 1));
  try {
    from_agent.next();
    ADD_FAILURE() << "a frame over the limit was awaited";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("over the protocol's limit of 64 MiB"), std::string::npos) << e.what();
  }
  FrameReader exactly(kMaxAgentFramePayload);
  exactly.feed(fmt::format("OUT 0 {}\n", kMaxAgentFramePayload));
  EXPECT_FALSE(exactly.next());  // at the limit: awaited
  FrameReader from_head(kMaxHeadFramePayload);
  from_head.feed(fmt::format("SPEC 1 {}\n", kMaxHeadFramePayload + 1));
  EXPECT_THROW(from_head.next(), Error);
}

// What one end may send of a fence the other takes, at the limit; one byte past it the agent
// says why in a Fail frame rather than send what the head would refuse as garbage. A fence
// completed at the limit, from many nodes, fits the head's frame with its length lines.
TEST(AgentProtocol, FencesAtTheLimitCrossBothWaysAndOneBytePastIsRefusedWithWords) {
  FencePart part{"pmi1", 999'999'999, std::string(kMaxFenceBytes, 'x')};
  const Frame fence = fence_frame(7, part);
  ASSERT_EQ(fence.kind, FrameKind::Fence);
  FrameReader head_reads(kMaxAgentFramePayload);
  head_reads.feed(encode_frame(fence));
  const auto read = head_reads.next();
  ASSERT_TRUE(read);
  EXPECT_EQ(decode_fence(read->payload).bytes.size(), kMaxFenceBytes);
  // A Fetched answer as large: the same limit.
  FrameReader fetched(kMaxAgentFramePayload);
  fetched.feed(encode_frame({FrameKind::Fetched, 7, encode_fetched(INT_MAX, -INT_MAX, part.bytes)}));
  EXPECT_TRUE(fetched.next());

  part.bytes += 'x';
  const Frame over = fence_frame(7, part);
  EXPECT_EQ(over.kind, FrameKind::Fail);
  EXPECT_NE(over.payload.find("more than the 64 MiB muster carries in one fence"), std::string::npos) << over.payload;

  // Every node's parts, kMaxFenceBytes together, back to each node in one frame.
  std::vector<std::string> parts(4096, std::string(kMaxFenceBytes / 4096, 'y'));
  FrameReader agent_reads(kMaxHeadFramePayload);
  agent_reads.feed(encode_frame({FrameKind::Fenced, 7, encode_fenced("pmix", 3, parts)}));
  const auto fenced = agent_reads.next();
  ASSERT_TRUE(fenced);
  EXPECT_EQ(decode_fenced(fenced->payload).second.size(), 4096u);
}

TEST(AgentProtocol, SomethingElseOnTheChannelIsAClearError) {
  FrameReader reader(kMaxAgentFramePayload);
  reader.feed("bash: muster: command not found\n");
  EXPECT_THROW(reader.next(), Error);
}

// The head sends each node its own ranks and the job's size, not the plan of every node:
// the whole plan, sent to each of 4096 nodes, was 600 KB to every one of them.
TEST(LaunchSpec, ANodeIsSentItsOwnRanksAloneWhateverTheClusterSize) {
  ClusterSpec cluster;
  for (int i = 0; i < 1000; ++i) cluster.nodes.push_back(NodeSpec{fmt::format("n{}", i), "", {2}, {}, {}, {}});
  const RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
  NodeLaunchSpec sent;
  sent.node = node_view(plan, 42);
  sent.request.argv = {"true"};
  const std::string wire = to_json(sent);
  EXPECT_LT(wire.size(), 1000u) << "grows with the cluster: " << wire.substr(0, 300);
  NodeLaunchSpec got = node_launch_spec_from_json(wire);
  EXPECT_EQ(got.node.world_size, 2000);
  EXPECT_EQ(got.node.nodes_used, 1000);
  ASSERT_EQ(got.node.ranks.size(), 2u);
  EXPECT_EQ(got.node.ranks[0].rank, 84);
  EXPECT_EQ(got.node.ranks[1].rank, 85);
  EXPECT_EQ(got.node.ranks[1].local_rank, 1);
  EXPECT_EQ(got.node.ranks[1].host, "n42");
}

// What the head sends arrives whole: every field of the node's share of the plan, the
// command and the environment, values with newlines, quotes and non-ASCII included.
TEST(LaunchSpec, ASpecSurvivesTheTripToTheAgent) {
  NodeLaunchSpec sent;
  sent.node = {1, 5, 2, {{3, 0, 1, "gpu02", 6, 1}, {4, 1, 1, "gpu02", std::nullopt, 1}}};
  sent.request.argv = {"python3", "-c", "print('a b')\n$(x) `y`; é"};
  sent.request.workdir = "/scratch/job 1";
  sent.request.workdir_rule = WorkdirRule::OrHome;
  sent.request.bind = BindPolicy::Numa;
  sent.request.job.job_id = "j-42";
  sent.request.job.master_addr = "10.0.0.1";
  sent.request.job.master_port = 29500;
  sent.request.job.jax_coordinator_port = 29501;
  sent.request.job.launch_env = {{"A", "line1\nline2"}};
  sent.request.job.exports = {{"B", "\"quoted\" 'too'"}};
  sent.request.job.node_env = {{0, {{"NCCL_SOCKET_IFNAME", "=eth0"}}}, {1, {{"NCCL_SOCKET_IFNAME", "=eth1"}}}};
  sent.teardown.grace = Milliseconds(2500);
  sent.teardown.kill_wait = Milliseconds(700);

  NodeLaunchSpec got = node_launch_spec_from_json(to_json(sent));
  EXPECT_EQ(got.node.node_rank, 1);
  EXPECT_EQ(got.node.world_size, 5);
  EXPECT_EQ(got.node.nodes_used, 2);
  ASSERT_EQ(got.node.ranks.size(), 2u);
  EXPECT_EQ(got.node.ranks[0].rank, 3);
  EXPECT_EQ(got.node.ranks[0].host, "gpu02");
  EXPECT_EQ(got.node.ranks[0].gpu, 6);
  EXPECT_EQ(got.node.ranks[1].local_rank, 1);
  EXPECT_EQ(got.node.ranks[1].node_rank, 1);
  EXPECT_EQ(got.node.ranks[1].group_rank, 1);
  EXPECT_FALSE(got.node.ranks[1].gpu.has_value());
  EXPECT_EQ(got.request.argv, sent.request.argv);
  EXPECT_EQ(got.request.workdir, sent.request.workdir);
  EXPECT_EQ(got.request.workdir_rule, WorkdirRule::OrHome);
  EXPECT_EQ(got.request.bind, BindPolicy::Numa);
  EXPECT_EQ(got.request.job.job_id, "j-42");
  EXPECT_EQ(got.request.job.master_addr, "10.0.0.1");
  EXPECT_EQ(got.request.job.master_port, 29500);
  EXPECT_EQ(got.request.job.jax_coordinator_port, 29501);
  EXPECT_EQ(got.request.job.launch_env, sent.request.job.launch_env);
  EXPECT_EQ(got.request.job.exports, sent.request.job.exports);
  // Its own node's measured choices, not the other nodes': they are not its business.
  EXPECT_EQ(got.request.job.node_env, (std::map<int, std::map<std::string, std::string>>{
                                          {1, {{"NCCL_SOCKET_IFNAME", "=eth1"}}}}));
  EXPECT_EQ(got.teardown.grace, Milliseconds(2500));
  EXPECT_EQ(got.teardown.kill_wait, Milliseconds(700));
}

TEST(LaunchSpec, ASpecFromAnotherVersionOrMangledIsRefused) {
  EXPECT_THROW(node_launch_spec_from_json("{\"protocol\": 999}"), Error);
  EXPECT_THROW(node_launch_spec_from_json("{\"protocol\": 1, \"node_rank\": 0}"), Error);
  EXPECT_THROW(node_launch_spec_from_json("not json"), Error);
}

// What an agent says of its node is bounded before anything is sized or dialled from it.
TEST(LaunchSpec, AHelloWithImpossibleCountsPortsOrPrefixesIsRefused) {
  NodeHello hello;
  hello.hostname = "node1";
  hello.gpus = 8;
  hello.cpus = 64;
  hello.free_ports = {40000, 40001};
  hello.probe_port = 40002;
  hello.addresses = {{"eth0", "10.0.0.1", 24, 25.0}};
  const std::string good = to_json(hello);
  EXPECT_EQ(node_hello_from_json(good).gpus, 8);
  EXPECT_EQ(node_hello_from_json(good).addresses.at(0).line_rate_gbps, 25.0);
  struct Case {
    const char* from;
    const char* to;
    const char* said;
  } cases[] = {
      {"\"gpus\":8", "\"gpus\":-1", "gpus -1 is not in 0..1024"},
      {"\"gpus\":8", "\"gpus\":100000000", "gpus 100000000 is not in 0..1024"},
      {"\"cpus\":64", "\"cpus\":4294967296", "cpus 4294967296 is not in 0..1048576"},
      {"\"free_ports\":[40000,40001]", "\"free_ports\":[0,70000]", "free port 0 is not a port"},
      {"\"probe_port\":40002", "\"probe_port\":65536", "probe_port 65536 is not in 0..65535"},
      {"\"prefix_length\":24", "\"prefix_length\":99", "prefix_length 99 is not in 0..32"},
      {"\"line_rate_gbps\":25.0", "\"line_rate_gbps\":-1", "line rate -1 Gbit/s"},
  };
  for (const auto& c : cases) {
    std::string text = good;
    ASSERT_NE(text.find(c.from), std::string::npos) << good;
    text.replace(text.find(c.from), std::string(c.from).size(), c.to);
    try {
      node_hello_from_json(text);
      ADD_FAILURE() << "accepted " << c.to;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.said), std::string::npos) << e.what();
    }
  }
}

TEST(LaunchSpec, ExitsAndReportsSurviveTheTripBackToTheHead) {
  EXPECT_EQ(exit_from_json(exit_to_json(ExitStatus::exited(3))), ExitStatus::exited(3));
  EXPECT_EQ(exit_from_json(exit_to_json(ExitStatus::signaled(9))), ExitStatus::signaled(9));
  JobResult result;
  result.start_error = "cannot execute 'x'";
  result.escaped_killed = 2;
  result.notes = {"a note"};
  result.stuck = {{1, "pid 42 (sleep)"}};
  NodeRunReport back = node_run_report_from_json(to_json(node_run_report(result)));
  EXPECT_EQ(back.start_error, result.start_error);
  EXPECT_EQ(back.escaped_killed, 2);
  EXPECT_EQ(back.notes, result.notes);
  ASSERT_EQ(back.stuck.size(), 1u);
  EXPECT_EQ(back.stuck[0].rank, 1);
  EXPECT_EQ(back.stuck[0].description, "pid 42 (sleep)");
}

// A node enters the job's directory when it can; when only the caller's directory was at
// stake (OrHome) it starts in $HOME instead and says so, and a directory asked for is left
// for the spawn to refuse with its reason.
TEST(NodeWorkdir, TheCallersDirectoryGivesWayToHomeOnlyWhereItCannotBeEntered) {
  const Environment base{{"HOME", "/home/u"}};
  LaunchRequest request;
  EXPECT_EQ(node_workdir(request, base).path, std::nullopt);
  request.workdir_rule = WorkdirRule::OrHome;
  for (const char* there : {"/", "/tmp"}) {
    request.workdir = there;
    const NodeWorkdir w = node_workdir(request, base);
    EXPECT_EQ(w.path, there);
    EXPECT_FALSE(w.went_home);
  }
  for (const char* missing : {"/no/such/dir/for/muster", "/proc/self/status"}) {  // a file is no directory
    request.workdir = missing;
    const NodeWorkdir w = node_workdir(request, base);
    EXPECT_EQ(w.path, "/home/u") << missing;
    EXPECT_TRUE(w.went_home) << missing;
  }
  EXPECT_EQ(node_workdir(request, Environment{}).path, "/");  // no HOME at all
  request.workdir_rule = WorkdirRule::Required;
  request.workdir = "/no/such/dir/for/muster";
  EXPECT_EQ(node_workdir(request, base).path, "/no/such/dir/for/muster");
  EXPECT_FALSE(node_workdir(request, base).went_home);

  // Its answer crosses back in the Bound frame.
  EXPECT_TRUE(node_bound_from_json(to_json(NodeBound{{}, true})).went_home);
  EXPECT_FALSE(node_bound_from_json(to_json(NodeBound{{}, false})).went_home);
}

// A node's agent is muster, but a node can be broken into: what it says is checked.
TEST(LaunchSpec, AnImpossibleExitOrReportFromANodeIsRefused) {
  for (const char* bad : {R"({"signal":true,"code":0})", R"({"signal":true,"code":65})",
                          R"({"signal":false,"code":256})", R"({"signal":false,"code":-1})",
                          R"({"signal":false,"code":1e300})", R"({"signal":false})", "[]"})
    EXPECT_THROW(exit_from_json(bad), Error) << bad;
  for (const char* bad : {R"({"start_error":"","escaped":-5,"stuck":[]})",
                          R"({"start_error":"","escaped":1e300,"stuck":[]})",
                          R"({"start_error":"","escaped":0,"stuck":[{"rank":"x"}]})"})
    EXPECT_THROW(node_run_report_from_json(bad), Error) << bad;
  // Every payload reader refuses with Error alone, which is all the session catches.
  for (const char* bad : {R"([{"rank":1}])", R"({"rank":1})", "[1]",
                          R"({"ranks":[{"rank":1}],"went_home":false})", R"({"ranks":[]})"})
    EXPECT_THROW(node_bound_from_json(bad), Error) << bad;
}

}  // namespace
}  // namespace muster
