// `muster topo` and binding, through the real binary.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"
#include "topology/cpu_list.h"

namespace muster::testing {
namespace {

const std::string kFixtures = source_path("/tests/fixtures/hwloc/");

TEST(TopoCli, ThisMachineJsonIsConsistent) {
  auto r = run_muster({"topo", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto t = nlohmann::json::parse(r.out);
  // Whatever this machine is: its NUMA nodes' CPUs are exactly its PUs, every GPU has a
  // row of paths with X on the diagonal, and every NIC has a name and a bus id.
  std::set<int> cpus;
  for (const auto& n : t["numa_nodes"])
    for (int c : parse_cpu_list(n["cpuset"].get<std::string>())) cpus.insert(c);
  EXPECT_EQ(int(cpus.size()), t["machine"]["pus"].get<int>());
  for (const auto& g : t["gpus"]) {
    std::string label = "GPU" + std::to_string(g["index"].get<int>());
    EXPECT_EQ(t["paths"][label][label], "X");
  }
  for (const auto& n : t["nics"]) {
    EXPECT_FALSE(n["name"].get<std::string>().empty());
    EXPECT_EQ(n["pci_bus_id"].get<std::string>().size(), 12u);
  }
  EXPECT_EQ(t["gpu_order"], "PCI_BUS_ID");
  auto text = run_muster({"topo"});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("this machine: "), std::string::npos) << text.out;
}

// hwloc's gl component knocks on X displays :0 to :9 on every discovery, each after a name
// lookup; muster reads no display. A stand-in X server on display :0's abstract socket
// (where Xlib knocks first) counts the knocks, closing each at once.
TEST(TopoCli, DiscoveryKnocksOnNoXDisplay) {
  // Abstract sockets belong to a network namespace, and other programs on this machine run
  // hwloc too (slurmd, a concurrent test's ranks): the stand-in and the muster under test get
  // a namespace of their own, so that every knock counted is muster's. Then back home, for
  // the tests that may follow in this process.
  const int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(home, 0);
  if (unshare(CLONE_NEWNET) != 0) {
    close(home);
    if (in_ci()) FAIL() << "cannot make a network namespace: " << std::strerror(errno);
    GTEST_SKIP() << "cannot make a network namespace (not root): " << std::strerror(errno);
  }
  struct BackHome {
    int fd;
    ~BackHome() {
      setns(fd, CLONE_NEWNET);
      close(fd);
    }
  } back_home{home};
  const int x = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(x, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string display0 = std::string(1, '\0') + "/tmp/.X11-unix/X0";
  std::memcpy(addr.sun_path, display0.data(), display0.size());
  const auto size = socklen_t(offsetof(sockaddr_un, sun_path) + display0.size());
  if (bind(x, reinterpret_cast<sockaddr*>(&addr), size) != 0 || listen(x, 16) != 0) {
    close(x);
    GTEST_SKIP() << "an X server holds display :0 here";
  }
  std::atomic<bool> done{false};
  std::atomic<int> knocks{0};
  std::thread server([&] {
    while (!done) {
      pollfd p{x, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int c = accept4(x, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) ++knocks, close(c);
    }
  });
  auto r = run_muster({"topo"});
  auto j = run_muster({"topo", "--json"});
  done = true;
  server.join();
  close(x);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(knocks, 0) << "muster topo connected to X display :0";
}

TEST(TopoCli, XmlJsonHasTheDocumentedShape) {
  auto r = run_muster({"topo", "--xml", kFixtures + "2socket-gpus-ib-eth.xml", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto t = nlohmann::json::parse(r.out);
  ASSERT_EQ(t["gpus"].size(), 4u);
  EXPECT_EQ(t["gpus"][2]["pci_bus_id"], "0000:84:00.0");
  EXPECT_EQ(t["gpus"][2]["vendor"], "NVIDIA");
  EXPECT_EQ(t["gpus"][2]["numa"], 1);
  EXPECT_EQ(t["gpus"][2]["cpuset"], "8-15,24-31");
  EXPECT_EQ(t["gpus"][2]["nearest_nics"], nlohmann::json::array({"mlx5_0"}));
  EXPECT_EQ(t["nics"][0]["name"], "mlx5_0");
  EXPECT_EQ(t["paths"]["GPU2"]["GPU3"], "PIX");
  EXPECT_EQ(t["paths"]["GPU2"]["NIC0"], "PIX");
  EXPECT_EQ(t["paths"]["GPU0"]["GPU1"], "SYS");
  EXPECT_EQ(t["nvlink"]["known"], false);
  auto dgx = nlohmann::json::parse(run_muster({"topo", "--xml", kFixtures + "nvidia-dgx2.xml",
                                               "--json"}).out);
  EXPECT_EQ(dgx["paths"]["GPU0"]["GPU15"], "NV6");
  EXPECT_EQ(dgx["nvlink"]["known"], true);
}

TEST(TopoCli, TextShowsTheMatrixAndTheLegend) {
  auto r = run_muster({"topo", "--xml", kFixtures + "2socket-gpus-ib-eth.xml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU2  SYS   PHB   X     PIX   PIX   PHB   PHB   8-15,24-31      1"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CUDA_DEVICE_ORDER=PCI_BUS_ID"), std::string::npos);
  EXPECT_NE(r.out.find("NVLink: unknown"), std::string::npos);
}

TEST(TopoCli, LongCpusetsKeepTheirColumnAndCpuNvlinksTheirOwnLine) {
  auto r = run_muster({"topo", "--xml", kFixtures + "power8-nvlink-to-cpu.xml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU0  X     NV2   SYS   SYS   0-1,8-9,16-17,24-25      0\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("GPU3  SYS   SYS   NV2   X     32-33,40-41,48-49,56-57  1\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("NVLink to CPUs: GPU0 NV2 to package 0, GPU1 NV2 to package 0, GPU2 NV2 to "
                       "package 1, GPU3 NV2 to package 1"), std::string::npos) << r.out;
  auto json = run_muster({"topo", "--json", "--xml", kFixtures + "power8-nvlink-to-cpu.xml"});
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["paths"]["GPU0"]["GPU2"], "SYS");
  EXPECT_EQ(j["nvlink"]["to_cpu"].size(), 4u);
  EXPECT_EQ(j["nvlink"]["to_cpu"][2], (nlohmann::json{{"gpu", 2}, {"package", 1}, {"links", 2}}));
}

// An IBM x3950 M2 whose only display controller is its BMC's ATI ES1000: no GPU to list, and
// `slots: auto` on it is one rank on CPUs, not one on "GPU 0".
TEST(TopoCli, ABmcsDisplayIsNoGpuToListOrPlanOn) {
  const std::string x3950 = kFixtures + "96em64t-4n4d3ca2co-pci.xml";
  auto r = run_muster({"topo", "--xml", x3950, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto t = nlohmann::json::parse(r.out);
  EXPECT_TRUE(t["gpus"].empty()) << t["gpus"].dump();
  EXPECT_EQ(t["nics"].size(), 8u);
  auto text = run_muster({"topo", "--xml", x3950});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.find("GPU0"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("ES1000"), std::string::npos) << text.out;
  auto plan = run_muster({"plan", "--json"}, {"HWLOC_XMLFILE=" + x3950});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  auto p = nlohmann::json::parse(plan.out);
  EXPECT_EQ(p["world_size"], 1);
  EXPECT_TRUE(p["ranks"][0]["gpu"].is_null()) << p["ranks"][0].dump();
}

TEST(TopoCli, BadFilesAreOneLineAndExit2) {
  for (const std::string& file : {std::string("/nonexistent.xml"), kFixtures + "README.md"}) {
    auto r = run_muster({"topo", "--xml", file});
    EXPECT_EQ(r.exit_code, 2) << file;
    EXPECT_EQ(r.err_lines().size(), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("muster: error: " + file + ": ", 0), 0u) << r.err;
  }
}

TEST(Binding, EachRankRunsOnTheCpusItWasReportedToGet) {
  auto r = run_muster({"run", "-n", "2", "--report-bindings", "--", "sh", "-c",
                       "grep Cpus_allowed_list /proc/self/status"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<int, std::string> reported, actual;
  for (const auto& line : r.err_lines()) {
    int rank = -1;
    char cpus[128] = {};
    if (std::sscanf(line.c_str(), "muster: rank %d (%*[^)]) bound to CPUs %127s", &rank, cpus) == 2)
      reported[rank] = cpus;
  }
  for (const auto& line : r.out_lines()) {
    int rank = -1;
    char cpus[128] = {};
    if (std::sscanf(line.c_str(), "[%d] Cpus_allowed_list: %127s", &rank, cpus) == 2)
      actual[rank] = cpus;
  }
  ASSERT_EQ(reported.size(), 2u) << r.err;
  EXPECT_EQ(actual, reported);
  auto none = run_muster({"run", "-n", "1", "--bind", "none", "--report-bindings", "--", "true"});
  EXPECT_NE(none.err.find("bound to CPUs (not bound)"), std::string::npos) << none.err;
}

TEST(Binding, AnXmlTopologyIsNotThisMachineSoBindingIsRefused) {
  auto r = run_muster({"run", "-n", "1", "--", "true"},
                      {"HWLOC_XMLFILE=" + kFixtures + "nvidia-dgx2.xml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("can only be bound to this machine's CPUs"), std::string::npos) << r.err;
  auto unbound = run_muster({"run", "-n", "2", "--bind", "none", "--", "true"},
                            {"HWLOC_XMLFILE=" + kFixtures + "nvidia-dgx2.xml"});
  EXPECT_EQ(unbound.exit_code, 0) << unbound.err;
}

TEST(PlanCli, SlotsAutoOnThisMachineIsItsGpuCount) {
  // The DGX-2 export stands in for this machine: 16 GPUs, so 16 ranks, rank i on GPU i.
  auto r = run_muster({"plan", "--json"}, {"HWLOC_XMLFILE=" + kFixtures + "nvidia-dgx2.xml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto plan = nlohmann::json::parse(r.out);
  EXPECT_EQ(plan["world_size"], 16);
  EXPECT_EQ(plan["ranks"][15]["gpu"], 15);
}

}  // namespace
}  // namespace muster::testing
