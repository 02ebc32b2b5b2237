#include "launcher/job/control_socket.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/cluster/hostlist.h"
#include "launcher/error.h"
#include "launcher/json_fields.h"
#include "launcher/text_bytes.h"
#include "probes/socket_io.h"

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;

// The most a report may be: every rank's place and note, bounded on the agents' side too.
constexpr size_t kMaxAnswer = size_t(256) << 20;
constexpr size_t kMaxRequest = 64;
// Clients whose request has not all come yet: at most so many, for at most so long.
constexpr size_t kMaxPendingClients = 16;
constexpr std::chrono::seconds kRequestLimit{2};

// `path` as a directory of this user's alone (made 0700 when missing); throws when it is
// anything else (a link, another user's, open to others).
void private_directory(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(ErrorKind::Runtime, fmt::format("cannot make {}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
    throw Error(ErrorKind::Runtime, fmt::format("{} is not a directory of this user's alone (mode 0700); remove it "
                                                "and muster makes it again",
                                                path));
}

bool usable_base(const std::string& path) {
  struct stat st {};
  return !path.empty() && path[0] == '/' && lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         st.st_uid == geteuid() && !(st.st_mode & 022);
}

sockaddr_un address_of(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path)
    throw Error(ErrorKind::Runtime, fmt::format("the socket path {} is too long", path));
  std::memcpy(address.sun_path, path.c_str(), path.size());
  return address;
}

bool same_user(int client) {
  ucred peer{};
  socklen_t size = sizeof peer;
  return getsockopt(client, SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0 && peer.uid == geteuid();
}

// Reads until the peer closes, up to `max` bytes, until `deadline`; nullopt on a timeout.
std::optional<std::string> read_to_end(int fd, size_t max, Clock::time_point deadline) {
  std::string out;
  char buffer[65536];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n == 0) return out;
    if (n > 0) {
      out.append(buffer, size_t(n));
      if (out.size() > max) return std::nullopt;
      continue;
    }
    if (errno != EAGAIN && errno != EINTR) return out;
    if (!wait_ready(fd, POLLIN, deadline)) return std::nullopt;
  }
}

// A connection to the socket at `path` before `deadline`; -1 when none. A listener whose
// backlog is full refuses at once (EAGAIN) rather than blocking: it is asked again until then.
int connect_to(const std::string& path, Clock::time_point deadline) {
  const sockaddr_un address = address_of(path);
  for (;;) {
    const TcpConnection c = connect_before(reinterpret_cast<const sockaddr*>(&address), sizeof address, deadline);
    if (c.fd >= 0 || c.error != EAGAIN || Clock::now() >= deadline) return c.fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::optional<std::string> request(const std::string& path, const std::string& what, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  const int fd = connect_to(path, deadline);
  if (fd < 0) return std::nullopt;
  const std::string line = what + "\n";
  auto answer = write_before(fd, line.data(), line.size(), deadline) ? read_to_end(fd, kMaxAnswer, deadline)
                                                                     : std::nullopt;
  close(fd);
  return answer;
}

}  // namespace

std::string job_socket_directory() {
  std::string base;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && usable_base(xdg)) base = xdg;
  else if (usable_base(fmt::format("/run/user/{}", geteuid()))) base = fmt::format("/run/user/{}", geteuid());
  if (!base.empty()) {
    private_directory(base + "/muster");
    return base + "/muster";
  }
  const char* home = std::getenv("HOME");
  if (!home || !usable_base(home))
    throw Error(ErrorKind::Runtime, "no private directory for the job's socket: set XDG_RUNTIME_DIR or HOME");
  // Only the last directory need be private; those above it must be this user's and closed
  // to others' writes, so that no one else can swap it.
  std::string path = home;
  for (const char* part : {"/.cache", "/muster"}) {
    path += part;
    if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
      throw Error(ErrorKind::Runtime, fmt::format("cannot make {}: {}", path, std::strerror(errno)));
    if (!usable_base(path))
      throw Error(ErrorKind::Runtime, fmt::format("{} is not this user's, or others may write in it", path));
  }
  private_directory(path + "/jobs");
  return path + "/jobs";
}

