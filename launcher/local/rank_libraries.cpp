#include "launcher/local/rank_libraries.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "launcher/replace_file.h"
#include "launcher/text_bytes.h"
#include "launcher/thread.h"
#include "probes/socket_io.h"

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;

// A rank's environment or memory map is read to this size at most.
constexpr size_t kMaxProcFileBytes = size_t(4) << 20;
// How long the RAS service is given to answer, at most, whatever the caller's limit.
constexpr std::chrono::milliseconds kMostRasWait{2500};
// How long a flight recorder has to write the dump asked of it, at most: torch's monitor
// thread looks at its pipe once a second (TORCH_NCCL_COORD_CHECK_MILSEC).
constexpr std::chrono::milliseconds kMostDumpWait{2500};

std::string read_proc_file(pid_t pid, const char* name) {
  const int fd = ::open(fmt::format("/proc/{}/{}", pid, name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, size_t(n));
    if (out.size() >= kMaxProcFileBytes) break;
  }
  ::close(fd);
  return out;
}

std::map<std::string, std::string> process_environment(pid_t pid) {
  std::map<std::string, std::string> env;
  const std::string text = read_proc_file(pid, "environ");
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\0', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view entry(text.data() + at, end - at);
    const size_t eq = entry.find('=');
    if (eq != std::string_view::npos) env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
    at = end + 1;
  }
  return env;
}

std::string first_set(const std::map<std::string, std::string>& env, std::initializer_list<const char*> names,
                      const std::string& otherwise = {}) {
  for (const char* name : names) {
    auto it = env.find(name);
    if (it != env.end() && !it->second.empty()) return it->second;
  }
  return otherwise;
}

bool loaded_nccl(pid_t pid) {
  const std::string maps = read_proc_file(pid, "maps");
  for (size_t at = maps.find("/libnccl"); at != std::string::npos; at = maps.find("/libnccl", at + 1)) {
    // The file's name, not a folder's: "/libnccl.so.2.24.3", "/libnccl.so".
    const size_t end = maps.find('\n', at);
    const std::string_view name(maps.data() + at, (end == std::string::npos ? maps.size() : end) - at);
    if (name.find('/', 1) == std::string_view::npos && name.find(".so") != std::string_view::npos) return true;
  }
  return false;
}

std::optional<uid_t> process_owner(pid_t pid) {
  struct stat st {};
  if (::stat(fmt::format("/proc/{}", pid).c_str(), &st) != 0) return std::nullopt;
  return st.st_uid;
}

