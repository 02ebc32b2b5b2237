// muster's GPU paths end to end, on this machine made to look like a GPU node by the fakes of
// tests/fakes/gpu: hwloc finds the GPUs on the PCI bus, NVML names them and their NVLinks,
// and the probe ranks dlopen the CUDA runtime and NCCL exactly as on a real node. None of
// this is a GPU result: it proves that muster drives those libraries through their real ABI
// and reports what they say, until a GPU is lent.
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"
#include "tests/support/fake_gpus.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> with(std::vector<std::string> env, const std::vector<std::string>& more) {
  env.insert(env.end(), more.begin(), more.end());
  return env;
}

std::string problems_of(const nlohmann::json& report) {
  std::string out;
  for (const auto& p : report["problems"]) out += p["message"].get<std::string>() + "\n";
  return out;
}

bool has_problem(const nlohmann::json& report, const std::string& text) {
  return problems_of(report).find(text) != std::string::npos;
}

// The groups the rows of a smoke report cover.
std::set<std::string> groups_of(const nlohmann::json& report) {
  std::set<std::string> groups;
  for (const auto& row : report["results"]) groups.insert(row["group"].get<std::string>());
  return groups;
}

// ---- NVML: muster topo names the GPUs and counts the NVLinks the description gives ----

TEST(GpuTopo, EightGpusThroughNvSwitchesAreNv18BetweenEveryPair) {
  FakeGpuMachine machine("eight-gpus-nvswitch");
  auto r = run_muster({"topo", "--json"}, machine.environment());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto topo = nlohmann::json::parse(r.out);
  EXPECT_EQ(topo["nvlink"]["source"], "NVML");
  ASSERT_EQ(topo["gpus"].size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    const auto& gpu = topo["gpus"][i];
    EXPECT_EQ(gpu["pci_bus_id"], machine.gpus()[i].bus_id);
    EXPECT_EQ(gpu["uuid"], machine.gpus()[i].uuid);
    EXPECT_EQ(gpu["model"], "NVIDIA H100 80GB HBM3");
    for (size_t j = 0; j < 8; ++j)
      EXPECT_EQ(topo["paths"][fmt::format("GPU{}", i)][fmt::format("GPU{}", j)], i == j ? "X" : "NV18")
          << i << "-" << j;
  }
  EXPECT_TRUE(topo["nvlink"]["to_cpu"].empty());
}

