// Benchmark (not a test): `muster stacks` at 512 ranks and beyond, where the test cluster has
// not the processes, measured at the head with in-process fake agents
// (tests/fakes/fake_agent_transport.h: the real frame protocol over an in-memory channel).
// Each fake node holds 8 ranks and answers the head's "stacks" ask with what an agent of 8
// torch ranks sends: their stacks merged, each rank with 8 threads of 20-30 frames, one rank
// of the job asleep outside the all-reduce. The agents' own reading is not in these figures
// (stacks_bench measures it on real ranks: 0.3-0.4 s for a node of 8 ranks). What is:
// the client's request through the job's socket, the head's ask to every node, the merge of
// their answers, the judge, the report's JSON back to the client and its text.
// Usage: build/tests/bench/stacks_head_bench [RANKS...]   (default 64 512 4096)
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/stack_report_text.h"
#include "launcher/cluster/rank_plan.h"
#include "launcher/job/control_socket.h"
#include "launcher/job/session_job.h"
#include "launcher/local/stack_tree.h"
#include "launcher/remote/session.h"
#include "tests/fakes/fake_agent_transport.h"

using namespace muster;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRanksPerNode = 8;
constexpr int kOddRank = 5;
constexpr int kRequests = 5;

struct Discard : JobOutput {
  void line(int, OutputStream, std::string_view) override {}
  void flush() override {}
};

// A torch rank's threads as an agent reads them: the main thread in the all-reduce (or, for
// the odd rank, asleep in its data loader), and seven helper threads of torch and Gloo.
ProcessStacks torch_rank(int rank) {
  ProcessStacks p;
  std::vector<std::string> main = {"_start", "__libc_start_main", "main", "Py_BytesMain", "pymain_run_python",
                                   "_PyRun_AnyFileObject", "<module> (/home/me/train.py:120)",
                                   "train (/home/me/train.py:88)"};
  if (rank == kOddRank) {
    main.insert(main.end(), {"load_batch (/home/me/data.py:41)", "clock_nanosleep"});
  } else {
    main.insert(main.end(), {"step (/home/me/train.py:61)",
                             "wrapper (/usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py:47)",
                             "all_reduce (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1536)",
                             "c10d::ProcessGroupGloo::AsyncWork::wait", "std::condition_variable::wait",
                             "__futex_abstimed_wait_common"});
  }
  p.threads.push_back({1000, main});
  for (int t = 1; t < 8; ++t) {
    std::vector<std::string> helper = {"clone3", "start_thread", "execute_native_thread_routine"};
    for (int f = 0; f < 15 + t; ++f) helper.push_back(fmt::format("gloo::transport::tcp::Loop::run_{}", f % 4));
    helper.push_back(t % 2 ? "epoll_wait" : "__futex_abstimed_wait_common");
    p.threads.push_back({1000 + t, helper});
  }
  return p;
}

std::string node_answer(int node) {
  std::vector<std::pair<int, ProcessStacks>> ranks;
  for (int r = node * kRanksPerNode; r < (node + 1) * kRanksPerNode; ++r) ranks.emplace_back(r, torch_rank(r));
  return to_json(merge_rank_stacks(ranks));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One size, in this (child) process; prints its row.
int measure(int ranks) {
  const int nodes = ranks / kRanksPerNode;
  auto transport = std::make_shared<testing::FakeAgentTransport>();
  ClusterSpec cluster;
  cluster.source = "bench";
  size_t answer_bytes = 0;
  for (int i = 0; i < nodes; ++i) {
    auto& node = transport->nodes[fmt::format("a{}", i)];
    node.gives_wait_fd = true;
    node.ranks_wait_for_stop = true;
    const std::string stacks = node_answer(i);
    answer_bytes += stacks.size();
    node.answer = [stacks](const std::string& op) -> std::string {
      if (op == "stacks") return stacks;
      if (op == "ports") return R"({"ports":[29500,29501]})";
      return "[]";
    };
    cluster.nodes.push_back(NodeSpec{fmt::format("n{}", i), fmt::format("a{}", i), {kRanksPerNode}, {}, {}, {}});
  }
  auto session = ClusterSession::open(transport, cluster, SessionOptions{}, {});
  RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
  LaunchRequest request;
  request.argv = {"python3", "train.py"};
  request.job.job_id = fmt::format("5ac{:x}", ranks);  // job ids are hex
  int stop[2];
  if (pipe2(stop, O_NONBLOCK) != 0) return 1;  // as ShutdownSignals' pipe: read until empty
  Discard output;
  JobResult result;
  std::thread job([&] { result = run_over_session(*session, plan, request, TeardownPolicy{}, output, {stop[0]}); });

  std::vector<double> seconds;
  std::string failed;
  size_t report_lines = 0;
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (seconds.size() < kRequests && Clock::now() < give_up) {
    try {
      const auto start = Clock::now();
      const StackReport report = stack_report_from_json(ask_job_for_stacks(request.job.job_id, std::chrono::seconds(30)));
      const std::string text = cli::stack_report_text(report);
      seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      report_lines = size_t(std::count(text.begin(), text.end(), '\n'));
      failed = text.find(fmt::format("rank {} (n0) is not in all_reduce", kOddRank)) == std::string::npos
                   ? "the odd rank was not named"
                   : "";
    } catch (const std::exception& e) {  // the job's socket is not there yet
      failed = e.what();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  const char sigint = char(SIGINT);
  if (write(stop[1], &sigint, 1) != 1) return 1;
  job.join();
  if (seconds.size() < kRequests) failed = "fewer answers than asked: " + failed;
  std::printf("%6d %6d %12.1f %10.3f %10.3f %8zu %s\n", ranks, nodes, double(answer_bytes) / nodes / 1024,
              seconds.empty() ? 0.0 : median(seconds), seconds.empty() ? 0.0 : *std::max_element(seconds.begin(), seconds.end()),
              report_lines, failed.empty() ? "odd rank named" : failed.c_str());
  std::fflush(stdout);
  return failed.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {64, 512, 4096};
  // The jobs' sockets in a directory of this run's own.
  char dir[] = "/tmp/muster-stacks-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("XDG_RUNTIME_DIR", dir, 1);
  std::printf("%6s %6s %12s %10s %10s %8s\n", "ranks", "nodes", "KiB/node", "median s", "max s", "lines");
  std::fflush(stdout);
  int status = 0;
  for (int ranks : sizes) {
    const pid_t child = fork();
    if (child == 0) _exit(measure(ranks));
    int child_status = 0;
    waitpid(child, &child_status, 0);
    if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) status = 1;
  }
  std::filesystem::remove_all(dir);
  return status;
}