// "host:port" or "[v6]:port", as NCCL_RAS_ADDR is written, to a socket address: a numeric
// address or localhost (NCCL's default), never a lookup that could outlive the limit.
std::vector<sockaddr_storage> ras_socket_addresses(const std::string& address, std::string& why) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  const std::string port_text = colon == std::string::npos ? std::to_string(kNcclRasPort) : address.substr(colon + 1);
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      (port = std::stoi(port_text)) < 1 || port > 65535) {
    why = fmt::format("NCCL_RAS_ADDR '{}' has no port muster can use", address);
    return {};
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::vector<std::string> hosts = {host};
  if (host == "localhost" || host.empty()) hosts = {"127.0.0.1", "::1"};
  std::vector<sockaddr_storage> out;
  for (const auto& h : hosts) {
    sockaddr_storage ss{};
    auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (inet_pton(AF_INET, h.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(uint16_t(port));
      out.push_back(ss);
    } else if (inet_pton(AF_INET6, h.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(uint16_t(port));
      out.push_back(ss);
    }
  }
  if (out.empty()) why = fmt::format("NCCL_RAS_ADDR '{}' is not a numeric address or localhost", address);
  return out;
}

// One line of the service's, up to '\n', before `deadline`.
std::optional<std::string> read_line(int fd, Clock::time_point deadline) {
  std::string line;
  char c;
  while (line.size() < 1024) {
    if (!read_before(fd, &c, 1, deadline)) return std::nullopt;
    if (c == '\n') return line;
    line += c;
  }
  return std::nullopt;
}

// Closes a descriptor when it goes out of scope, whichever way the reading ends.
struct ClosedOnExit {
  int fd;
  ~ClosedOnExit() { ::close(fd); }
};

// Where a rank that loaded NCCL has its RAS service, from its environment; none when off.
std::optional<std::string> ras_address_in(const std::map<std::string, std::string>& env) {
  if (first_set(env, {"NCCL_RAS_ENABLE"}) == "0") return std::nullopt;
  return first_set(env, {"NCCL_RAS_ADDR"}, fmt::format("localhost:{}", kNcclRasPort));
}

bool starts_with_nocase(const std::string& text, std::string_view prefix) {
  return text.size() >= prefix.size() && strncasecmp(text.c_str(), prefix.data(), prefix.size()) == 0;
}

}  // namespace

std::optional<std::string> nccl_ras_address(const std::vector<pid_t>& ranks) {
  for (pid_t pid : ranks) {
    if (loaded_nccl(pid)) return ras_address_in(process_environment(pid));
  }
  return std::nullopt;
}

std::vector<std::string> ras_findings(const std::string& report) {
  std::vector<std::string> lines, out;
  for (size_t at = 0; at < report.size();) {
    size_t end = report.find('\n', at);
    if (end == std::string::npos) end = report.size();
    lines.emplace_back(report, at, end - at);
    at = end + 1;
  }
  bool in_findings = false;
  for (size_t i = 0; i < lines.size() && out.size() < kMaxRasLines; ++i) {
    const std::string& line = lines[i];
    const bool heading = i + 1 < lines.size() && !line.empty() && lines[i + 1].find_first_not_of('=') == std::string::npos &&
                         lines[i + 1].size() >= line.size();
    if (heading) {
      in_findings = line == "Errors" || line == "Warnings";
      ++i;  // its underline
      continue;
    }
    if (!in_findings || line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string kept = line;
    if (!kept.empty() && kept.back() == '\r') kept.pop_back();
    if (kept.size() > kMaxRasLineBytes) kept.resize(character_boundary(kept, kMaxRasLineBytes, false));
    out.push_back(std::move(kept));
  }
  return out;
}

RasSummary ask_nccl_ras(const std::string& address, std::chrono::milliseconds limit) {
  RasSummary summary;
  summary.address = address;
  const auto deadline = Clock::now() + std::min(limit, kMostRasWait);
  auto failed = [&](std::string why) {
    summary.error = std::move(why);
    return summary;
  };
  std::string why;
  const auto targets = ras_socket_addresses(address, why);
  if (targets.empty()) return failed(why);
  TcpConnection connection;
  for (const auto& target : targets) {
    connection = connect_before(reinterpret_cast<const sockaddr*>(&target),
                                target.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6), deadline);
    if (connection.fd >= 0) break;
  }
  if (connection.fd < 0)
    return failed(fmt::format("nothing answers at {} ({}): NCCL before 2.24, or its RAS service is off", address,
                              std::strerror(connection.error)));
  const ClosedOnExit closer{connection.fd};
  const int fd = connection.fd;
  auto say = [&](const std::string& words) { return write_before(fd, words.data(), words.size(), deadline); };
  if (!say(fmt::format("CLIENT PROTOCOL {}\n", kNcclRasProtocol))) return failed("the service did not take a request");
  const auto hello = read_line(fd, deadline);
  if (!hello || !starts_with_nocase(*hello, "SERVER PROTOCOL "))
    return failed(hello ? fmt::format("the service answered '{}', not NCCL's RAS protocol", hello->substr(0, 80))
                        : "the service did not answer in time");
  // The service asks every NCCL process of the job and waits this long for each leg: a
  // second keeps its answer within ours, as a lost node's leg would otherwise take 5 s.
  if (!say("TIMEOUT 1\n")) return failed("the service did not take a request");
  const auto ok = read_line(fd, deadline);
  if (!ok || strcasecmp(ok->c_str(), "OK") != 0) return failed("the service did not take a timeout");
  if (!say("STATUS\n")) return failed("the service did not take a request");
  std::string report;
  char buffer[8192];
  bool whole = false;
  while (report.size() < kMaxRasAnswerBytes) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      report.append(buffer, size_t(std::min<size_t>(size_t(n), kMaxRasAnswerBytes - report.size())));
      continue;
    }
    if (n == 0) {
      whole = true;
      break;
    }
    if ((errno != EAGAIN && errno != EINTR) || !wait_ready(fd, POLLIN, deadline)) break;
  }
  summary.lines = ras_findings(report);
  if (!whole)
    summary.error = report.size() >= kMaxRasAnswerBytes
                        ? fmt::format("its status was cut at {} bytes", kMaxRasAnswerBytes)
                        : "its status did not end in time: what came is kept";
  return summary;
}

