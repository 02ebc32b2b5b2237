// libFuzzer: the secret handshake every job server (rendezvous store, probe server) and the
// Slurm agent listener run before anything else, from either side, against a peer that
// sends arbitrary bytes and then closes. The first byte picks the side.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "probes/job_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  // The peer's bytes are all written before the handshake starts, then its side closes, so
  // every read ends at once; the socket buffer holds any input libFuzzer is given (64 KiB).
  [[maybe_unused]] auto n = write(fds[1], data + 1, size - 1);
  shutdown(fds[1], SHUT_WR);
  const std::string secret(64, 'k');
  const auto limit = std::chrono::milliseconds(50);
  std::string refusal = data[0] % 2 ? muster::check_secret(fds[0], secret, "probe", limit)
                                    : muster::prove_secret(fds[0], secret, "probe", limit);
  // Arbitrary bytes never pass as the proof of a secret they do not hold, from either end:
  // a client takes no server's word for it either.
  if (refusal.empty()) __builtin_trap();
  close(fds[0]);
  close(fds[1]);
  return 0;
}
