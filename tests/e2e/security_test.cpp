// muster against the attacks of share/doc/security.md that need no test cluster: a listener
// posing as the head to a real agent, and report files written where links were planted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "probes/digest.h"
#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"

namespace muster::testing {
namespace {

// A listener on loopback that plays the head without its secret: it sends a challenge, reads
// all the caller sends until it closes or `limit` passes, and answers as `answer` says.
class RogueHead {
 public:
  explicit RogueHead(std::string answer) : answer_(std::move(answer)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    socklen_t size = sizeof addr;
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(fd_, 4);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size);
    port_ = ntohs(addr.sin_port);
    received_ = std::async(std::launch::async, [this] { return serve(); });
  }
  ~RogueHead() { close(fd_); }
  int port() const { return port_; }
  // All the bytes the caller sent before it closed.
  std::string received() { return received_.get(); }

 private:
  std::string serve() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 20000) != 1) return "(no caller)";
    const int caller = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    const std::string challenge = random_bytes(16);
    [[maybe_unused]] auto w = write(caller, challenge.data(), challenge.size());
    std::string got;
    bool answered = false;
    for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
         std::chrono::steady_clock::now() < deadline;) {
      pollfd c{caller, POLLIN, 0};
      if (poll(&c, 1, 200) == 0) continue;
      char buffer[4096];
      const ssize_t n = read(caller, buffer, sizeof buffer);
      if (n <= 0) break;
      got.append(buffer, size_t(n));
      // The old handshake's reply to a 32-byte proof; the new one's would be 32 bytes.
      if (!answered && got.size() >= 32) {
        [[maybe_unused]] auto a = write(caller, answer_.data(), answer_.size());
        answered = true;
      }
    }
    close(caller);
    return got;
  }

  std::string answer_;
  int fd_ = -1, port_ = 0;
  std::future<std::string> received_;
};

// An agent started as muster's srun step starts it calls back a listener that holds no
// secret: whatever that listener answers (the old handshake's lone 'A', or 32 bytes that are
// no proof), the agent sends it its nonce and its proof and nothing else: no node name, no
// hello. It says why it refused, naming the address, and ends non-zero.
TEST(Security, AnAgentCallingBackSendsAListenerWithoutTheSecretNothingButItsProof) {
  for (const std::string& answer : {std::string("A"), random_bytes(32)}) {
    RogueHead rogue(answer);
    const std::string head = fmt::format("127.0.0.1:{}", rogue.port());
    const auto agent = run_command({muster_binary(), "agent", "--call-back", head},
                                   {"MUSTER_AGENT_SECRET=" + std::string(64, 'a'),
                                    "SLURMD_NODENAME=victim-node-17"},
                                   std::chrono::seconds(60));
    const std::string got = rogue.received();
    EXPECT_EQ(got.size(), 16u + 32u) << "the agent sent more than its nonce and proof";
    EXPECT_EQ(got.find("victim-node-17"), std::string::npos) << "the agent named its node to a stranger";
    EXPECT_NE(agent.exit_code, 0);
    EXPECT_NE(agent.err.find(head), std::string::npos) << agent.err;
    const bool refused = agent.err.find("does not hold the job's secret") != std::string::npos ||
                         agent.err.find("sent no proof of its own") != std::string::npos;
    EXPECT_TRUE(refused) << agent.err;
  }
}

// Reports are often written as root into directories others can write (a shared /tmp, the
// node exporter's). Links planted at the report's name and at the names the old code used for
// its temporary file (FILE.PID.tmp, for the pids muster would get next) are never followed:
// the file they point to is untouched, the report replaces the link, nothing else is left.
TEST(Security, ReportFilesNeverFollowALinkPlantedAtTheirNames) {
  TempDir shared, outside;
  outside.write("victim", "untouched\n");
  const std::string victim = outside.file("victim");
  const std::vector<std::string> reports = {shared.file("report.json"), shared.file("report.xml"),
                                            shared.file("muster.prom")};
  const pid_t next = getpid();
  for (const auto& report : reports) {
    std::filesystem::create_symlink(victim, report);
    for (pid_t pid = next; pid < next + 3000; ++pid)
      std::filesystem::create_symlink(victim, fmt::format("{}.{}.tmp", report, pid));
  }
  std::set<std::string> planted;
  for (const auto& entry : std::filesystem::directory_iterator(shared.path())) planted.insert(entry.path());

  const auto health = run_muster({"health", "--json", reports[0], "--junit", reports[1], "--prometheus", reports[2]});
  EXPECT_EQ(outside.read("victim"), "untouched\n") << health.err;
  for (const auto& report : reports) {
    EXPECT_FALSE(std::filesystem::is_symlink(report)) << report;
    EXPECT_GT(std::filesystem::file_size(report), 0u) << report;
  }
  for (const auto& entry : std::filesystem::directory_iterator(shared.path()))
    EXPECT_TRUE(planted.count(entry.path())) << "left behind: " << entry.path();
}

// The PMIx server's TCP listener is on loopback, where every local user reaches it (as under
// srun's pmix plugin). A rank that attacks it first (garbage, a 4 GiB length prefix, an
// unauthenticated header, 64 idle connections) does not keep its world from forming.
TEST(Security, HostileLocalClientsOnThePmixServerCannotStopAnMpiJob) {
  if (run_command({"/usr/bin/python3", "-c", "import mpi4py"}).exit_code != 0) {
    if (in_ci()) FAIL() << "mpi4py is missing (apt-get install python3-mpi4py)";
    GTEST_SKIP() << "needs python3-mpi4py";
  }
  const auto r = run_muster({"run", "-n", "2", "--tag", "none", "--timeout", "60", "--", "/usr/bin/python3",
                             source_path("/tests/e2e/mpi/hostile_pmix_client.py")});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("4 GiB length prefix: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 0 of 2: sum 3"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 1 of 2: sum 3"), std::string::npos) << r.out << r.err;
}

}  // namespace
}  // namespace muster::testing