RankLibraries::RankLibraries(const std::vector<std::pair<int, pid_t>>& running, std::chrono::milliseconds limit)
    : deadline_(Clock::now() + std::min(limit, kMostDumpWait)), asked_at_(std::chrono::system_clock::now()) {
  bool nccl_seen = false;  // the first rank that loaded NCCL names its service (nccl_ras_address)
  for (const auto& [rank, pid] : running) {
    const auto env = process_environment(pid);  // read once a rank, for both libraries
    if (!nccl_seen && loaded_nccl(pid)) {
      nccl_seen = true;
      if (auto address = ras_address_in(env))
        ras_asker_ =
            signal_free_thread([this, address = *address, limit] { ras_answer_ = ask_nccl_ras(address, limit); });
    }
    const std::string size = first_set(env, {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"});
    if (size.empty() || size.find_first_not_of("0123456789") != std::string::npos ||
        size.find_first_not_of('0') == std::string::npos)
      continue;
    const auto owner = process_owner(pid);
    if (!owner) continue;  // it ended
    Recorder recorder{rank,
                      first_set(env, {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"},
                                "/tmp/nccl_trace_rank_") +
                          std::to_string(rank),
                      *owner, false};
    // Its pipe, where it keeps one: a FIFO of the rank's user, written once (torch dumps
    // when it reads anything from it). Looked at before it is opened and again after, so
    // that nothing else (a link, another user's file, a device) is ever opened for writing.
    const std::string stem = first_set(env, {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_FR_DEBUG_INFO_PIPE_FILE"});
    if (!stem.empty()) {
      const std::string pipe = stem + std::to_string(rank) + ".pipe";
      struct stat before {}, after {};
      if (::lstat(pipe.c_str(), &before) == 0 && S_ISFIFO(before.st_mode) && before.st_uid == *owner) {
        const int fd = ::open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
          if (::fstat(fd, &after) == 0 && after.st_dev == before.st_dev && after.st_ino == before.st_ino)
            recorder.asked = ::write(fd, "1", 1) == 1;
          ::close(fd);
        }
      }
    }
    recorders_.push_back(std::move(recorder));
  }
}

RankLibraries::~RankLibraries() {
  if (ras_asker_.joinable()) ras_asker_.join();
}

std::optional<RasSummary> RankLibraries::ras() {
  if (ras_asker_.joinable()) ras_asker_.join();
  return ras_answer_;
}

std::vector<FlightRecorderDump> RankLibraries::flight_recorder_dumps() {
  std::vector<FlightRecorderDump> out;
  size_t total = 0;
  for (const auto& recorder : recorders_) {
    FlightRecorderDump dump;
    dump.rank = recorder.rank;
    dump.source = recorder.dump_path;
    // A dump asked for is one written after the ask, whole: its size the same twice.
    struct stat st {};
    off_t last_size = -1;
    bool fresh = false;
    for (;;) {
      const bool there = ::lstat(recorder.dump_path.c_str(), &st) == 0;
      fresh = there && std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec) +
                               std::chrono::nanoseconds(st.st_mtim.tv_nsec) >=
                           asked_at_ - std::chrono::milliseconds(10);
      if (!recorder.asked || (fresh && st.st_size == last_size) || Clock::now() >= deadline_) break;
      last_size = fresh ? st.st_size : -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const int fd = ::open(recorder.dump_path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      dump.note = fmt::format("no dump at {}: {}", recorder.dump_path, std::strerror(errno));
      out.push_back(std::move(dump));
      continue;
    }
    const ClosedOnExit closer{fd};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      dump.note = fmt::format("{} is not a regular file: left alone", recorder.dump_path);
    } else if (st.st_uid != recorder.owner) {
      dump.note = fmt::format("{} belongs to another user than the rank's: left alone", recorder.dump_path);
    } else if (size_t(st.st_size) > kMaxFlightRecorderDump || total + size_t(st.st_size) > kMaxFlightRecorderDumpsOfNode) {
      dump.note = fmt::format("{} is {} bytes, more than muster carries ({} a rank, {} a node): left on the node",
                              recorder.dump_path, st.st_size, kMaxFlightRecorderDump, kMaxFlightRecorderDumpsOfNode);
    } else {
      dump.bytes.resize(size_t(st.st_size));
      size_t got = 0;
      while (got < dump.bytes.size()) {
        const ssize_t n = ::read(fd, dump.bytes.data() + got, dump.bytes.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += size_t(n);
      }
      dump.bytes.resize(got);
      total += got;
      if (!fresh)
        dump.note = recorder.asked ? "not rewritten in time when asked: this dump is older than this reading"
                                   : "written before this reading (the rank has no dump pipe to ask for a new one)";
    }
    out.push_back(std::move(dump));
  }
  return out;
}

std::string flight_recorder_dir(const std::string& job_id) {
  const std::string name = "muster-flight-recorder-" + job_id;
  char here[4096];
  return ::getcwd(here, sizeof here) ? std::string(here) + "/" + name : name;
}

void keep_flight_recorder_dumps(std::vector<FlightRecorderDump>& dumps, const std::string& dir) {
  if (std::none_of(dumps.begin(), dumps.end(), [](const auto& d) { return !d.bytes.empty(); })) return;
  std::string why;
  struct stat st {};
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) why = std::strerror(errno);
  else if (::lstat(dir.c_str(), &st) != 0) why = std::strerror(errno);
  else if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) why = "it is not a directory of this user's";
  for (auto& dump : dumps) {
    if (dump.bytes.empty()) continue;
    const size_t slash = dump.source.rfind('/');
    std::string name = dump.source.substr(slash == std::string::npos ? 0 : slash + 1);
    if (name.empty() || name == "." || name == "..") name = fmt::format("nccl_trace_rank_{}", dump.rank);
    const std::string path = dir + "/" + name;
    const int error = why.empty() ? replace_file(path, dump.bytes) : 0;
    if (!why.empty() || error != 0)
      dump.note = fmt::format("not written to {}: {}", dir, why.empty() ? std::strerror(error) : why);
    else
      dump.file = path;
    dump.bytes.clear();
  }
}

}  // namespace muster