TEST(GpuTopo, FourGpusWithLinksOfTheirOwnPerPair) {
  FakeGpuMachine machine("four-gpus-pairwise");
  auto r = run_muster({"topo", "--json"}, machine.environment());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto paths = nlohmann::json::parse(r.out)["paths"];
  // 0-1 and 2-3 by four links; every other pair by two.
  EXPECT_EQ(paths["GPU0"]["GPU1"], "NV4");
  EXPECT_EQ(paths["GPU2"]["GPU3"], "NV4");
  EXPECT_EQ(paths["GPU3"]["GPU2"], "NV4");
  for (auto [a, b] : {std::pair{0, 2}, {0, 3}, {1, 2}, {1, 3}})
    EXPECT_EQ(paths[fmt::format("GPU{}", a)][fmt::format("GPU{}", b)], "NV2") << a << "-" << b;

  auto text = run_muster({"topo"}, machine.environment());
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // The UUID on a line of its own, so that the device list fits 80 columns.
  EXPECT_NE(text.out.find("GPU3  0000:ca:00.0  NUMA "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  NVIDIA A100-SXM4-40GB\n      GPU-4a5e0000-0000-4000-8000-000000000003\n"),
            std::string::npos) << text.out;
  EXPECT_NE(text.out.find("NVLink: from NVML"), std::string::npos) << text.out;
}

TEST(GpuTopo, NvlinksToTheCpuAreTheirOwnFactNotAPathBetweenGpus) {
  FakeGpuMachine machine("two-gpus-nvlink-to-cpu");
  auto r = run_muster({"topo", "--json"}, machine.environment());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto topo = nlohmann::json::parse(r.out);
  EXPECT_EQ(topo["paths"]["GPU0"]["GPU1"], "NV3");  // not NV6: the CPU links join no GPUs
  EXPECT_EQ(topo["nvlink"]["to_cpu"],
            (nlohmann::json{{{"gpu", 0}, {"package", 0}, {"links", 3}},
                            {{"gpu", 1}, {"package", 0}, {"links", 3}}}));
  auto text = run_muster({"topo"}, machine.environment());
  EXPECT_NE(text.out.find("NVLink to CPUs: GPU0 NV3 to package 0, GPU1 NV3 to package 0"), std::string::npos) << text.out;
}

TEST(GpuTopo, AutomaticSlotsAreTheGpuCount) {
  for (auto [name, gpus] : {std::pair{"eight-gpus-nvswitch", 8}, {"four-gpus-pairwise", 4}}) {
    FakeGpuMachine machine(name);
    auto r = run_muster({"plan", "--json"}, machine.environment());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto plan = nlohmann::json::parse(r.out);
    ASSERT_EQ(plan["ranks"].size(), size_t(gpus)) << name;
    for (int rank = 0; rank < gpus; ++rank) EXPECT_EQ(plan["ranks"][size_t(rank)]["gpu"], rank);
  }
}

// ---- Only the GPUs the job holds: 4 of 8, as Slurm's --gpus-per-node=4 or a user sets them ----

// Every hello names one of the job's GPUs, rank r on a node the r-th of them, and the fake NCCL
// made rank r's communicator on that same GPU (CUDA_VISIBLE_DEVICES renumbers the devices).
void expect_ranks_on_job_gpus(const nlohmann::json& report, const FakeGpuMachine& machine,
                              const std::vector<size_t>& job, const std::string& nccl_log) {
  for (const auto& hello : report["hellos"]) {
    const size_t local = hello["local_rank"].get<size_t>();
    ASSERT_LT(local, job.size()) << hello.dump();
    const std::string& bus = machine.gpus()[job[local]].bus_id;
    EXPECT_EQ(hello["gpu"]["pci_bus_id"], bus) << hello.dump();
    EXPECT_NE(nccl_log.find(fmt::format("{} init on {}", hello["rank"].get<int>(), bus)), std::string::npos)
        << "rank " << hello["rank"] << " is not on " << bus << ":\n" << nccl_log;
  }
}

TEST(GpuShare, FourVisibleOfEightAreTheJobsSlotsAndEachRankUsesItsOwn) {
  MUSTER_REQUIRE_FAKE_NCCL();
  FakeGpuMachine machine("eight-gpus-nvswitch");
  TempDir dir;
  const auto env = with(machine.environment(),
                        {"CUDA_VISIBLE_DEVICES=4,5,6,7", "MUSTER_FAKE_NCCL_LOG=" + dir.file("nccl.log")});
  auto plan = run_muster({"plan"}, env);
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("the job's GPUs: 4 of 8, from CUDA_VISIBLE_DEVICES=4,5,6,7"), std::string::npos) << plan.out;
  auto topo = run_muster({"topo"}, env);
  EXPECT_NE(topo.out.find("(GPU4 as device 0, GPU5 as device 1, GPU6 as device 2, GPU7 as device 3)"),
            std::string::npos) << topo.out;

  auto r = run_muster({"smoke", "--max-bytes", "4K", "--json"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["world_size"], 4) << "slots: auto counts the job's GPUs";
  expect_ranks_on_job_gpus(report, machine, {4, 5, 6, 7}, dir.read("nccl.log"));
}

TEST(GpuShareCluster, OverSshEachNodesAgentCountsTheGpusItsJobHolds) {
  MUSTER_REQUIRE_TEST_CLUSTER();
  MUSTER_REQUIRE_FAKE_NCCL();
  FakeGpuMachine machine("eight-gpus-nvswitch");
  TempDir dir;
  TestCluster cluster(2);
  HostSetup gpu_node;
  gpu_node.environment = with(machine.environment(), {"CUDA_VISIBLE_DEVICES=GPU-8b0c0000-0000-4000-8000-000000000006,GPU-8b0c0000-0000-4000-8000-000000000002",
                                                      "MUSTER_FAKE_NCCL_LOG=" + dir.file("nccl.log"),
                                                      "ASAN_OPTIONS=detect_leaks=0"});  // see GpuCluster below
  for (int i = 0; i < cluster.size(); ++i) cluster.set_up_host(i, gpu_node);
  auto r = cluster.muster({"smoke", "-f", cluster.write_cluster_file(), "--max-bytes", "4K", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["world_size"], 4) << "two GPUs on each of two nodes";
  expect_ranks_on_job_gpus(report, machine, {6, 2}, dir.read("nccl.log"));
}

// ---- NCCL: muster smoke through the same dlopen as on a GPU node ----

class GpuSmoke : public ::testing::Test {
 protected:
  void SetUp() override { MUSTER_REQUIRE_FAKE_NCCL(); }
  // The fake NCCL's record of what each rank did ("RANK event" lines).
  std::string nccl_log() const { return dir_.read("nccl.log"); }
  std::vector<std::string> env(const std::vector<std::string>& more = {}) const {
    return with(machine_.environment(), with({"MUSTER_FAKE_NCCL_LOG=" + dir_.file("nccl.log")}, more));
  }
  FakeGpuMachine machine_{"four-gpus-pairwise"};
  TempDir dir_;
};

TEST_F(GpuSmoke, AutoChoosesNcclAndEveryRankNamesItsGpu) {
  auto r = run_muster({"smoke", "--max-bytes", "64K", "--json"}, env());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["backend"], "nccl");
  EXPECT_EQ(report["world_size"], 4);  // slots: one per GPU
  ASSERT_EQ(report["hellos"].size(), 4u);
  for (const auto& hello : report["hellos"]) {
    const auto& expected = machine_.gpus()[hello["local_rank"].get<size_t>()];
    EXPECT_EQ(hello["gpu"]["pci_bus_id"], expected.bus_id) << hello.dump();
    EXPECT_EQ(hello["gpu"]["uuid"], expected.uuid) << hello.dump();
    EXPECT_EQ(hello["gpu"]["model"], expected.name) << hello.dump();
  }
  std::set<std::string> ops;
  for (const auto& row : report["results"]) {
    ops.insert(row["op"].get<std::string>());
    EXPECT_EQ(row["wrong"], 0) << row.dump();
    EXPECT_EQ(row["ranks"], 4) << row.dump();
  }
  EXPECT_EQ(ops, (std::set<std::string>{"all_reduce", "all_gather", "reduce_scatter", "broadcast"}));
  // Every rank made its communicator and took it down in order.
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(nccl_log().find(fmt::format("{} init", rank)), std::string::npos) << nccl_log();
    EXPECT_NE(nccl_log().find(fmt::format("{} destroy", rank)), std::string::npos) << nccl_log();
  }
  EXPECT_EQ(nccl_log().find("abort"), std::string::npos) << nccl_log();

  auto text = run_muster({"smoke", "--max-bytes", "64"}, env());
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("backend nccl"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("GPU 2 0000:b1:00.0 NVIDIA A100-SXM4-40GB GPU-4a5e0000-0000-4000-8000-000000000002"),
            std::string::npos) << text.out;
}

