// Shipping muster to nodes that are not Debian with muster's libraries: a node without the
// libraries or SFTP, a node that is nothing but a static busybox, a damaged or half-written
// bundle, two heads shipping at once, and the words a user sees when muster cannot start.
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "probes/digest.h"
#include "tests/support/build_paths.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

namespace fs = std::filesystem;

std::string build_id() {
  auto version = run_muster({"--version"});
  auto at = version.out.find("build ");
  return version.out.substr(at + 6, version.out.find('\n', at) - at - 6);
}

class ShippingCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    MUSTER_REQUIRE_TEST_CLUSTER();
    cluster_ = std::make_unique<TestCluster>(2);
    file_ = cluster_->write_cluster_file("launch:\n  slots: 2\n");
  }
  // The bundle of this build in host i's cache.
  std::string bundle(int i) const { return cluster_->muster_cache(i) + "/" + build_id(); }
  // Gives host i a ~/.cache not shared with the others and ships the bundle there, so that
  // a test may damage that one copy.
  void ship_to_a_cache_of_its_own(int i) {
    HostSetup own;
    own.own_cache = true;
    cluster_->set_up_host(i, own);
    auto first = cluster_->muster({"run", "-f", file_, "--", "true"});
    ASSERT_EQ(first.exit_code, 0) << first.err;
  }
  // run, smoke and doctor all pass on the cluster.
  void everything_works() {
    auto run = cluster_->muster({"run", "-f", file_, "--", "sh", "-c", "echo $RANK on $(hostname)"});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    const auto out = run.out_lines();
    std::multiset<std::string> lines(out.begin(), out.end());
    EXPECT_EQ(lines, (std::multiset<std::string>{"[0] 0 on node1", "[1] 1 on node1", "[2] 2 on node2",
                                                 "[3] 3 on node2"}));
    auto smoke = cluster_->muster({"smoke", "-f", file_, "--backend", "gloo", "--max-bytes", "64K"});
    EXPECT_EQ(smoke.exit_code, 0) << smoke.err << smoke.out;
    auto doctor = cluster_->muster({"doctor", "-f", file_});
    EXPECT_EQ(doctor.exit_code, 0) << doctor.err << doctor.out;
  }
  std::unique_ptr<TestCluster> cluster_;
  std::string file_;
};

