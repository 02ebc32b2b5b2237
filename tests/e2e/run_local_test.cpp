// `muster run` on this machine with real processes, signals and pipes.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "probes/free_port.h"
#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"

namespace muster::testing {
namespace {

std::vector<std::string> lines_starting(const std::vector<std::string>& lines,
                                        const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& l : lines)
    if (l.rfind(prefix, 0) == 0) out.push_back(l);
  return out;
}

std::set<pid_t> pids_in_files(const TempDir& dir, const std::string& stem, int count) {
  std::set<pid_t> pids;
  for (int i = 0; i < count; ++i) {
    std::string text = dir.read(stem + std::to_string(i));
    if (!text.empty()) pids.insert(pid_t(std::stol(text)));
  }
  return pids;
}

TEST(RunLocal, EveryRankGetsItsOwnEnvironment) {
  auto r = run_muster({"run", "-n", "4", "--tag", "none", "-x", "EXTRA=a b;$(x)", "--", "sh", "-c",
                       "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK "
                       "$OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_SIZE $OMPI_COMM_WORLD_LOCAL_RANK "
                       "$OMPI_COMM_WORLD_LOCAL_SIZE $OMPI_COMM_WORLD_NODE_RANK $OMP_NUM_THREADS "
                       "$MASTER_ADDR $MASTER_PORT $JAX_COORDINATOR_ADDRESS $MUSTER_JOB_ID "
                       "\"[$EXTRA]\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 4u) << r.out;
  std::set<std::string> ports, job_ids, ranks;
  for (const auto& line : lines) {
    std::istringstream in(line);
    std::string rank, local, world, local_world, group, ompi_rank, ompi_size, ompi_local,
        ompi_local_size, ompi_node, omp, addr, port, jax, job, extra;
    in >> rank >> local >> world >> local_world >> group >> ompi_rank >> ompi_size >> ompi_local >>
        ompi_local_size >> ompi_node >> omp >> addr >> port >> jax >> job;
    std::getline(in, extra);
    EXPECT_EQ(local, rank);  // one node: local rank is the rank
    EXPECT_EQ(world, "4");
    EXPECT_EQ(local_world, "4");
    EXPECT_EQ(group, "0");
    EXPECT_EQ(ompi_rank, rank);
    EXPECT_EQ(ompi_size, "4");
    EXPECT_EQ(ompi_local, rank);
    EXPECT_EQ(ompi_local_size, "4");
    EXPECT_EQ(ompi_node, rank);  // its rank among the node's processes, as mpirun sets it
    EXPECT_EQ(omp, "1");
    EXPECT_EQ(addr, "127.0.0.1");
    EXPECT_GT(std::stoi(port), 0);
    EXPECT_NE(jax, "127.0.0.1:" + port);  // its own port
    EXPECT_EQ(jax.rfind("127.0.0.1:", 0), 0u);
    EXPECT_EQ(job.size(), 16u);
    EXPECT_EQ(extra, " [a b;$(x)]");  // verbatim, nothing expanded
    ranks.insert(rank);
    ports.insert(port);
    job_ids.insert(job);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(ports.size(), 1u);
  EXPECT_EQ(job_ids.size(), 1u);
}

TEST(RunLocal, ClusterFileEnvAndWorkdirReachTheRanks) {
  TempDir dir;
  dir.write("cluster.yaml", "launch:\n  workdir: " + dir.path() +
                                "\n  env:\n    FROM_FILE: yes please\n"
                                "nodes:\n  - host: localhost\n    slots: 2\n");
  auto r = run_muster({"run", "-f", dir.file("cluster.yaml"), "--", "sh", "-c",
                       "echo \"$FROM_FILE\" $(pwd)"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = r.out_lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[0] yes please " + dir.path(),
                                             "[1] yes please " + dir.path()}));
}

// --chdir starts every rank there, a relative one taken from where muster was started, and
// wins over the cluster file's launch.chdir.
TEST(RunLocal, ChdirStartsEveryRankThereRelativeToTheCaller) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("sub"));
  dir.write("cluster.yaml", "launch:\n  chdir: /\nnodes:\n  - host: localhost\n    slots: 2\n");
  auto r = run_command({"sh", "-c", "cd \"$1\" && exec \"$2\" run -f cluster.yaml --chdir sub -- pwd", "sh",
                        dir.path(), muster_binary()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = r.out_lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[0] " + dir.file("sub"), "[1] " + dir.file("sub")}));
}

// Latin-1 bytes (real file names have them) in an argument and an exported value reach every
// rank as they are, and their output comes back as it was printed.
TEST(RunLocal, BytesThatAreNotUtf8ReachTheRanksAsTheyAre) {
  auto r = run_muster({"run", "-H", "localhost:2", "-x", "LATIN=caf\xe9", "--", "sh", "-c",
                       "printf '<%s|%s>\\n' \"$1\" \"$LATIN\"", "sh", "\xe9t\xe9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = r.out_lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[0] <\xe9t\xe9|caf\xe9>", "[1] <\xe9t\xe9|caf\xe9>"}));
}

TEST(RunLocal, TagsPrefixEveryLineAndStderrStaysStderr) {
  auto r = run_muster({"run", "-n", "2", "--tag", "host-rank", "--", "sh", "-c",
                       "echo out; echo err >&2; printf 'no newline'"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  const std::string host = name;
  auto out = r.out_lines();
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[" + host + ":0] no newline", "[" + host + ":0] out",
                                           "[" + host + ":1] no newline", "[" + host + ":1] out"}));
  auto err = lines_starting(r.err_lines(), "[");
  std::sort(err.begin(), err.end());
  EXPECT_EQ(err, (std::vector<std::string>{"[" + host + ":0] err", "[" + host + ":1] err"}));
}

TEST(RunLocal, FourRanksOfAHundredThousandLinesLoseCutOrInterleaveNothing) {
  // Every 997th line is 20000 characters long: longer than a pipe's atomic write, so a
  // launcher that forwarded bytes instead of lines would cut it.
  const std::string program =
      "BEGIN { pad = \"x\"; while (length(pad) < 20000) pad = pad pad;"
      " pad = substr(pad, 1, 20000);"
      " for (i = 0; i < 100000; i++) {"
      "   if (i % 997 == 0) printf \"rank %s line %d %s\\n\", ENVIRON[\"RANK\"], i, pad;"
      "   else printf \"rank %s line %d end\\n\", ENVIRON[\"RANK\"], i } }";
  auto r = run_muster({"run", "-n", "4", "--", "awk", program});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<int, int> next_line;  // rank -> next expected line number
  size_t count = 0;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    ++count;
    int tag = -1, rank = -1, number = -1;
    char tail[16] = {};
    ASSERT_EQ(std::sscanf(line.c_str(), "[%d] rank %d line %d %15s", &tag, &rank, &number, tail), 4)
        << line.substr(0, 200);
    ASSERT_EQ(tag, rank) << line.substr(0, 200);
    ASSERT_EQ(number, next_line[rank]) << "rank " << rank << " lost or reordered a line";
    ++next_line[rank];
    if (number % 997 == 0)
      ASSERT_EQ(line.size(), line.find("line ") + 5 + std::to_string(number).size() + 1 + 20000);
    else
      ASSERT_TRUE(line.ends_with(" end")) << line;
  }
  EXPECT_EQ(count, 400000u);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(next_line[rank], 100000) << rank;
}

