#include "launcher/cluster/rank_env.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "launcher/error.h"
#include "launcher/cluster/hostfile.h"
#include "launcher/local/node_launch.h"

namespace muster {
namespace {

JobEnvironment a_job() {
  JobEnvironment job;
  job.job_id = "0123456789abcdef";
  job.master_addr = "10.0.0.1";
  job.master_port = 29500;
  job.jax_coordinator_port = 29501;
  return job;
}

TEST(RankEnvironment, CarriesWhatTorchJaxAndOpenMpiRead) {
  // Rank 3 is node b's third: its local rank (2) is not its node's index (1).
  RankPlan plan = make_rank_plan(parse_host_option("a:1,b:3"), std::nullopt, MapBy::Slot);
  Environment env = rank_environment(Environment({{"HOME", "/root"}}), plan, 3, a_job());
  const std::map<std::string, std::string> expected = {
      {"HOME", "/root"},
      {"RANK", "3"}, {"LOCAL_RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "3"},
      {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
      {"JAX_COORDINATOR_ADDRESS", "10.0.0.1:29501"}, {"JAX_NUM_PROCESSES", "4"},
      {"JAX_PROCESS_ID", "3"},
      {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
      // Open MPI's node rank: the rank among the node's processes (mpirun sets it so), not
      // the node's index.
      {"OMPI_COMM_WORLD_NODE_RANK", "2"},
      {"MUSTER_JOB_ID", "0123456789abcdef"}, {"MUSTER_NNODES", "2"}, {"MUSTER_NODE_RANK", "1"},
      {"MUSTER_RESTART_COUNT", "0"}, {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"OMP_NUM_THREADS", "1"}, {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
  };
  EXPECT_EQ(env.vars(), expected);
}

TEST(RankEnvironment, ARestartedJobSaysHowManyTimesItWasRestarted) {
  RankPlan plan = make_rank_plan(parse_host_option("a:1"), std::nullopt, MapBy::Slot);
  JobEnvironment job = a_job();
  job.restart_count = 2;
  Environment env = rank_environment(Environment(), plan, 0, job);
  EXPECT_EQ(env.get("MUSTER_RESTART_COUNT"), "2");
  EXPECT_EQ(env.get("TORCHELASTIC_RESTART_COUNT"), "2");
}

TEST(RankEnvironment, JaxIsToldItsProcessCountIdAndTheRanksOwnGpu) {
  // 2 nodes x 2 ranks, each node with 2 GPUs: local rank i has GPU i.
  ClusterSpec cluster = parse_host_option("a:2,b:2");
  for (auto& node : cluster.nodes) node.gpu_count = 2;
  RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
  for (int rank = 0; rank < 4; ++rank) {
    Environment env = rank_environment(Environment(), plan, rank, a_job());
    EXPECT_EQ(env.get("JAX_COORDINATOR_ADDRESS"), "10.0.0.1:29501");
    EXPECT_EQ(env.get("JAX_NUM_PROCESSES"), "4");
    EXPECT_EQ(env.get("JAX_PROCESS_ID"), std::to_string(rank));
    EXPECT_EQ(env.get("JAX_LOCAL_DEVICE_IDS"), std::to_string(rank % 2)) << rank;
    EXPECT_FALSE(env.has("PJRT_DEVICE")) << "torch_xla's device is set only when asked (-x)";
  }
  // Without GPUs there is no device to name.
  RankPlan cpus = make_rank_plan(parse_host_option("a:2"), std::nullopt, MapBy::Slot);
  EXPECT_FALSE(rank_environment(Environment(), cpus, 1, a_job()).has("JAX_LOCAL_DEVICE_IDS"));
}

TEST(RankEnvironment, OmpThreadsIsLeftAloneWhenSetOrWhenAlone) {
  RankPlan two = make_rank_plan(parse_host_option("a:2"), std::nullopt, MapBy::Slot);
  RankPlan one = make_rank_plan(parse_host_option("a:1,b:1"), std::nullopt, MapBy::Slot);
  EXPECT_EQ(rank_environment(Environment({{"OMP_NUM_THREADS", "8"}}), two, 0, a_job())
                .get("OMP_NUM_THREADS"), "8");
  EXPECT_FALSE(rank_environment(Environment(), one, 0, a_job()).has("OMP_NUM_THREADS"));
  JobEnvironment job = a_job();
  job.exports["OMP_NUM_THREADS"] = "4";
  EXPECT_EQ(rank_environment(Environment(), two, 0, job).get("OMP_NUM_THREADS"), "4");
}

TEST(RankEnvironment, LaunchEnvThenExportsWin) {
  RankPlan plan = make_rank_plan(parse_host_option("a"), std::nullopt, MapBy::Slot);
  JobEnvironment job = a_job();
  job.launch_env = {{"NCCL_DEBUG", "WARN"}, {"MASTER_ADDR", "from-file"}};
  job.exports = {{"NCCL_DEBUG", "INFO"}};
  Environment env = rank_environment(Environment({{"NCCL_DEBUG", "TRACE"}}), plan, 0, job);
  EXPECT_EQ(env.get("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(env.get("MASTER_ADDR"), "from-file");
}

TEST(RankEnvironment, NodeChoicesComeBeforeTheClusterFileAndExports) {
  RankPlan plan = make_rank_plan(parse_host_option("a,b"), std::nullopt, MapBy::Slot);
  JobEnvironment job = a_job();
  job.node_env[1] = {{"NCCL_SOCKET_IFNAME", "=eth1"}, {"GLOO_SOCKET_IFNAME", "eth1"}};
  job.exports = {{"GLOO_SOCKET_IFNAME", "ib0"}};
  Environment on_a = rank_environment(Environment(), plan, 0, job);
  Environment on_b = rank_environment(Environment(), plan, 1, job);
  EXPECT_FALSE(on_a.has("NCCL_SOCKET_IFNAME"));
  EXPECT_EQ(on_b.get("NCCL_SOCKET_IFNAME"), "=eth1");
  EXPECT_EQ(on_b.get("GLOO_SOCKET_IFNAME"), "ib0");
}

TEST(RankEnvironment, AProxyNeverCarriesTheRendezvous) {
  RankPlan plan = make_rank_plan(parse_host_option("a"), std::nullopt, MapBy::Slot);
  Environment plain = rank_environment(Environment(), plan, 0, a_job());
  EXPECT_FALSE(plain.has("NO_PROXY"));
  Environment proxied = rank_environment(
      Environment({{"HTTPS_PROXY", "http://proxy:3128"}, {"no_proxy", "localhost"}}), plan, 0, a_job());
  EXPECT_EQ(proxied.get("NO_PROXY"), "10.0.0.1");
  EXPECT_EQ(proxied.get("no_proxy"), "localhost,10.0.0.1");
  JobEnvironment job = a_job();
  job.exports = {{"NO_PROXY", "10.0.0.1,x"}, {"all_proxy", "socks://p"}};
  EXPECT_EQ(rank_environment(Environment(), plan, 0, job).get("NO_PROXY"), "10.0.0.1,x");
}

TEST(Exports, CopyFromMusterOrTakeTheGivenValue) {
  auto exports = resolve_exports({"PATH", "A=b=c", "EMPTY="}, Environment({{"PATH", "/bin"}}));
  EXPECT_EQ(exports, (std::map<std::string, std::string>{{"PATH", "/bin"}, {"A", "b=c"},
                                                          {"EMPTY", ""}}));
}

TEST(Exports, RejectUnsetAndInvalidNames) {
  try {
    resolve_exports({"NOPE"}, Environment());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_EQ(std::string(e.what()), "-x NOPE: NOPE is not set in muster's environment; set it "
                                     "or write -x NOPE=VALUE");
  }
  EXPECT_THROW(resolve_exports({"1X=2"}, Environment()), Error);
  EXPECT_THROW(resolve_exports({"=2"}, Environment()), Error);
}

// A probe rank is told its GPU as the agent found it, so that it need not walk the PCI tree
// again; a user's rank never sees the variable.
TEST(RankEnvironment, AProbeRankIsToldItsGpuAndAUsersRankIsNot) {
  RankPlan plan = make_rank_plan(parse_host_option("a:3"), std::nullopt, MapBy::Slot);
  Topology node;
  node.is_this_machine = true;
  for (int i = 0; i < 2; ++i) {
    Gpu g;
    g.index = i;
    g.vendor_id = 0x10de;
    g.model = "NVIDIA H100";
    g.location.bus_id = fmt::format("0000:{:02x}:00.0", 0x18 + i);
    if (i == 1) g.uuid = "GPU-1234";
    node.gpus.push_back(g);
  }
  LaunchRequest probe;
  probe.argv = {kMusterSelf, "smoke-rank"};
  probe.bind = BindPolicy::None;
  auto ranks = rank_processes_for_node(node_view(plan, 0), probe, Environment({}), node);
  ASSERT_EQ(ranks.size(), 3u);
  std::vector<std::optional<Gpu>> told;
  for (const auto& r : ranks) {
    ASSERT_TRUE(r.spec.env.has(kRankGpuVariable));
    told.push_back(rank_gpu_from_json(r.spec.env.get(kRankGpuVariable)));
  }
  ASSERT_TRUE(told[0] && told[1]);
  EXPECT_EQ(told[0]->location.bus_id, "0000:18:00.0");
  EXPECT_EQ(told[0]->uuid, std::nullopt);
  EXPECT_EQ(told[1]->index, 1);
  EXPECT_EQ(told[1]->location.bus_id, "0000:19:00.0");
  EXPECT_EQ(told[1]->vendor_id, 0x10de);
  EXPECT_EQ(told[1]->model, "NVIDIA H100");
  EXPECT_EQ(told[1]->uuid, "GPU-1234");
  EXPECT_FALSE(told[2].has_value());  // a third rank on a node of two GPUs has none

  LaunchRequest user = probe;
  user.argv = {"python3", "train.py"};
  for (const auto& r : rank_processes_for_node(node_view(plan, 0), user, Environment({}), node))
    EXPECT_FALSE(r.spec.env.has(kRankGpuVariable));
}

TEST(RankEnvironment, AGpuDescriptionThatIsNotOursIsNotTaken) {
  // Absent (smoke-rank started by hand) or not the agent's JSON: a usage error naming it.
  for (const char* text : {"", "{}", "[1]",
                           R"({"index":"zero","pci_bus_id":"x","vendor_id":1,"model":"m","uuid":null})"}) {
    try {
      rank_gpu_from_json(text);
      ADD_FAILURE() << "taken: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
      EXPECT_NE(std::string(e.what()).find(kRankGpuVariable), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(rank_gpu_from_json("null").has_value());  // a rank without a GPU
}

}  // namespace
}  // namespace muster
