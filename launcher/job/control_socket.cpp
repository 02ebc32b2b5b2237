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

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/error.h"
#include "launcher/json_fields.h"

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;

// The most a report may be: every rank's place and note, bounded on the agents' side too.
constexpr size_t kMaxAnswer = size_t(256) << 20;
constexpr size_t kMaxRequest = 64;

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
std::optional<std::string> read_all(int fd, size_t max, Clock::time_point deadline, bool line = false) {
  std::string out;
  char buffer[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, int(left)) <= 0) continue;
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return out;
    out.append(buffer, size_t(n));
    if (out.size() > max) return std::nullopt;
    if (line && out.find('\n') != std::string::npos) return out.substr(0, out.find('\n'));
  }
}

int connect_to(const std::string& path) {
  const sockaddr_un address = address_of(path);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(ErrorKind::Runtime, "cannot make a socket");
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::optional<std::string> request(const std::string& path, const std::string& what, std::chrono::milliseconds limit) {
  const int fd = connect_to(path);
  if (fd < 0) return std::nullopt;
  const std::string line = what + "\n";
  const bool sent = write(fd, line.data(), line.size()) == ssize_t(line.size());
  auto answer = sent ? read_all(fd, kMaxAnswer, Clock::now() + limit) : std::nullopt;
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
  unlink(path_.c_str());
  close(fd_);
}

std::optional<int> JobControlSocket::take_stacks_request() {
  for (;;) {
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return std::nullopt;
    if (!same_user(client)) {
      close(client);
      continue;
    }
    const auto line = read_all(client, kMaxRequest, Clock::now() + std::chrono::milliseconds(200), true);
    if (line && *line == "stacks") return client;
    if (line && *line == "info")
      answer(client, nlohmann::json{{"id", listing_.id}, {"command", listing_.command}, {"ranks", listing_.ranks},
                                    {"hosts", listing_.hosts}}
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    else
      close(client);
  }
}

void JobControlSocket::answer(int client, const std::string& text) {
  std::string_view left = text;
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (!left.empty() && Clock::now() < deadline) {
    const ssize_t n = send(client, left.data(), left.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      left.remove_prefix(size_t(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) break;
    pollfd p{client, POLLOUT, 0};
    poll(&p, 1, 100);
  }
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
