#include "launcher/local/local_job.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/local/line_buffer.h"

namespace muster {

std::vector<std::pair<int, RankBindingReport>> binding_reports(const std::vector<RankProcess>& ranks,
                                                               const Topology& topology) {
  std::vector<std::pair<int, RankBindingReport>> out;
  for (const auto& r : ranks) {
    RankBindingReport report{r.binding, ""};
    if (r.binding.gpu && size_t(*r.binding.gpu) < topology.gpus.size())
      report.gpu_bus_id = topology.gpus[size_t(*r.binding.gpu)].location.bus_id;
    out.emplace_back(r.rank, report);
  }
  return out;
}

bool rank_gave_up_on_a_peer(const TeardownPolicy& policy, const ExitStatus& status) {
  return policy.gave_up_exit_code && status.kind == ExitStatus::Kind::Exited &&
         status.code == *policy.gave_up_exit_code;
}

int JobResult::exit_code() const {
  switch (end) {
    case JobEnd::Completed: return 0;
    case JobEnd::TimedOut:
    case JobEnd::TimeLimit: return 124;  // timeout(1)'s convention
    case JobEnd::Interrupted: return 128 + received_signal;
    case JobEnd::NodeLost: return 255;
    case JobEnd::StartFailed:  // the rank's 126 or 127 when known, as a shell says them
    case JobEnd::RankFailed:
      if (aborted) return (aborted->code & 0xff) != 0 ? aborted->code & 0xff : 1;  // an abort is no success
      for (const auto& r : ranks)
        if (first_failed_rank && r.rank == *first_failed_rank && r.status)
          return r.status->shell_code();
      return end == JobEnd::StartFailed ? 127 : 1;
  }
  return 1;
}

namespace {

using Clock = std::chrono::steady_clock;

// One running rank and its two output pipes.
struct RankSlot {
  RankOutcome outcome;
  int fds[2] = {-1, -1};          // stdout, stderr
  LineBuffer buffers[2];
  bool running = false;
};

class LocalJob {
 public:
  LocalJob(ProcessSpawner& spawner, const TeardownPolicy& policy, JobOutput& output,
           std::vector<int> interrupt_fds, std::vector<std::string> job_markers, RankService* service,
           StacksRequests* requests)
      : spawner_(spawner), policy_(policy), output_(output),
        interrupt_fds_(std::move(interrupt_fds)), job_markers_(std::move(job_markers)), service_(service),
        requests_(policy.read_stacks ? requests : nullptr) {}

  JobResult run(const std::vector<RankProcess>& ranks) {
    try {
      start_ranks(ranks);
      supervise_until_ranks_end();
      if (policy_.stop_what_ranks_leave || tearing_down_) clear_leftover_processes();
      drain_and_close_output();
    } catch (...) {
      // An output sink that threw, memory that ran out: nothing of the job may outlive it.
      kill_everything_now();
      throw;
    }
    return std::move(result_);
  }

 private:
  void start_ranks(const std::vector<RankProcess>& ranks) {
    deadline_ = policy_.timeout ? std::optional(Clock::now() + *policy_.timeout) : std::nullopt;
    last_line_ = Clock::now();
    slots_.resize(ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) {
      slots_[i].outcome.rank = ranks[i].rank;
      if (tearing_down_) continue;  // a start already failed: start nothing more
      try {
        ProcessSpec spec = ranks[i].spec;
        if (service_) service_->prepare(ranks[i].rank, spec);
        struct Spawned {  // the rank's end of the service goes, however the spawn ends
          RankService* service;
          int rank;
          ~Spawned() {
            if (service) service->spawned(rank);
          }
        } spawned{service_, ranks[i].rank};
        SpawnedProcess p = spawner_.spawn(spec);
        slots_[i].outcome.pid = p.pid;
        slots_[i].fds[0] = p.stdout_fd;
        slots_[i].fds[1] = p.stderr_fd;
        slots_[i].running = true;
        output_.rank_started(ranks[i].rank, p.pid);
      } catch (const Error& e) {
        result_.start_error = e.what();
        result_.first_failed_rank = ranks[i].rank;
        // A shell's numbers: 126 for a file that cannot be executed, else 127.
        slots_[i].outcome.status =
            ExitStatus::exited(e.kind() == ErrorKind::CommandNotExecutable ? 126 : 127);
        output_.rank_ended(ranks[i].rank, *slots_[i].outcome.status);
        begin_teardown(JobEnd::StartFailed);
      }
    }
  }