TEST(RunLocal, AFailingRankTearsDownTheOthersAndSetsTheStatus) {
  TempDir dir;
  auto r = run_muster({"run", "-n", "4", "--grace", "1", "--", "sh", "-c",
                       "echo $$ > " + dir.path() + "/pid.$RANK; "
                       "if [ $RANK = 2 ]; then " + once_all_pids_written(dir.path(), 4) + "exit 7; fi; "
                       "exec sleep 600"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("muster: rank 2 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") exited with status 7; stopped 3 other ranks"), std::string::npos) << r.err;
  auto pids = pids_in_files(dir, "pid.", 4);
  EXPECT_EQ(pids.size(), 4u);
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << pid;
}

TEST(RunLocal, ARankKilledBySignalGives128PlusTheSignal) {
  auto r = run_muster({"run", "-n", "2", "--", "sh", "-c",
                       "if [ $RANK = 1 ]; then kill -SEGV $$; fi; sleep 600"});
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV) << r.err;
  EXPECT_NE(r.err.find("was killed by SIGSEGV (signal 11)"), std::string::npos) << r.err;
}

TEST(RunLocal, SigintIsForwardedAsTeardownAndNothingSurvives) {
  TempDir dir;
  RunningCommand muster({muster_binary(), "run", "-n", "3", "--grace", "5", "--", "sh", "-c",
                         "trap 'echo got-term; exit 0' TERM; echo $$ > " + dir.path() +
                             "/pid.$RANK; while :; do sleep 0.05; done"});
  ASSERT_TRUE(wait_until([&] { return pids_in_files(dir, "pid.", 3).size() == 3; }));
  muster.signal(SIGINT);
  auto r = muster.wait();
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("interrupted by SIGINT; stopped 3 ranks"), std::string::npos) << r.err;
  EXPECT_EQ(lines_starting(r.out_lines(), "[").size(), 3u) << r.out;  // each trapped SIGTERM
  for (const auto& line : r.out_lines()) EXPECT_TRUE(line.ends_with("got-term")) << line;
  for (pid_t pid : pids_in_files(dir, "pid.", 3)) EXPECT_FALSE(process_alive(pid));
}

