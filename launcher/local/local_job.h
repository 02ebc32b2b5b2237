// Running a node's ranks as local processes: output, failure, signals, timeout, and a
// teardown that leaves nothing behind. The local launcher and the per-node agent
// both run ranks through this.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/local/process_spawner.h"
#include "launcher/local/rank_service.h"
#include "launcher/local/stack_tree.h"
#include "topology/binding.h"
#include "topology/topology.h"

namespace muster {

using Milliseconds = std::chrono::milliseconds;

// A rank's binding as reported on its node: CPUs, NUMA node, GPU and the GPU's bus id.
struct RankBindingReport {
  RankBinding binding;
  std::string gpu_bus_id;  // empty without a GPU
};

// One rank to start on this node.
struct RankProcess {
  int rank = 0;
  ProcessSpec spec;
  RankBinding binding;  // what spec.cpus was chosen from, for --report-bindings
};

// The report of each of `ranks` on a node whose topology is `topology`.
std::vector<std::pair<int, RankBindingReport>> binding_reports(const std::vector<RankProcess>& ranks,
                                                               const Topology& topology);

// How long teardown waits at each step; every wait is bounded.
struct TeardownPolicy {
  Milliseconds grace{3000};                 // SIGTERM, then SIGKILL after this
  std::optional<Milliseconds> timeout;      // the whole job's limit
  // No rank wrote a line for this long: the head reads every rank's stacks once and the job
  // goes on (run --stall). Not sent to the nodes: the head alone watches for it.
  std::optional<Milliseconds> stall;
  // The ranks are this machine's alone (run without a cluster): the job itself reads their
  // stacks for the output at the timeout, before the teardown, and once on a stall. Across
  // nodes the head asks the agents instead.
  bool read_stacks = false;
  std::string dumps_dir;  // where those readings put torch's flight-recorder dumps
  Milliseconds kill_wait{2000};             // after SIGKILL: give up and name survivors
  // A rank that ends with this exit code failed only because a peer did not answer in time.
  // Rather than stop the others at once (mpirun's way, and what any other failure does),
  // teardown waits up to `settle` for them to end on their own: the smoke test's way to
  // let every rank still waiting say so, so that the one still silent is the one that hung.
  std::optional<int> gave_up_exit_code;
  Milliseconds settle{0};
  // False for commands run once per node (exec, like pdsh): each ends in its own time and a
  // failure stops no other. Teardown still follows a signal to muster or the timeout.
  bool failure_stops_the_others = true;
  // False for exec too: what a command started and left running (a daemon, `cmd &`) stays,
  // as it does after pdsh or ssh. A job's ranks leave nothing behind.
  bool stop_what_ranks_leave = true;
};

// True when `status` is the policy's gave_up_exit_code: a failure that waits out the settle.
bool rank_gave_up_on_a_peer(const TeardownPolicy& policy, const ExitStatus& status);

enum class OutputStream { Stdout, Stderr };


// Where ranks' output lines go; called from the launcher's single thread.
class JobOutput {
 public:
  virtual ~JobOutput() = default;
  // One complete line of a rank (without its '\n'); a partial last line arrives at the end.
  virtual void line(int rank, OutputStream stream, std::string_view text) = 0;
  // Everything delivered so far should be written out now.
  virtual void flush() = 0;
  // A rank's process started as `pid` (the agent reads its stacks when the head asks).
  virtual void rank_started(int rank, pid_t pid) { (void)rank; (void)pid; }
  // A rank's process ended (called as soon as it is reaped, before teardown finishes).
  virtual void rank_ended(int rank, const ExitStatus& status) { (void)rank; (void)status; }
  // Where a rank will run, before it starts (for --report-bindings).
  virtual void rank_bound(int rank, const RankBindingReport& binding) { (void)rank; (void)binding; }
  // Where the ranks were when their stacks were read (at the timeout, a stall, or asked).
  virtual void stacks(const StackReport& report) { (void)report; }
  // Something the launch found that does not stop it (a pair of nodes that cannot talk on
  // one network), before any rank starts.
  virtual void launch_warning(const std::string& text) { (void)text; }
};

// `muster stacks` asking a job whose ranks are all on this machine: the head's control
// socket, behind a seam so that the node's side needs nothing of the head's.
class StacksRequests {
 public:
  virtual ~StacksRequests() = default;
  // A client that asked since the last call, if any; called often, never waits.
  virtual std::optional<int> take() = 0;
  // Sends the report (its JSON) to `client` and closes it.
  virtual void answer(int client, const std::string& report_json) = 0;
};

// Why a job ended.
enum class JobEnd {
  Completed,    // every rank exited (all with status 0)
  RankFailed,   // a rank failed; the others were torn down
  StartFailed,  // a rank could not be started; the others were torn down
  Interrupted,  // muster received SIGINT, SIGTERM or SIGHUP
  TimedOut,     // the job ran past its timeout (--timeout)
  TimeLimit,    // the scheduler ended the job at its time limit (Slurm); see JobResult::notes
  NodeLost,     // a node fell silent or its connection dropped; the others were torn down
};

// One rank's end.
struct RankOutcome {
  int rank = 0;
  pid_t pid = -1;
  std::optional<ExitStatus> status;  // unset if it never started or could not be reaped
  bool stopped_by_teardown = false;  // it was still running when teardown began
};

// A process that survived SIGKILL and the wait after it.
struct StuckProcess {
  int rank = -1;  // -1 when it had left its rank's process group
  std::string description;
};

// Everything that happened to the job, for cli/ to report.
struct JobResult {
  JobEnd end = JobEnd::Completed;
  std::vector<RankOutcome> ranks;        // in the order given
  std::optional<int> first_failed_rank;  // the failure that started teardown
  std::string start_error;               // why a rank could not start (StartFailed)
  // For Interrupted; also a signal that came while another end stopped the job: the end
  // stays that one's, and no restart follows it.
  int received_signal = 0;
  std::vector<StuckProcess> stuck;
  int escaped_killed = 0;                // processes found by job id outside rank groups
  std::vector<std::string> notes;        // other things to report (a node lost, ...)
  // A rank that asked its MPI library to abort the job (MPI_Abort): what ended it.
  struct Abort {
    int rank = 0;
    int code = 1;
    std::string said;  // "rank 1 called MPI_Abort with code 7: ..."
  };
  std::optional<Abort> aborted;