  // The event loop: output, exits, signals to muster, the timeout and teardown deadlines.
  void supervise_until_ranks_end() {
    while (any_running()) {
      wait_for_events();
      read_interrupts();
      read_available_output();
      serve_ranks();
      record_exits();
      answer_stacks_requests();
      check_deadlines();
      output_.flush();
    }
  }

  // Ranks' leaders are gone; their groups may still hold children (a data loader, a
  // daemon). Nothing of the job may outlive muster: stop them, bounded by the policy.
  void clear_leftover_processes() {
    std::vector<pid_t> groups;
    for (const auto& s : slots_)
      if (s.outcome.pid > 0) groups.push_back(s.outcome.pid);
    auto leftovers = [&] {
      std::vector<std::pair<int, pid_t>> out;  // rank (-1: escaped), pid
      for (const auto& s : slots_)
        if (s.outcome.pid > 0)
          for (pid_t pid : spawner_.live_group_members(s.outcome.pid))
            out.emplace_back(s.outcome.rank, pid);
      if (!job_markers_.empty())
        for (pid_t pid : spawner_.escaped_job_processes(job_markers_, groups))
          out.emplace_back(-1, pid);
      return out;
    };
    auto remaining = leftovers();
    if (remaining.empty()) return;
    for (const auto& [rank, pid] : remaining)
      if (rank < 0) ++result_.escaped_killed;
    auto signal_all = [&](int sig) {
      for (pid_t g : groups) spawner_.signal_group(g, sig);
      for (const auto& [rank, pid] : remaining)
        if (rank < 0) spawner_.signal_process(pid, sig);
    };
    const auto start = Clock::now();
    const auto kill_at = tearing_down_ ? kill_at_ : start + policy_.grace;
    bool killed = sigkill_sent_;
    if (!killed) signal_all(SIGTERM);
    if (killed) signal_all(SIGKILL);
    auto give_up_at = std::max(kill_at, Clock::now()) + policy_.kill_wait;
    while (!remaining.empty() && Clock::now() < give_up_at) {
      wait_for_events(std::chrono::milliseconds(50));
      read_available_output();
      spawner_.reap();
      if (!killed && Clock::now() >= kill_at) {
        signal_all(SIGKILL);
        killed = true;
        give_up_at = Clock::now() + policy_.kill_wait;
      }
      remaining = leftovers();
    }
    for (const auto& [rank, pid] : remaining)
      result_.stuck.push_back({rank, spawner_.describe_process(pid)});
  }

  void drain_and_close_output() {
    read_available_output();
    for (auto& s : slots_) {
      size_t split = 0;
      for (int stream = 0; stream < 2; ++stream) {
        s.buffers[stream].finish([&](std::string_view line) {
          output_.line(s.outcome.rank, OutputStream(stream), line);
        });
        split += s.buffers[stream].split_lines();
        close_output(s, stream);
      }
      if (split > 0)
        result_.notes.push_back(fmt::format("rank {} printed {} line{} longer than {} MiB; each was "
                                            "passed on in pieces of that size", s.outcome.rank, split,
                                            split == 1 ? "" : "s", LineBuffer::kMaxLine >> 20));
    }
    output_.flush();
    for (auto& s : slots_) result_.ranks.push_back(s.outcome);
  }

  void close_output(RankSlot& s, int stream) {
    if (s.fds[stream] >= 0) close(s.fds[stream]);
    s.fds[stream] = -1;
  }

  // The way out when an exception unwinds through the job: every rank's group gets SIGKILL
  // at once (there is no loop left to wait out a grace period), and what can be reaped
  // within the kill wait is.
  void kill_everything_now() noexcept {
    try {
      for (auto& s : slots_) {
        if (s.outcome.pid > 0) spawner_.signal_group(s.outcome.pid, SIGKILL);
        for (int stream = 0; stream < 2; ++stream) close_output(s, stream);
      }
      const auto give_up = Clock::now() + policy_.kill_wait;
      while (any_running() && Clock::now() < give_up) {
        for (const ProcessExit& exit : spawner_.reap())
          for (auto& s : slots_)
            if (s.outcome.pid == exit.pid) s.running = false;
        if (any_running()) poll(nullptr, 0, 10);
      }
    } catch (...) {
      // Already on the way out with an exception: do what can be done, add nothing.
    }
  }

  bool any_running() const {
    return std::any_of(slots_.begin(), slots_.end(), [](const RankSlot& s) { return s.running; });
  }

