// What a node asks its ranks' libraries: NCCL's RAS service, spoken to as ncclras speaks to
// it (a recording server here, and a rank that loaded "NCCL" and serves RAS the way NCCL
// does), and torch's flight recorder, asked through its pipe and read only when the file is
// what it claims to be.
#include "launcher/local/rank_libraries.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "probes/free_port.h"
#include "tests/support/build_paths.h"

using muster::testing::source_path;

namespace muster {
namespace {

using std::chrono::milliseconds;
const std::string kNcclJob = source_path("/tests/e2e/stacks/nccl_job.py");

// NCCL 2.24's text report of a job where rank 5's all-reduce count fell behind (the format
// of src/ras/client_support.cc, with this job's numbers).
const std::string kStatusReport =
    "Job summary\n===========\n\n"
    "  Nodes  Processes         GPUs  Processes     GPUs\n"
    "(total)   per node  per process    (total)  (total)\n"
    "      4          2            1          8        8\n\n"
    "Communicators... (0.00s)\n=============\n\n"
    "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
    "    0         1         4         2         8         8   RUNNING  MISMATCH\n\n"
    "Errors\n======\n\n"
    "INCOMPLETE\n  Missing communicator data from 1 job process\n"
    "  Process 4242 on node 10.88.0.13 managing GPU 1\n\n"
    "Warnings\n========\n\n"
    "#0-0 (7b6e4f2a9c1d3e58) MISMATCH\n"
    "  Communicator ranks have different AllReduce operation counts\n"
    "  7 ranks have launched up to operation 12\n"
    "  Rank 5 has launched up to operation 11 -- GPU 1 managed by process 4242 on node 10.88.0.13\n\n";

TEST(RasFindings, TheErrorsAndWarningsOfNcclsReportAreKeptAndTheSummaryTablesAreNot) {
  const auto lines = ras_findings(kStatusReport);
  ASSERT_EQ(lines.size(), 7u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "INCOMPLETE");
  EXPECT_EQ(lines[2], "  Process 4242 on node 10.88.0.13 managing GPU 1");
  EXPECT_EQ(lines[3], "#0-0 (7b6e4f2a9c1d3e58) MISMATCH");
  EXPECT_EQ(lines[6], "  Rank 5 has launched up to operation 11 -- GPU 1 managed by process 4242 on node 10.88.0.13");
  EXPECT_TRUE(ras_findings("Errors\n======\n\nWarnings\n========\n\n").empty());
}

TEST(RasFindings, AnAnswerOfAnyLengthKeepsItsBounds) {
  std::string report = "Errors\n======\n\n";
  for (int i = 0; i < 1000; ++i) report += std::string(500, 'x') + "\n";
  const auto lines = ras_findings(report);
  EXPECT_EQ(lines.size(), kMaxRasLines);
  for (const auto& line : lines) EXPECT_LE(line.size(), kMaxRasLineBytes);
}

// A server on loopback that answers as NCCL's RAS thread does, or stays silent, and records
// what its client said.
class RecordingRasServer {
 public:
  explicit RecordingRasServer(bool answers) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (answers) thread_ = std::thread([this] { serve(); });
  }
  ~RecordingRasServer() {
    shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> heard;

 private:
  void serve() {
    const int c = accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    std::string line;
    char ch;
    while (read(c, &ch, 1) == 1) {
      if (ch != '\n') {
        line += ch;
        continue;
      }
      heard.push_back(line);
      std::string answer = line.rfind("CLIENT PROTOCOL", 0) == 0 ? "SERVER PROTOCOL 2\n"
                           : line.rfind("TIMEOUT", 0) == 0       ? "OK\n"
                                                                 : kStatusReport;
      EXPECT_EQ(write(c, answer.data(), answer.size()), ssize_t(answer.size()));
      line.clear();
      if (answer == kStatusReport) break;
    }
    close(c);
  }
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(NcclRas, AskedAsNcclrasAsksItTheServiceAnswersWithTheOddRank) {
  RecordingRasServer server(true);
  const RasSummary summary = ask_nccl_ras(server.address(), milliseconds(3000));
  EXPECT_EQ(summary.error, "");
  EXPECT_EQ(summary.address, server.address());
  ASSERT_EQ(summary.lines.size(), 7u);
  EXPECT_NE(summary.lines.back().find("Rank 5 has launched up to operation 11"), std::string::npos);
  // ncclras's handshake, a timeout within muster's limit, then the status.
  EXPECT_EQ(server.heard, (std::vector<std::string>{"CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"}));
}

TEST(NcclRas, AServiceThatNeverAnswersCostsTheLimitAndNoMore) {
  RecordingRasServer silent(false);  // listens, never accepts: connect succeeds, nothing comes
  const auto start = std::chrono::steady_clock::now();
  const RasSummary summary = ask_nccl_ras(silent.address(), milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  EXPECT_NE(summary.error.find("did not answer in time"), std::string::npos) << summary.error;
  EXPECT_TRUE(summary.lines.empty());
}

TEST(NcclRas, NothingListeningAndAnAddressMusterCannotUseAreSaidPlainly) {
  const int port = find_free_tcp_port();
  auto none = ask_nccl_ras("127.0.0.1:" + std::to_string(port), milliseconds(500));
  EXPECT_NE(none.error.find("nothing answers at 127.0.0.1:"), std::string::npos) << none.error;
  EXPECT_NE(none.error.find("NCCL before 2.24"), std::string::npos) << none.error;
  EXPECT_NE(ask_nccl_ras("head.example.com:28028", milliseconds(500)).error.find("not a numeric address"),
            std::string::npos);
  EXPECT_NE(ask_nccl_ras("127.0.0.1:99999", milliseconds(500)).error.find("no port"), std::string::npos);
}

// A rank of nccl_job.py, started with `env`: this test's child, as a rank is its agent's.
struct PythonRank {
  pid_t pid = -1;
  PythonRank(const std::string& library, const std::vector<std::string>& env, const std::string& odd = "1") {
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    pid = fork();
    if (pid == 0) {
      dup2(out[1], 1);
      std::vector<std::string> argv = {"/usr/bin/python3", kNcclJob, library, odd};
      std::vector<char*> args, envp;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      std::vector<std::string> e = env;
      for (auto& v : e) envp.push_back(v.data());
      envp.push_back(nullptr);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    close(out[1]);
    pollfd fd{out[0], POLLIN, 0};
    EXPECT_EQ(poll(&fd, 1, 20000), 1);  // "[1] in place"
    close(out[0]);
  }
  ~PythonRank() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

class RankLibrariesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/muster_rank_libraries_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/libnccl.so.2.24.3") << std::string(8192, '\0');
    std::ofstream(dir_ + "/libgloo.so.0") << std::string(8192, '\0');
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(RankLibrariesTest, ARankThatLoadedNcclIsAskedAtItsRasAddressAndOneThatDidNotIsNot) {
  const std::string ras = "127.0.0.1:" + std::to_string(find_free_tcp_port());
  PythonRank nccl(dir_ + "/libnccl.so.2.24.3", {"RANK=0", "WORLD_SIZE=8", "NCCL_RAS_ADDR=" + ras}, "5");
  EXPECT_EQ(nccl_ras_address({nccl.pid}), ras);
  RankLibraries libraries({{0, nccl.pid}}, milliseconds(3000));
  const auto answer = libraries.ras();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->error, "");
  ASSERT_FALSE(answer->lines.empty());
  EXPECT_NE(answer->lines.back().find("Rank 5 has launched up to operation 11"), std::string::npos);

  PythonRank gloo(dir_ + "/libgloo.so.0", {"RANK=1", "WORLD_SIZE=8", "NCCL_RAS_ADDR=" + ras});
  EXPECT_EQ(nccl_ras_address({gloo.pid}), std::nullopt);
  EXPECT_FALSE(RankLibraries({{1, gloo.pid}}, milliseconds(1000)).ras().has_value());
  const std::string off = "127.0.0.1:" + std::to_string(find_free_tcp_port());
  PythonRank disabled(dir_ + "/libnccl.so.2.24.3", {"RANK=2", "WORLD_SIZE=8", "NCCL_RAS_ADDR=" + off, "NCCL_RAS_ENABLE=0"});
  EXPECT_EQ(nccl_ras_address({disabled.pid}), std::nullopt);
}

TEST_F(RankLibrariesTest, AFlightRecorderAskedThroughItsPipeWritesAFreshDumpThatIsCollected) {
  const std::string ras = "127.0.0.1:" + std::to_string(find_free_tcp_port());
  PythonRank rank(dir_ + "/libnccl.so.2.24.3",
                  {"RANK=3", "WORLD_SIZE=8", "NCCL_RAS_ADDR=" + ras, "TORCH_NCCL_TRACE_BUFFER_SIZE=2000",
                   "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=" + dir_ + "/pipe_",
                   "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=" + dir_ + "/nccl_trace_rank_"});
  ASSERT_FALSE(std::filesystem::exists(dir_ + "/nccl_trace_rank_3"));
  RankLibraries libraries({{3, rank.pid}}, milliseconds(3000));
  const auto dumps = libraries.flight_recorder_dumps();
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].rank, 3);
  EXPECT_EQ(dumps[0].source, dir_ + "/nccl_trace_rank_3");
  EXPECT_EQ(dumps[0].note, "");
  ASSERT_GT(dumps[0].bytes.size(), 2u);
  EXPECT_EQ(uint8_t(dumps[0].bytes[0]), 0x80);  // a pickle

  // Kept on the head as torch's tools expect them: one file per rank, under its own name.
  auto kept = dumps;
  keep_flight_recorder_dumps(kept, dir_ + "/collected");
  EXPECT_EQ(kept[0].file, dir_ + "/collected/nccl_trace_rank_3");
  EXPECT_EQ(kept[0].bytes, "");
  std::ifstream in(kept[0].file, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), dumps[0].bytes);
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/collected").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(RankLibrariesTest, ADumpThatIsALinkOrAnotherUsersFileIsLeftAloneAndSaidSo) {
  const std::string ras = "127.0.0.1:" + std::to_string(find_free_tcp_port());
  std::ofstream(dir_ + "/secret") << "not the rank's";
  std::filesystem::create_symlink(dir_ + "/secret", dir_ + "/nccl_trace_rank_4");
  std::ofstream(dir_ + "/nccl_trace_rank_5") << "planted";
  const bool root = geteuid() == 0;
  if (root) {
    ASSERT_EQ(chown((dir_ + "/nccl_trace_rank_5").c_str(), 65534, 65534), 0);
  }
  // No pipe: the dumps already there are what is collected.
  const std::vector<std::string> env = {"WORLD_SIZE=8", "NCCL_RAS_ADDR=" + ras, "TORCH_NCCL_TRACE_BUFFER_SIZE=2000",
                                        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=" + dir_ + "/nccl_trace_rank_"};
  auto with_rank = [&](int r) {
    auto e = env;
    e.push_back("RANK=" + std::to_string(r));
    return e;
  };
  PythonRank four(dir_ + "/libgloo.so.0", with_rank(4)), five(dir_ + "/libgloo.so.0", with_rank(5));
  const auto dumps = RankLibraries({{4, four.pid}, {5, five.pid}}, milliseconds(1000)).flight_recorder_dumps();
  ASSERT_EQ(dumps.size(), 2u);
  EXPECT_EQ(dumps[0].bytes, "");
  EXPECT_NE(dumps[0].note.find("no dump at " + dir_ + "/nccl_trace_rank_4"), std::string::npos) << dumps[0].note;
  if (root) {
    EXPECT_EQ(dumps[1].bytes, "");
    EXPECT_NE(dumps[1].note.find("belongs to another user"), std::string::npos) << dumps[1].note;
  }
}

TEST_F(RankLibrariesTest, DumpsAreNotWrittenIntoALinkedDirectory) {
  std::filesystem::create_directories(dir_ + "/elsewhere");
  std::filesystem::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/linked");
  std::vector<FlightRecorderDump> dumps(1);
  dumps[0].rank = 2;
  dumps[0].source = "/tmp/nccl_trace_rank_2";
  dumps[0].bytes = "dump";
  keep_flight_recorder_dumps(dumps, dir_ + "/linked");
  EXPECT_EQ(dumps[0].file, "");
  EXPECT_NE(dumps[0].note.find("not a directory of this user's"), std::string::npos) << dumps[0].note;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/elsewhere/nccl_trace_rank_2"));
}

}  // namespace
}  // namespace muster