JobListing job_listing(const std::vector<std::string>& argv, int ranks, const std::vector<std::string>& hosts) {
  JobListing listing;
  for (const auto& word : argv) listing.command += (listing.command.empty() ? "" : " ") + word;
  if (listing.command.size() > 200) listing.command = listing.command.substr(0, 197) + "...";
  listing.ranks = ranks;
  listing.hosts = fold_hostlist(hosts);
  return listing;
}

JobControlSocket::JobControlSocket(const std::string& job_id, JobListing listing)
    : path_(job_socket_directory() + "/" + job_id + ".sock"), listing_(std::move(listing)) {
  listing_.id = job_id;
  const sockaddr_un address = address_of(path_);
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw Error(ErrorKind::Runtime, "cannot make a socket");
  unlink(path_.c_str());  // one of an earlier job with this id that did not end cleanly
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 || listen(fd_, 16) != 0) {
    const std::string why = std::strerror(errno);
    close(fd_);
    throw Error(ErrorKind::Runtime, fmt::format("cannot listen at {}: {}", path_, why));
  }
}

JobControlSocket::~JobControlSocket() {
  for (const Pending& p : pending_) close(p.fd);
  unlink(path_.c_str());
  close(fd_);
}

std::optional<int> JobControlSocket::take_stacks_request() {
  for (;;) {
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (client < 0) break;
    if (!same_user(client) || pending_.size() >= kMaxPendingClients) {
      close(client);
      continue;
    }
    pending_.push_back({client, "", Clock::now() + kRequestLimit});
  }
  // Each client's request as far as it has come; none is waited for.
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    char buffer[kMaxRequest + 1];
    const ssize_t n = recv(p.fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) p.line.append(buffer, size_t(n));
    const auto end = p.line.find('\n');
    const bool waiting = n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
    if (end == std::string::npos && waiting && p.line.size() <= kMaxRequest && Clock::now() < p.deadline) {
      ++i;
      continue;
    }
    const int client = p.fd;
    const std::string line = end == std::string::npos ? "" : p.line.substr(0, end);
    pending_.erase(pending_.begin() + long(i));
    if (line == "stacks") return client;
    if (line == "info")
      answer(client, json_text({{"id", listing_.id}, {"command", listing_.command}, {"ranks", listing_.ranks},
                                {"hosts", listing_.hosts}}));
    else
      close(client);  // another request, too long, too slow, or the client left
  }
  return std::nullopt;
}

void JobControlSocket::answer(int client, const std::string& text) {
  write_before(client, text.data(), text.size(), Clock::now() + std::chrono::seconds(1));
  close(client);
}

std::vector<JobListing> running_jobs() {
  std::vector<JobListing> jobs;
  const std::string dir = job_socket_directory();
  DIR* d = opendir(dir.c_str());
  if (!d) return jobs;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 5 && name.substr(name.size() - 5) == ".sock") names.push_back(name);
  }
  closedir(d);
  for (const auto& name : names) {
    const auto info = request(dir + "/" + name, "info", std::chrono::milliseconds(2000));
    if (!info) continue;  // a job that ended without removing its socket
    try {
      const auto j = parse_untrusted_json(*info);
      jobs.push_back({j.at("id"), j.at("command"), j.at("ranks"), j.at("hosts")});
    } catch (const std::exception&) {
    }
  }
  return jobs;
}

std::string ask_job_for_stacks(const std::string& id, std::chrono::milliseconds limit) {
  if (id.empty() || id.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw Error(ErrorKind::Usage, fmt::format("'{}' is not a job id: 'muster stacks' lists the running jobs", id));
  const auto answer = request(job_socket_directory() + "/" + id + ".sock", "stacks", limit);
  if (!answer || answer->empty())
    throw Error(ErrorKind::Runtime, fmt::format("job {} did not answer: it may have ended", id));
  return *answer;
}

}  // namespace muster