  void wait_for_events(Milliseconds longest = Milliseconds(100)) {
    std::vector<pollfd> fds;
    for (int fd : interrupt_fds_) fds.push_back({fd, POLLIN, 0});
    if (spawner_.child_event_fd() >= 0) fds.push_back({spawner_.child_event_fd(), POLLIN, 0});
    for (const auto& s : slots_)
      for (int fd : s.fds)
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    if (service_)
      for (int fd : service_->descriptors()) fds.push_back({fd, POLLIN, 0});
    auto wait = longest;
    auto now = Clock::now();
    std::optional<Clock::time_point> next_step;
    if (tearing_down_) next_step = sigkill_sent_ ? give_up_at_ : kill_at_;
    for (auto at : {deadline_, next_step, tearing_down_ ? std::nullopt : settle_until_, stall_due()}) {
      if (at) wait = std::min(wait, std::chrono::duration_cast<Milliseconds>(*at - now) +
                                        Milliseconds(1));
    }
    poll(fds.data(), fds.size(), int(std::max<long>(0, wait.count())));
  }

  void read_interrupts() {
    for (int fd : interrupt_fds_) read_interrupts_from(fd);
  }

  void read_interrupts_from(int fd) {
    unsigned char signals[16];
    ssize_t n;
    while ((n = read(fd, signals, sizeof signals)) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if (!tearing_down_) {
          result_.received_signal = signals[i];
          begin_teardown(JobEnd::Interrupted);
        } else if (!result_.received_signal) {
          // Ctrl-C while a failure stops the job: the end stays the failure's, but the user
          // has said stop, so no restart follows it.
          result_.received_signal = signals[i];
        } else if (!sigkill_sent_) {
          send_sigkill();  // a second Ctrl-C means "now", as with torchrun
        }
      }
    }
  }

  void read_available_output() {
    char chunk[65536];
    for (auto& s : slots_) {
      for (int stream = 0; stream < 2; ++stream) {
        int& fd = s.fds[stream];
        // Bounded per call so that one chatty rank cannot starve the others' exits.
        for (int round = 0; fd >= 0 && round < 16; ++round) {
          ssize_t n = read(fd, chunk, sizeof chunk);
          if (n > 0) {
            s.buffers[stream].feed(std::string_view(chunk, size_t(n)), [&](std::string_view line) {
              last_line_ = Clock::now();
              output_.line(s.outcome.rank, OutputStream(stream), line);
            });
            continue;
          }
          if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            close(fd);
            fd = -1;
          }
          break;
        }
      }
    }
  }

  void record_exits() {
    // Every exit in the batch is recorded before teardown starts: a rank that was already
    // dead must not be reported as stopped by it. Within one batch the order is the
    // kernel's, not the order of death, so a rank killed by a signal is taken as the cause
    // over one that exited with an error (often a peer reacting to that death).
    const RankOutcome* first_failure = nullptr;
    bool only_gave_up = true;  // every failure in the batch was a rank giving up on a peer
    for (const ProcessExit& exit : spawner_.reap()) {
      for (auto& s : slots_) {
        if (s.outcome.pid != exit.pid || !s.running) continue;
        s.running = false;
        s.outcome.status = exit.status;
        output_.rank_ended(s.outcome.rank, exit.status);
        if (exit.status.success() || tearing_down_) continue;
        if (!first_failure || (exit.status.signal && !first_failure->status->signal))
          first_failure = &s.outcome;
        only_gave_up &= rank_gave_up_on_a_peer(policy_, exit.status);
      }
    }
    if (!first_failure) return;
    if (!result_.first_failed_rank) result_.first_failed_rank = first_failure->rank;
    result_.end = JobEnd::RankFailed;
    if (!policy_.failure_stops_the_others) return;
    if (!only_gave_up) begin_teardown(JobEnd::RankFailed);
    else if (!settle_until_) settle_until_ = Clock::now() + policy_.settle;
  }

  // What the ranks asked of the service: an abort ends the job at once, as mpirun and Hydra
  // end it, with the rank's code and words (the rank itself may wait to be stopped: MPICH's
  // does).
  void serve_ranks() {
    if (!service_) return;
    for (const auto& event : service_->serve()) {
      if (!event.abort_code) {
        result_.notes.push_back(event.note);
      } else if (!tearing_down_) {
        result_.aborted = JobResult::Abort{event.rank, *event.abort_code, event.note};
        result_.first_failed_rank = event.rank;
        begin_teardown(JobEnd::RankFailed);
      }
    }
  }

