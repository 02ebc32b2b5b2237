// How `muster stacks` reaches a running job: each job's head listens on a Unix socket in a
// directory only its user can enter ($XDG_RUNTIME_DIR/muster, mode 0700), answers only
// processes of its own user (SO_PEERCRED), and keeps the job running.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace muster {

// The user's private directory for job sockets, made (0700) when missing:
// $XDG_RUNTIME_DIR/muster, else /run/user/UID/muster, else $HOME/.cache/muster/jobs. Throws
// Error(Runtime) when it cannot be made, or is not a directory of this user's alone.
std::string job_socket_directory();

// What a running job says of itself when asked.
struct JobListing {
  std::string id;
  std::string command;
  int ranks = 0;
  std::string hosts;
};

// A job as `muster stacks` lists it: its command (cut to 200 bytes), world size and hosts.
JobListing job_listing(const std::vector<std::string>& argv, int ranks, const std::vector<std::string>& hosts);

// The head's end: one socket for one job.
class JobControlSocket {
 public:
  // Listens at DIRECTORY/JOB_ID.sock. Throws Error(Runtime) when it cannot.
  JobControlSocket(const std::string& job_id, JobListing listing);
  ~JobControlSocket();
  JobControlSocket(const JobControlSocket&) = delete;
  JobControlSocket& operator=(const JobControlSocket&) = delete;

  // A client of this user that asked for stacks since the last call, if any (its socket);
  // "info" requests are answered here (each within a second). Never waits for a client's
  // request: one not all come yet is kept, and looked at again on the next call, for up to
  // 2 s. Call it often (the head's loop does).
  std::optional<int> take_stacks_request();
  // Sends `text` to a client and closes its socket, giving up after a second.
  static void answer(int client, const std::string& text);

 private:
  struct Pending {
    int fd = -1;
    std::string line;  // what it sent so far
    std::chrono::steady_clock::time_point deadline;
  };
  std::string path_;
  JobListing listing_;
  int fd_ = -1;
  std::vector<Pending> pending_;
};

// The jobs with a socket in the user's directory that answer, with what each says.
std::vector<JobListing> running_jobs();

// Asks job `id` for its stacks and returns its answer (the report's JSON), waiting up to
// `limit`. Throws Error(Runtime) naming the job when it does not answer.
std::string ask_job_for_stacks(const std::string& id, std::chrono::milliseconds limit);

}  // namespace muster