// The agents reached first hear the head while slower nodes are still being reached (their
// bundle shipped, a site's wrapper): 32 fresh nodes once took 28 s to reach, and the first
// 16 agents, silent-limited, had given the head up before it began to drive their links.
TEST_F(ShippingCluster, AgentsReachedFirstOutliveASlowNodesStart) {
  HostSetup slow;
  slow.sftp = false;
  slow.force_command = "sleep 3; eval \"$SSH_ORIGINAL_COMMAND\"";  // every command waits 3 s
  cluster_->set_up_host(1, slow);
  auto run = cluster_->muster({"run", "-f", file_, "--fanout", "1", "--heartbeat-timeout", "2", "--", "true"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

TEST_F(ShippingCluster, ANodeWithoutMustersLibrariesOrSftpRunsFromTheBundle) {
  HostSetup bare;
  bare.hidden_libraries = {"libyaml-cpp.so.0.7", "libssh.so.4", "libhwloc.so.15", "libdw.so.1"};
  bare.sftp = false;
  bare.own_cache = true;
  cluster_->set_up_host(1, bare);
  everything_works();
  ASSERT_TRUE(fs::exists(bundle(1) + "/complete"));
  EXPECT_EQ(sha256_file(bundle(1) + "/muster"), sha256_file(muster_node_program()));
  // muster-node is the node side alone: none of the head's SSH, Kerberos or YAML libraries travel.
  for (const auto& lib : fs::directory_iterator(bundle(1) + "/lib"))
    for (const char* head_only : {"libssh.so", "libyaml-cpp.so", "libkrb5", "libgssapi"})
      EXPECT_NE(lib.path().filename().string().rfind(head_only, 0), 0u) << lib.path();
  // The bundle's loader, libraries and plugins stay muster's own: ranks see the node as it is.
  auto env = cluster_->muster({"run", "-f", file_, "--tag", "none", "--", "sh", "-c",
                               "echo ${LD_LIBRARY_PATH-unset} ${MUSTER_BUNDLE-unset} ${HWLOC_PLUGINS_PATH-unset}"});
  EXPECT_EQ(env.out_lines(), std::vector<std::string>(4, "unset unset unset")) << env.err;
  // libdw, which the agent opens only to read a stack, travels too, and is found there.
  EXPECT_TRUE(fs::exists(bundle(1) + "/lib/libdw.so.1"));
  auto hung = cluster_->muster({"run", "-f", file_, "--timeout", "3", "--", "sleep", "100"}, 120);
  EXPECT_EQ(hung.exit_code, 124) << hung.err;
  // The other node's ranks say nanosleep whatever the bare node does: every rank must be read.
  EXPECT_NE(hung.err.find("nanosleep"), std::string::npos) << hung.err;
  EXPECT_EQ(hung.err.find("could not be read"), std::string::npos) << hung.err;
  EXPECT_EQ(hung.err.find("libdw"), std::string::npos) << hung.err;
}

TEST_F(ShippingCluster, AHostThatIsNothingButABusyboxRunsEverything) {
  if (!fs::exists("/bin/busybox")) {
    if (in_ci()) FAIL() << "/bin/busybox is missing; .ci/run installs busybox-static";
    GTEST_SKIP() << "needs a static busybox (apt-get install busybox-static)";
  }
  HostSetup busybox;
  busybox.busybox_root = true;
  cluster_->set_up_host(1, busybox);
  // What a session on that host sees: a static busybox and nothing else.
  auto ls = cluster_->muster({"exec", "-f", file_, "--", "ls", "/bin/sh", "/usr", "/lib"});
  EXPECT_NE(ls.err.find("/usr: No such file or directory"), std::string::npos) << ls.err;
  everything_works();
  EXPECT_TRUE(fs::exists(bundle(1) + "/complete"));
}

TEST_F(ShippingCluster, ADamagedOrHalfWrittenBundleIsReplacedWithAFreshOne) {
  ASSERT_NO_FATAL_FAILURE(ship_to_a_cache_of_its_own(1));
  const std::string libc = bundle(1) + "/lib/libc.so.6";
  const auto good_size = fs::file_size(libc);

  // A disk error or a half-copied file: the loader cannot use the library.
  fs::resize_file(libc, 100);
  auto damaged = cluster_->muster({"run", "-f", file_, "--", "true"});
  EXPECT_EQ(damaged.exit_code, 0) << damaged.err;
  EXPECT_EQ(fs::file_size(bundle(1) + "/lib/libc.so.6"), good_size);

  // An unpacking that stopped half way: files without the completion mark.
  fs::remove_all(fs::canonical(bundle(1)));
  fs::remove(bundle(1));
  fs::create_directories(bundle(1));
  std::ofstream(bundle(1) + "/muster") << "half";
  auto half = cluster_->muster({"run", "-f", file_, "--", "true"});
  EXPECT_EQ(half.exit_code, 0) << half.err;
  EXPECT_TRUE(fs::exists(bundle(1) + "/complete"));
  EXPECT_EQ(sha256_file(bundle(1) + "/muster"), sha256_file(muster_node_program()));
}

TEST_F(ShippingCluster, TwoHeadsShippingToASharedHomeAtOnceBothStart) {
  // Both hosts share /root: every node and both heads meet in one cache.
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(cluster_->muster_cache(0), ignored))
    if (entry.path().filename().string().find(build_id()) != std::string::npos) fs::remove_all(entry.path());
  RunningCommand first(cluster_->muster_argv({"run", "-f", file_, "--", "true"}));
  RunningCommand second(cluster_->muster_argv({"run", "-f", file_, "--", "true"}));
  auto a = first.wait(), b = second.wait();
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(fs::exists(bundle(0) + "/complete"));
  int copies = 0;  // the losers of the race removed their own
  for (const auto& entry : fs::directory_iterator(cluster_->muster_cache(0)))
    copies += entry.path().filename().string().rfind("." + build_id() + ".", 0) == 0;
  EXPECT_EQ(copies, 1);
}

TEST_F(ShippingCluster, WithShippingOffAStartFailureIsToldInTheNodesOwnWords) {
  HostSetup broken;
  broken.hidden_libraries = {"libyaml-cpp.so.0.7", "libssh.so.4"};
  broken.sftp = false;
  broken.own_cache = true;
  broken.installed_muster = true;
  cluster_->set_up_host(1, broken);
  auto r = cluster_->muster({"run", "-f", file_, "--no-ship", "--", "true"});
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_NE(r.err.find("muster: error: node2: remote command: muster could not start there (exit "
                       "status 127, started as installed /usr/local/bin/muster): "
                       "/usr/local/bin/muster: error while loading shared libraries: "
                       "/lib/x86_64-linux-gnu/libyaml-cpp.so.0.7: file too short; "), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("; install muster's libraries there (or a muster built for that node), or "
                       "let muster ship its self-contained bundle (drop --no-ship)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 of 2 nodes could not be reached; nothing was started"), std::string::npos) << r.err;

  broken.installed_muster = false;
  cluster_->set_up_host(1, broken);
  auto none = cluster_->muster({"run", "-f", file_, "--no-ship", "--", "true"});
  EXPECT_EQ(none.exit_code, 255);
  EXPECT_NE(none.err.find(fmt::format("node2: remote command: no muster bundle of this build ({}) in "
                                      "~/.cache/muster, /usr/local/lib/muster or /usr/lib/muster, "
                                      "and no muster on the node's PATH", build_id())),
            std::string::npos) << none.err;
}

// A muster that a signal kills before its hello (the kernel's OOM killer, a damaged binary):
// the signal, as sshd reported it, not a dropped connection.
TEST_F(ShippingCluster, AStartKilledByASignalIsToldWithItsSignal) {
  ASSERT_NO_FATAL_FAILURE(ship_to_a_cache_of_its_own(1));
  fs::copy_file(crash_on_start_binary(), bundle(1) + "/muster", fs::copy_options::overwrite_existing);
  auto r = cluster_->muster({"run", "-f", file_, "--no-ship", "--", "true"});
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_NE(r.err.find("node2: remote command: muster could not start there (was killed by SIGKILL (signal 9)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the bundle there may be damaged"), std::string::npos) << r.err;
  // With shipping allowed, the damaged bundle makes way for a fresh one.
  auto fixed = cluster_->muster({"run", "-f", file_, "--", "true"});
  EXPECT_EQ(fixed.exit_code, 0) << fixed.err;
}

}  // namespace
}  // namespace muster::testing