  void check_deadlines() {
    auto now = Clock::now();
    if (settle_until_ && now >= *settle_until_ && !tearing_down_) begin_teardown(JobEnd::RankFailed);
    if (stall_due() && now >= *stall_due()) {
      stall_read_ = true;
      output_.stacks(stacks_now(StacksWhen::Stall));
    }
    if (deadline_ && now >= *deadline_ && !tearing_down_) {
      if (policy_.read_stacks) output_.stacks(stacks_now(StacksWhen::Timeout));
      if (service_)
        if (std::string waiting = service_->waiting_on(); !waiting.empty())
          result_.notes.push_back("at the timeout the ranks were waiting in " + waiting);
      begin_teardown(JobEnd::TimedOut);
    }
    if (tearing_down_ && !sigkill_sent_ && now >= kill_at_) send_sigkill();
    // A leader that survives SIGKILL (stuck in the kernel) is not waited for any longer:
    // clear_leftover_processes() names it.
    if (sigkill_sent_ && now >= give_up_at_)
      for (auto& s : slots_) s.running = false;
  }

  // When --stall reads the stacks, if no rank writes a line before: once per job.
  std::optional<Clock::time_point> stall_due() const {
    if (!policy_.read_stacks || !policy_.stall || stall_read_ || tearing_down_) return std::nullopt;
    return last_line_ + *policy_.stall;
  }

  void answer_stacks_requests() {
    if (!requests_ || tearing_down_) return;
    while (auto client = requests_->take()) requests_->answer(*client, to_json(stacks_now(StacksWhen::Request)));
  }

  // Where every rank still running is, read here (the ranks are this process's children),
  // with how those that ended did.
  StackReport stacks_now(StacksWhen when) {
    StackReport report;
    report.when = when;
    std::vector<std::pair<int, pid_t>> running;
    int ranks = 0;
    for (const auto& s : slots_) {
      ranks = std::max(ranks, s.outcome.rank + 1);
      if (s.running) running.emplace_back(s.outcome.rank, s.outcome.pid);
      else if (s.outcome.status) report.ended.emplace_back(s.outcome.rank, s.outcome.status->describe());
    }
    report.stacks = read_rank_stacks(running, {}, kStacksReadLimit);
    const std::string here = this_machine_name();
    report.host_of_rank.assign(size_t(ranks), here);
    for (auto& ras : report.stacks.nccl_ras) ras.host = here;
    for (auto& dump : report.stacks.flight_recorder) dump.host = here;
    keep_flight_recorder_dumps(report.stacks.flight_recorder, policy_.dumps_dir);
    return report;
  }

  static std::string this_machine_name() {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    return name;
  }

  void begin_teardown(JobEnd why) {
    if (tearing_down_) return;
    tearing_down_ = true;
    result_.end = why;
    kill_at_ = Clock::now() + policy_.grace;
    for (auto& s : slots_) {
      if (!s.running) continue;
      s.outcome.stopped_by_teardown = true;
      spawner_.signal_group(s.outcome.pid, SIGTERM);
    }
  }

  void send_sigkill() {
    sigkill_sent_ = true;
    give_up_at_ = Clock::now() + policy_.kill_wait;
    for (auto& s : slots_)
      if (s.outcome.pid > 0) spawner_.signal_group(s.outcome.pid, SIGKILL);
  }

  ProcessSpawner& spawner_;
  const TeardownPolicy& policy_;
  JobOutput& output_;
  std::vector<int> interrupt_fds_;
  std::vector<std::string> job_markers_;
  RankService* service_;
  StacksRequests* requests_;
  std::vector<RankSlot> slots_;
  JobResult result_;
  std::optional<Clock::time_point> deadline_;
  std::optional<Clock::time_point> settle_until_;  // a rank failed: teardown begins then
  bool tearing_down_ = false;
  bool sigkill_sent_ = false;
  Clock::time_point last_line_ = Clock::now();  // for --stall: the ranks' last line, or their start
  bool stall_read_ = false;
  Clock::time_point kill_at_{};
  Clock::time_point give_up_at_{};
};

}  // namespace

JobResult run_local_job(ProcessSpawner& spawner, const std::vector<RankProcess>& ranks,
                        const TeardownPolicy& policy, JobOutput& output,
                        const std::vector<int>& interrupt_fds,
                        const std::vector<std::string>& job_markers, RankService* service,
                        StacksRequests* requests) {
  return LocalJob(spawner, policy, output, interrupt_fds, job_markers, service, requests).run(ranks);
}

}  // namespace muster