TEST(RunLocal, AGrandchildIgnoringSigtermDiesWithTheJob) {
  TempDir dir;
  // Each rank leaves a grandchild that ignores SIGTERM (as a data-loader worker might)
  // and then exits 0; one rank also fails so that teardown starts while they run.
  auto r = run_muster({"run", "-n", "2", "--grace", "1", "--", "sh", "-c",
                       "(trap '' TERM; exec sleep 600) & echo $! > " + dir.path() +
                           "/grandchild.$RANK; sleep 0.3; exit $RANK"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto pids = pids_in_files(dir, "grandchild.", 2);
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << "grandchild " << pid << " survived";
}

TEST(RunLocal, ChildrenLeftBehindBySuccessfulRanksAreStoppedToo) {
  TempDir dir;
  auto r = run_muster({"run", "-n", "2", "--grace", "1", "--", "sh", "-c",
                       "sleep 600 & echo $! > " + dir.path() + "/left.$RANK; exit 0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (pid_t pid : pids_in_files(dir, "left.", 2)) EXPECT_FALSE(process_alive(pid));
}

TEST(RunLocal, AProcessThatLeftItsGroupIsFoundByJobId) {
  TempDir dir;
  auto r = run_muster({"run", "-n", "1", "--grace", "1", "--", "sh", "-c",
                       "setsid sleep 600 & echo $! > " + dir.path() + "/escaped.0; sleep 0.3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto pids = pids_in_files(dir, "escaped.", 1);
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_FALSE(process_alive(*pids.begin()));
  EXPECT_NE(r.err.find("found 1 process of this job outside its ranks' process groups"),
            std::string::npos) << r.err;
}

// muster finds escaped processes among its descendants (it is a child subreaper), so one
// that escaped from an escaped process, two sessions away from any rank, is found as well.
TEST(RunLocal, AProcessThatEscapedFromAnEscapedOneIsFoundToo) {
  TempDir dir;
  auto r = run_muster({"run", "-n", "1", "--grace", "1", "--", "sh", "-c",
                       "setsid sh -c 'setsid sleep 600 & echo $! > " + dir.path() +
                           "/escaped.1; sleep 600' & echo $! > " + dir.path() + "/escaped.0; sleep 0.3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto pids = pids_in_files(dir, "escaped.", 2);
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << "escaped process " << pid << " survived";
  // The escaped shell, the sleep it waits for, and the sleep that left it.
  EXPECT_NE(r.err.find("found 3 processes of this job outside its ranks' process groups"),
            std::string::npos) << r.err;
}

TEST(RunLocal, TwoHundredMegabytesOfProgressBarsPassThroughInBoundedMemory) {
  // A progress bar redraws itself with '\r' and never ends a line: 2 million redraws of 100
  // bytes. Each one comes through as it is drawn, and muster's memory stays small.
  const std::string bar = "[" + std::string(93, '#') + "] 42%";  // 99 bytes, and the '\r'
  const std::string script = std::string(muster_binary()) + " run -n 1 -- sh -c \"yes '" + bar +
                             "' | tr '\\n' '\\r' | head -c 200000000\" | wc -l";
  auto r = run_command({"sh", "-c", script}, {}, std::chrono::seconds(240));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "2000000\n");
  EXPECT_LT(r.max_rss_kib, 64 * 1024) << "muster's resident memory, KiB";
}

TEST(RunLocal, TimeoutStopsTheJobWith124) {
  auto r = run_muster({"run", "-n", "2", "--timeout", "0.5", "--grace", "1", "--", "sleep", "600"});
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_NE(r.err.find("ran past --timeout 0.5s; stopped 2 ranks"), std::string::npos) << r.err;
}

// Ranks on this machine alone are read by muster itself, as the agents read theirs: at the
// timeout, before the teardown, the rank not where the others wait is named.
// Python ranks that print "in place", wait `seconds` (rank 2 elsewhere than the others), and
// print "done".
std::string python_ranks_waiting(const TempDir& dir, int seconds) {
  const std::string script = dir.file("waits.py");
  std::ofstream(script) << "import os, time\n"
                           "def all_reduce():\n"
                           "    time.sleep(" << seconds << ")\n"
                           "def asleep():\n"
                           "    time.sleep(" << seconds << ")\n"
                           "print('in place', flush=True)\n"
                           "(asleep if os.environ['RANK'] == '2' else all_reduce)()\n"
                           "print('done', flush=True)\n";
  return script;
}

std::string this_machine_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(RunLocal, AtTheTimeoutTheRankNotWhereTheOthersWaitIsNamed) {
  TempDir dir;
  const std::string script = python_ranks_waiting(dir, 1000);
  auto r = run_muster({"run", "-n", "4", "--timeout", "3", "--grace", "1", "--", "/usr/bin/python3", script});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("read at the timeout"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 2 (" + this_machine_name() + ") is not in all_reduce (" + script + ":3), where the 3 "
                       "other ranks wait: it is in "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("asleep (" + script + ":5)"), std::string::npos) << r.err;
  EXPECT_LT(r.err.find("read at the timeout"), r.err.find("the job ran past --timeout")) << r.err;
}

// --stall reads them once when no rank has written a line for so long, and the job goes on.
TEST(RunLocal, AStallReadsTheStacksOnceAndTheJobGoesOn) {
  auto r = run_muster({"run", "-n", "2", "--stall", "1", "--", "sh", "-c", "echo started; sleep 3; echo done"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "when no rank had written a line for the --stall time"), 1u) << r.err;
  EXPECT_EQ(count_of(r.out, "done"), 2u) << r.out;
}

// `muster stacks` reaches a job on this machine alone as it reaches one across nodes, and
// the job runs on to its end. (A runtime directory of the test's own: only this job in it.)
TEST(RunLocal, MusterStacksReadsAJobOnThisMachineAndItRunsOn) {
  TempDir dir, runtime;
  const std::string script = python_ranks_waiting(dir, 6);
  const std::vector<std::string> env = {"XDG_RUNTIME_DIR=" + runtime.path()};
  RunningCommand job({muster_binary(), "run", "-n", "3", "--", "/usr/bin/python3", script}, env);
  ASSERT_NE(job.read_out_until("in place", std::chrono::seconds(30)).find("in place"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the others print theirs
  auto stacks = run_muster({"stacks"}, env);
  EXPECT_EQ(stacks.exit_code, 0) << stacks.err;
  EXPECT_NE(stacks.out.find("rank 2 (" + this_machine_name() + ") is not in all_reduce (" + script + ":3)"),
            std::string::npos)
      << stacks.out << stacks.err;
  auto end = job.wait(std::chrono::seconds(60));
  EXPECT_EQ(end.exit_code, 0) << end.err;
  EXPECT_EQ(count_of(end.out, "done"), 3u) << end.out;
}

// On this machine alone the head asks the ranks' libraries itself: NCCL's RAS service (at the
// ranks' NCCL_RAS_ADDR, a port of the test's own) and each rank's flight recorder, whose
// dumps land in the head's directory for the job.
TEST(RunLocal, AtTheTimeoutNcclsRasServiceIsAskedAndTheFlightRecorderDumpsGathered) {
  TempDir dir;
  dir.write("libnccl.so.2.24.3", std::string(8192, '\0'));
  auto r = run_muster({"run", "-n", "2", "--timeout", "4", "--grace", "1", "-x",
                       "NCCL_RAS_ADDR=127.0.0.1:" + std::to_string(find_free_tcp_port()), "-x",
                       "TORCH_NCCL_TRACE_BUFFER_SIZE=2000", "-x", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=" + dir.file("pipe_"),
                       "-x", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=" + dir.file("nccl_trace_rank_"), "--", "/usr/bin/python3",
                       source_path("/tests/e2e/stacks/nccl_job.py"), dir.file("libnccl.so.2.24.3"), "1"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("NCCL's RAS service (asked on " + this_machine_name() + ") reports:\n"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Rank 1 has launched up to operation 11"), std::string::npos) << r.err;
  const NamedDirectory named(r.err, "torch's flight recorder: the dumps of ranks 0-1 collected in ");
  const std::string& collected = named.path();
  ASSERT_NE(collected, "") << r.err;
  for (int rank : {0, 1})
    EXPECT_TRUE(std::filesystem::is_regular_file(collected + "nccl_trace_rank_" + std::to_string(rank))) << collected;
}

TEST(RunLocal, BadInputStartsNothingAndExits2) {
  TempDir dir;
  dir.write("bad.yaml", "nodes:\n  - host: localhost\n    slot: 2\n  - host: localhost\n");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"run", "-f", dir.file("bad.yaml"), "--", "touch", dir.file("started")},
       "muster: error: " + dir.file("bad.yaml") +
           ":3:5: unknown key 'slot' in a node entry, did you mean 'slots'?"},
      {{"run", "-H", "localhost:2", "-n", "3", "--", "touch", dir.file("started")},
       "muster: error: -n 3 asks for more ranks than the 2 slots of -H"},
      {{"run", "-x", "UNSET_VAR_FOR_TEST", "-n", "1", "--", "touch", dir.file("started")},
       "muster: error: -x UNSET_VAR_FOR_TEST: UNSET_VAR_FOR_TEST is not set"},
      {{"run", "--tag", "sideways", "--", "true"}, "muster: error: --tag: sideways not in"},
      {{"run", "-n", "2"}, "muster: error: no command to run: put it after '--'"},
      {{"run", "-n", "0", "--", "touch", dir.file("started")},
       "muster: error: --np: 0 is too small: it must be at least 1; see 'muster run --help'"},
      {{"run", "--grace", "soon", "--", "touch", dir.file("started")},
       "muster: error: --grace: 'soon' is not a number"},
      // A deadline that far would overflow the clock: a week is the longest wait.
      {{"run", "--timeout", "1e300", "--", "touch", dir.file("started")},
       "muster: error: --timeout: 1e300 is out of range: it must be from 0 to 604800"},
      {{"run", "--heartbeat-timeout", "inf", "--", "touch", dir.file("started")},
       "muster: error: --heartbeat-timeout: 'inf' is not a number"},
      {{"rnu", "-n", "2", "--", "touch", dir.file("started")},
       "muster: error: 'rnu' is not a muster command, did you mean 'run'?"},
      {{"frobnicate", "-n", "2", "--", "touch", dir.file("started")},
       "muster: error: 'frobnicate' is not a muster command; the commands are doctor, health, run,"},
      {{"run", "--tga", "none", "-n", "2", "--", "touch", dir.file("started")},
       "muster: error: unknown option '--tga' for 'muster run', did you mean '--tag'?"},
      // mpirun's habit: the command straight after the flags, its own options and all.
      {{"run", "-n", "2", "--tag", "none", "touch", "-c", dir.file("started")},
       "muster: error: put the command after --: muster run -n 2 --tag none -- touch -c " + dir.file("started")},
      {{"run", "-n", "2", "hostname", "-f"}, "muster: error: put the command after --: muster run -n 2 -- hostname -f"},
      {{"run", "--bogus", "touch", "-c", dir.file("started")}, "muster: error: unknown option '--bogus' for 'muster run'"},
      {{"run", "-np", "2", "--", "touch", dir.file("started")},
       "muster: error: '-np' is mpirun's spelling; muster's is '--np' or '-n', as in 'muster run --np 4'"},
      {{"run", "-n", "2", "-n", "3", "--", "touch", dir.file("started")},
       "muster: error: -n/--np is given more than once; give it once"},
      {{"plan", "-n", "2", "extra", "two words"},
       "muster: error: 'muster plan' takes no argument 'extra two words'; see 'muster plan --help'"},
      {{"hostlist"}, "muster: error: 'muster hostlist' needs host lists"},
      {{"run", "-x"}, "muster: error: -x/--export needs a value after it; see 'muster run --help'"},
      {{"exec", "--fold", "-N", "--", "touch", dir.file("started")},
       "muster: error: --fold and --no-prefix cannot be used together"},
      {{"ping", "--count", "1.5"}, "muster: error: --count: '1.5' is not a whole number; see 'muster ping --help'"},
      {{"-n", "2", "run", "--", "touch", dir.file("started")},
       "muster: error: '-n': the command comes first, as in 'muster run -n 2 -- CMD'"},
  };
  for (const auto& c : cases) {
    auto r = run_muster(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  // A command that is not there is a shell's 127; a file that is not a program its 126.
  dir.write("not-a-program.sh", "touch started\n");
  struct Refused {
    std::string command;
    int exit_code;
    std::string message;
  } refused[] = {
      {"no-such-command-xyz", 127, "muster: error: 'no-such-command-xyz': command not found in PATH"},
      {dir.file("nothing-here"), 127, "muster: error: '" + dir.file("nothing-here") + "': no such file"},
      {dir.file("not-a-program.sh"), 126,
       "muster: error: '" + dir.file("not-a-program.sh") + "': is not executable (mode 0644)"},
      {dir.path(), 126, "muster: error: '" + dir.path() + "': is a directory, not a program"},
  };
  for (const auto& c : refused) {
    auto r = run_muster({"run", "-n", "2", "--", c.command});
    EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  // A script whose interpreter is not there: 126 and "bad interpreter", as bash says.
  dir.write("old-script", "#!/no/such/python4\n");
  std::filesystem::permissions(dir.file("old-script"), std::filesystem::perms::owner_all);
  auto interpreter = run_muster({"run", "-n", "2", "--", dir.file("old-script")});
  EXPECT_EQ(interpreter.exit_code, 126) << interpreter.err;
  EXPECT_NE(interpreter.err.find("its interpreter (#!) is not there"), std::string::npos) << interpreter.err;
  // A node that cannot be reached is ssh's and pdsh's 255, named with its cause.
  auto unreachable = run_muster({"run", "-H", "elsewhere-host.invalid:2", "--", "touch",
                                 dir.file("started")});
  EXPECT_EQ(unreachable.exit_code, 255);
  EXPECT_NE(unreachable.err.find("muster: error: elsewhere-host.invalid: name resolution: "),
            std::string::npos) << unreachable.err;
  // Both problems of bad.yaml in one run.
  auto r = run_muster({"run", "-f", dir.file("bad.yaml"), "--", "true"});
  EXPECT_NE(r.err.find(":4:11: host 'localhost' is listed twice"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("started")));
}

// localhost and 127.0.0.1 are one machine: run refuses to start its ranks as two nodes
// (each local rank 0, on the same GPUs), naming both, and starts nothing; exec runs a command
// once per entry, as pdsh does, and smoke uses it to test two nodes on one machine.
TEST(RunLocal, AMachineListedTwiceUnderTwoNamesIsRefusedNamingBoth) {
  TempDir dir;
  auto r = run_muster({"run", "-H", "localhost,127.0.0.1", "--", "touch", dir.file("started")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("localhost and 127.0.0.1 are all this machine"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("list it once with its slots (-H localhost:2)"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("started")));
}

// With no cluster named, exec runs here as run does: a child of muster, not of sshd.
TEST(ExecLocal, WithNoClusterTheCommandRunsHereWithoutSsh) {
  auto r = run_muster({"exec", "--", "sh", "-c", "cat /proc/$PPID/comm; echo oops >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 1u) << r.out;
  EXPECT_EQ(lines[0].substr(lines[0].find("] ") + 2), "muster") << r.out;
  EXPECT_NE(r.err.find("] oops"), std::string::npos) << r.err;
  auto folded = run_muster({"exec", "-H", "localhost,127.0.0.1", "--fold", "--", "echo", "same"});
  EXPECT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_NE(folded.out.find("127.0.0.1,localhost (2)"), std::string::npos) << folded.out;
  // What a command leaves running stays, as after pdsh: exec is not a job's teardown.
  auto daemon = run_muster({"exec", "--", "sh", "-c", "setsid sleep 31.7 </dev/null >/dev/null 2>&1 &"});
  EXPECT_EQ(daemon.exit_code, 0) << daemon.err;
  std::vector<pid_t> left;
  EXPECT_TRUE(wait_until([&] { return (left = processes_running({"sleep", "31.7"})).size() == 1; },
                         std::chrono::seconds(10)));
  for (pid_t pid : left) kill(pid, SIGKILL);
  auto missing = run_muster({"exec", "--", "no-such-command-xyz"});
  EXPECT_EQ(missing.exit_code, 127) << missing.err;
  EXPECT_NE(missing.err.find("'no-such-command-xyz': command not found in PATH"), std::string::npos) << missing.err;
}

// With no cluster named, ping describes this machine, as doctor does, and the rendezvous run
// would use here; a node that cannot be reached is 255, as for exec and run.
TEST(PingLocal, WithNoClusterThisMachineIsReachedWithoutSsh) {
  auto r = run_muster({"ping"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("this machine: muster runs here, no SSH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MASTER_ADDR: 127.0.0.1"), std::string::npos) << r.out;
  auto unreachable = run_muster({"ping", "-H", "node[01-12].invalid"});
  EXPECT_EQ(unreachable.exit_code, 255) << unreachable.err;
  // Twelve columns come in two blocks, each within 80 columns.
  for (const auto& line : unreachable.out_lines()) {
    if (line.find("FAIL") != std::string::npos) continue;  // the reach lines say why in full
    EXPECT_LE(line.size(), 80u) << line;
  }
  EXPECT_NE(unreachable.out.find("  node12.invalid         ?         ?         ?"), std::string::npos)
      << unreachable.out;
  // Names longer than a column are never cut into one another: short labels and a legend.
  EXPECT_NE(unreachable.out.find("[11] = node12.invalid"), std::string::npos) << unreachable.out;
}

}  // namespace
}  // namespace muster::testing