  // The job's exit status: 0 when every rank exited 0; the code a rank gave MPI_Abort (as
  // mpirun's, modulo 256; 1 for a code of 0: an aborted job did not succeed); else the first failed rank's (128+N for signal N); 128+N when muster got signal N; 124 on a timeout or the scheduler's
  // time limit; 255 when a node
  // was lost (ssh's and pdsh's number for a node that cannot be reached).
  int exit_code() const;
};

// Starts every rank and supervises them until all have ended. Each of `interrupt_fds`
// yields a byte per stop request (a signal number; see ShutdownSignals). `job_markers` are
// the "NAME=VALUE" environment entries that identify this job's processes on this node,
// for finding the ones that left their rank's process group.
// `service`, when given, is served beside the ranks (PMI for their MPI library): a rank that
// asks it to abort ends the job with its words in the notes, and on a timeout the notes say
// what the ranks were waiting on in it.
// `requests`, when given (with policy.read_stacks), are `muster stacks` clients asking for
// the ranks' stacks while the job runs: each is answered and the job goes on.
JobResult run_local_job(ProcessSpawner& spawner, const std::vector<RankProcess>& ranks,
                        const TeardownPolicy& policy, JobOutput& output,
                        const std::vector<int>& interrupt_fds,
                        const std::vector<std::string>& job_markers, RankService* service = nullptr,
                        StacksRequests* requests = nullptr);

}  // namespace muster
