#include "launcher/local/pmi1_service.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/error.h"
#include "probes/socket_io.h"

namespace muster {
namespace {

// The descriptor number a rank finds its PMI socket at: the first after stdin, stdout and
// stderr, as Hydra's proxies pass it.
constexpr int kRankPmiFd = 3;

}  // namespace

Pmi1Service::Pmi1Service(Pmi1Job job, std::vector<int> local_ranks, FenceExchange& exchange)
    : node_(std::move(job), local_ranks), exchange_(exchange) {
  for (int rank : local_ranks) connections_[rank];
}

Pmi1Service::~Pmi1Service() {
  for (auto& [rank, c] : connections_)
    for (int fd : {c.ours, c.theirs})
      if (fd >= 0) close(fd);
}

void Pmi1Service::prepare(int rank, ProcessSpec& spec) {
  Connection& c = connections_.at(rank);
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0)
    throw Error(ErrorKind::Runtime, fmt::format("cannot make rank {}'s PMI socket: {}", rank, strerror(errno)));
  c.ours = ends[0];
  fcntl(c.ours, F_SETFL, fcntl(c.ours, F_GETFL) | O_NONBLOCK);
  // Above the descriptor the rank will see it as, so that giving it there always moves it
  // (a move onto itself would keep close-on-exec).
  c.theirs = fcntl(ends[1], F_DUPFD_CLOEXEC, kRankPmiFd + 1);
  const int saved = errno;
  close(ends[1]);
  if (c.theirs < 0)
    throw Error(ErrorKind::Runtime, fmt::format("cannot place rank {}'s PMI socket: {}", rank, strerror(saved)));
  spec.inherited_fd = c.theirs;
  spec.inherited_fd_in_child = kRankPmiFd;
  spec.env.set("PMI_FD", std::to_string(kRankPmiFd));
  spec.env.set("PMI_RANK", std::to_string(rank));
  spec.env.set("PMI_SIZE", std::to_string(node_.size()));
}

void Pmi1Service::spawned(int rank) {
  Connection& c = connections_.at(rank);
  if (c.theirs >= 0) close(c.theirs);
  c.theirs = -1;
}

std::vector<int> Pmi1Service::descriptors() const {
  std::vector<int> out;
  for (const auto& [rank, c] : connections_)
    if (c.ours >= 0) out.push_back(c.ours);
  if (exchange_.ready_fd() >= 0) out.push_back(exchange_.ready_fd());
  return out;
}

// A rank that stopped reading its replies (PMI is lock-step, so a reply never finds the
// socket's buffer full of earlier ones) or broke the protocol loses its connection, said.
void Pmi1Service::close_connection(int rank, std::vector<Event>& events, const char* why) {
  Connection& c = connections_.at(rank);
  if (c.ours >= 0) close(c.ours);
  c.ours = -1;
  if (why) events.push_back({rank, fmt::format("rank {}: {}; its PMI connection was closed", rank, why), std::nullopt});
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
        close_connection(rank, events, nullptr);
        break;
      }
      try {
        const std::string replies = node_.feed(rank, std::string_view(chunk, size_t(n)));
        if (!write_exact(c.ours, replies.data(), replies.size()))
          close_connection(rank, events, "it did not read PMI's replies");
      } catch (const Error& e) {
        events.push_back({rank, fmt::format("{}; its PMI connection was closed", e.what()), std::nullopt});
        close_connection(rank, events, nullptr);
      }
    }
  }
  exchange_barrier(events);
  if (const auto& abort = node_.abort_request(); abort && !abort_said_) {
    abort_said_ = true;
    events.push_back({abort->rank,
                      fmt::format("rank {} called MPI_Abort with code {}{}", abort->rank, abort->exit_code,
                                  abort->message.empty() ? "" : ": " + abort->message),
                      abort->exit_code});
  }
  return events;
}

// Once every rank here is in the barrier, this node's puts go to the exchange; once every
// node's came back, each rank here gets its barrier_out.
void Pmi1Service::exchange_barrier(std::vector<Event>& events) {
  const int barrier = node_.barriers();
  if (contributed_ < barrier && node_.barrier_ready()) {
    exchange_.contribute("pmi1", barrier, pack_pmi1_puts(node_.take_puts()));
    contributed_ = barrier;
  }
  if (contributed_ != barrier) return;
  auto parts = exchange_.completed("pmi1", barrier);
  if (!parts) return;
  std::map<int, std::string> replies;
  try {
    replies = node_.complete_barrier(unpack_pmi1_puts(*parts));
  } catch (const Error& e) {
    // Every rank here waits for this barrier: none can go on without the others' puts.
    for (auto& [rank, c] : connections_)
      if (c.ours >= 0) close_connection(rank, events, e.what());
    return;
  }
  for (const auto& [rank, reply] : replies) {
    const int fd = connections_.at(rank).ours;
    if (fd >= 0 && !write_exact(fd, reply.data(), reply.size()))
      close_connection(rank, events, "it did not read PMI's replies");
  }
}

std::string Pmi1Service::waiting_on() const {
  const std::vector<int> missing = node_.ranks_not_in_barrier();
  if (missing.empty() && contributed_ == node_.barriers())
    return fmt::format("PMI barrier {} (MPI_Init's, or a PMI_Barrier): every rank here entered it; "
                       "other nodes' ranks had not",
                       node_.barriers() + 1);
  if (missing.empty() || missing.size() == connections_.size()) return "";
  return fmt::format("PMI barrier {} (MPI_Init's, or a PMI_Barrier): rank{} {} never entered it",
                     node_.barriers() + 1, missing.size() == 1 ? "" : "s", fmt::join(missing, ", "));
}

}  // namespace muster