// Each collective takes 2 ms on the fake GPU, after the call has returned: a timer that
// stopped before the stream finished would report far less.
TEST_F(GpuSmoke, TimesCoverTheWorkOnTheStream) {
  auto r = run_muster({"smoke", "--max-bytes", "32", "--iters", "5", "--warmup", "1", "--json"},
                      env({"MUSTER_FAKE_CUDA_KERNEL_US=2000"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  ASSERT_FALSE(report["results"].empty());
  for (const auto& row : report["results"])
    for (const auto& [rank, time_us] : row["time_us_by_rank"].items())
      EXPECT_GE(time_us.get<double>(), 2000) << "rank " << rank << ": " << row.dump();
}

// The timed runs go on the stream back to back and are waited for once, as nccl-tests times
// them: a wait after each measured an 87 us floor under every collective on an H100.
TEST_F(GpuSmoke, TimedRunsAreQueuedBackToBackAndWaitedForOnce) {
  auto r = run_muster({"smoke", "--max-bytes", "8", "--iters", "5", "--warmup", "0", "--json"},
                      env({"MUSTER_FAKE_CUDA_KERNEL_US=2000"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(nccl_log().find(fmt::format("{} queued-behind", rank)), std::string::npos) << nccl_log();
}

// The timeout bounds each collective, not a timed loop of them: five that take 0.4 s each
// pass under a timeout of 1.5 s, as one alone would.
TEST_F(GpuSmoke, ATimedLoopLongerThanTheTimeoutPassesWhenEachCollectiveIsWithinIt) {
  auto r = run_muster({"smoke", "--max-bytes", "8", "--iters", "5", "--warmup", "0", "--timeout", "1.5", "--json"},
                      env({"MUSTER_FAKE_CUDA_KERNEL_US=400000"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  ASSERT_FALSE(report["results"].empty());
  for (const auto& row : report["results"]) EXPECT_GE(row["time_us"].get<double>(), 400000) << row.dump();
}

TEST_F(GpuSmoke, AHungRankIsNamedAndTheOthersAbortWithinTheTimeout) {
  const auto start = Clock::now();
  // Rank 2 hangs in its 40th collective: inside the first all-reduce step's timed loop.
  auto r = run_muster({"smoke", "--max-bytes", "64", "--timeout", "3", "--json"},
                      env({"MUSTER_FAKE_NCCL_HANG=2:40"}));
  const auto took = Clock::now() - start;
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(has_problem(report, "rank 2 (")) << problems_of(report);
  EXPECT_TRUE(has_problem(report, ") hung in all_reduce (world)")) << problems_of(report);
  EXPECT_EQ(report["problems"][0]["message"].get<std::string>().rfind("rank 2 (", 0), 0u)
      << "the hung rank comes first: " << problems_of(report);
  EXPECT_TRUE(has_problem(report, "did not finish within 3000 ms; the NCCL communicator was aborted"))
      << problems_of(report);
  // The others gave up after --timeout and aborted their communicators; nothing is left.
  EXPECT_LT(took, std::chrono::seconds(3 + 20));
  EXPECT_NE(nccl_log().find("2 hang"), std::string::npos) << nccl_log();
  // The first to give up aborted its communicator; the others may have been stopped by the
  // launcher's teardown before their own deadline came.
  EXPECT_TRUE(nccl_log().find("0 abort") != std::string::npos ||
              nccl_log().find("1 abort") != std::string::npos ||
              nccl_log().find("3 abort") != std::string::npos) << nccl_log();
  EXPECT_TRUE(wait_until([&] {
    return processes_running({"muster", "smoke-rank"}, "MUSTER_FAKE_NCCL_LOG=" + dir_.file("nccl.log")).empty();
  },
                         std::chrono::seconds(10)));
}

TEST_F(GpuSmoke, AnAsyncErrorIsNamedWithTheRankItCameFrom) {
  auto r = run_muster({"smoke", "--max-bytes", "64", "--timeout", "10", "--json"},
                      env({"MUSTER_FAKE_NCCL_ASYNC_ERROR=1:40"}));
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(has_problem(report, "): all_reduce: the NCCL communicator reported an asynchronous "
                                  "error (unhandled system error"))
      << problems_of(report);
  bool named = false;
  for (const auto& p : report["problems"]) {
    const std::string m = p["message"];
    named |= m.rfind("rank 1 (", 0) == 0 && m.find("unhandled system error") != std::string::npos;
  }
  EXPECT_TRUE(named) << problems_of(report);
  EXPECT_NE(nccl_log().find("1 async-error"), std::string::npos) << nccl_log();
  EXPECT_NE(nccl_log().find("1 abort"), std::string::npos) << nccl_log();
}

TEST_F(GpuSmoke, ACommunicatorThatCannotBeMadeIsNamed) {
  const auto start = Clock::now();
  auto r = run_muster({"smoke", "--max-bytes", "64", "--timeout", "10", "--json"},
                      env({"MUSTER_FAKE_NCCL_INIT_FAIL=3"}));
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(has_problem(report, "rank 3 (")) << problems_of(report);
  EXPECT_TRUE(has_problem(report, "ncclCommInitRank for world (rank 3 of 4, CUDA device 3): "
                                  "unhandled system error"))
      << problems_of(report);
  // The other ranks wait in ncclCommInitRank for rank 3; muster stops them when it fails.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

// A rank whose NCCL bootstrap never completes holds every rank in ncclCommInitRank; each
// gives up at --timeout (the communicator is non-blocking) and aborts it, naming itself.
TEST_F(GpuSmoke, ACommunicatorThatNeverFormsIsAbortedWithinTheTimeout) {
  const auto start = Clock::now();
  auto r = run_command({muster_binary(), "smoke", "--max-bytes", "64", "--timeout", "3", "--json"},
                       env({"MUSTER_FAKE_NCCL_INIT_HANG=2"}), std::chrono::seconds(90));
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3 + 20));
  auto report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(has_problem(report, "ncclCommInitRank for world (rank 2 of 4, CUDA device 2) did not "
                                  "finish within 3000 ms: a rank of the group never joined"))
      << problems_of(report);
  EXPECT_NE(nccl_log().find("2 init-hang"), std::string::npos) << nccl_log();
  EXPECT_NE(nccl_log().find("2 abort"), std::string::npos) << nccl_log();
  EXPECT_TRUE(wait_until([&] {
    return processes_running({"muster", "smoke-rank"}, "MUSTER_FAKE_NCCL_LOG=" + dir_.file("nccl.log")).empty();
  },
                         std::chrono::seconds(10)));
}

TEST_F(GpuSmoke, WithoutNcclTheBackendIsGlooOrTheErrorSaysWhy) {
  // The GPUs are there (hwloc and NVML see them) but no NCCL or CUDA runtime loads.
  std::vector<std::string> no_nccl;
  for (const auto& v : machine_.environment())
    if (v.rfind("LD_LIBRARY_PATH=", 0) != 0) no_nccl.push_back(v);
  auto automatic = run_muster({"smoke", "--max-bytes", "64", "--json"}, no_nccl);
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err << automatic.out;
  EXPECT_EQ(nlohmann::json::parse(automatic.out)["backend"], "gloo");

  auto forced = run_muster({"smoke", "--max-bytes", "64", "--backend", "nccl", "--json"}, no_nccl);
  EXPECT_EQ(forced.exit_code, 1) << forced.err << forced.out;
  auto report = nlohmann::json::parse(forced.out);
  EXPECT_TRUE(has_problem(report, "cannot use NCCL")) << problems_of(report);
  EXPECT_TRUE(has_problem(report, "use --backend gloo")) << problems_of(report);
}

// ---- NCCL across nodes: two test hosts, four fake GPUs each ----

TEST(GpuCluster, SplitNodeAndPairsRunOverNcclOnEveryNode) {
  MUSTER_REQUIRE_TEST_CLUSTER();
  MUSTER_REQUIRE_FAKE_NCCL();
  FakeGpuMachine machine("four-gpus-pairwise");
  TestCluster cluster(2);
  HostSetup gpu_node;
  gpu_node.environment = machine.environment();
  // Matters under CI's AddressSanitizer build only: the nodes run muster through its bundle's
  // own loader (ld.so --library-path), where LeakSanitizer mislabels the modules (it names
  // the loader "muster") and reports 276 bytes the loader allocated for itself (both stacks
  // end in ld.so's own malloc) in every rank, here where LD_LIBRARY_PATH points at the fakes.
  // Memory errors are still caught on the nodes; leaks are checked wherever muster runs as
  // itself (the head, local ranks, every other test).
  gpu_node.environment.push_back("ASAN_OPTIONS=detect_leaks=0");
  for (int i = 0; i < cluster.size(); ++i) cluster.set_up_host(i, gpu_node);
  const std::string file = cluster.write_cluster_file();

  auto r = cluster.muster({"smoke", "-f", file, "--split", "node", "--pairs", "--max-bytes", "4K", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["backend"], "nccl");
  EXPECT_EQ(report["world_size"], 8);  // four GPUs on each of two nodes
  std::set<std::string> slots;
  for (const auto& hello : report["hellos"])
    slots.insert(hello["host"].get<std::string>() + " " + hello["gpu"]["pci_bus_id"].get<std::string>());
  EXPECT_EQ(slots.size(), 8u);
  EXPECT_EQ(groups_of(report),
            (std::set<std::string>{"world", "node 0", "node 1", "across nodes", "pair 0-1"}));
  for (const auto& row : report["results"]) {
    EXPECT_EQ(row["wrong"], 0) << row.dump();
    const std::string group = row["group"];
    EXPECT_EQ(row["ranks"], group == "world" ? 8 : group.rfind("node", 0) == 0 ? 4 : 2) << row.dump();
  }
}

}  // namespace
}  // namespace muster::testing
