#include "launcher/local/pmi1_service.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/error.h"

namespace muster {
namespace {

// The descriptor number a rank finds its PMI socket at: the first after stdin, stdout and
// stderr, as Hydra's proxies pass it.
constexpr int kRankPmiFd = 3;

// Writes all of `text` to a non-blocking socket; false when the rank is gone or does not
// read (PMI is lock-step: a reply never finds the buffer full of earlier ones).
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(size_t(n));
  }
  return true;
}

}  // namespace

Pmi1Service::Pmi1Service(Pmi1Job job, std::vector<int> local_ranks, Exchange exchange)
    : node_(std::move(job), local_ranks), exchange_(std::move(exchange)) {
  if (!exchange_) exchange_ = [](std::map<std::string, std::string> puts) { return puts; };
  for (int rank : local_ranks) {
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0)
      throw Error(ErrorKind::Runtime, fmt::format("cannot make rank {}'s PMI socket: {}", rank, strerror(errno)));
    fcntl(ends[0], F_SETFL, fcntl(ends[0], F_GETFL) | O_NONBLOCK);
    // Above the descriptor the rank will see it as, so that giving it there always moves it
    // (a move onto itself would keep close-on-exec).
    const int theirs = fcntl(ends[1], F_DUPFD_CLOEXEC, kRankPmiFd + 1);
    close(ends[1]);
    connections_[rank] = {ends[0], theirs};
  }
}

Pmi1Service::~Pmi1Service() {
  for (auto& [rank, c] : connections_) {
    if (c.ours >= 0) close(c.ours);
    if (c.theirs >= 0) close(c.theirs);
  }
}

void Pmi1Service::prepare(int rank, ProcessSpec& spec) {
  const Connection& c = connections_.at(rank);
  spec.inherited_fd = c.theirs;
  spec.inherited_fd_in_child = kRankPmiFd;
  spec.env.set("PMI_FD", std::to_string(kRankPmiFd));
  spec.env.set("PMI_RANK", std::to_string(rank));
  spec.env.set("PMI_SIZE", std::to_string(node_.size()));
}

void Pmi1Service::started() {
  for (auto& [rank, c] : connections_)
    if (c.theirs >= 0) {
      close(c.theirs);
      c.theirs = -1;
    }
}

std::vector<int> Pmi1Service::descriptors() const {
  std::vector<int> out;
  for (const auto& [rank, c] : connections_)
    if (c.ours >= 0) out.push_back(c.ours);
  return out;
}

void Pmi1Service::close_connection(int rank) {
  Connection& c = connections_.at(rank);
  if (c.ours >= 0) close(c.ours);
  c.ours = -1;
}

std::vector<RankService::Event> Pmi1Service::serve() {
  std::vector<Event> events;
  char chunk[4096];
  for (auto& [rank, c] : connections_) {
    // Bounded per call, as the ranks' output is: one chatty rank cannot starve the loop.
    for (int round = 0; c.ours >= 0 && round < 16; ++round) {
      const ssize_t n = recv(c.ours, chunk, sizeof chunk, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      if (n <= 0) {  // the rank ended, or closed its PMI connection
        close_connection(rank);
        break;
      }
      try {
        if (!write_all(c.ours, node_.feed(rank, std::string_view(chunk, size_t(n))))) close_connection(rank);
      } catch (const Error& e) {
        events.push_back({rank, fmt::format("{}; its PMI connection was closed", e.what()), std::nullopt});
        close_connection(rank);
      }
    }
  }
  if (node_.barrier_ready()) {
    const auto everyone = exchange_(node_.take_puts());
    for (const auto& [rank, reply] : node_.complete_barrier(everyone))
      if (connections_.at(rank).ours >= 0 && !write_all(connections_.at(rank).ours, reply)) close_connection(rank);
  }
  if (const auto& abort = node_.abort_request(); abort && !abort_said_) {
    abort_said_ = true;
    events.push_back({abort->rank,
                      fmt::format("rank {} called MPI_Abort with code {}{}", abort->rank, abort->exit_code,
                                  abort->message.empty() ? "" : ": " + abort->message),
                      abort->exit_code});
  }
  return events;
}

std::string Pmi1Service::waiting_on() const {
  const std::vector<int> missing = node_.ranks_not_in_barrier();
  if (missing.empty() || missing.size() == connections_.size()) return "";
  return fmt::format("PMI barrier {} (MPI_Init's, or a PMI_Barrier): rank{} {} never entered it",
                     node_.barriers() + 1, missing.size() == 1 ? "" : "s", fmt::join(missing, ", "));
}

}  // namespace muster
