// libFuzzer: the rendezvous store's wire protocol after the handshake, requests from three
// connections interleaved in pieces, with time passing.
#include <cstdint>
#include <string>

#include "probes/rendezvous_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  muster::RendezvousProtocol store;
  muster::JobServer::Protocol::Replies replies;
  std::string in[3];
  bool open[3] = {true, true, true};
  auto now = muster::JobServer::Clock::now();
  for (size_t at = 0; at + 1 < size;) {
    const int connection = data[at] % 3;
    const size_t piece = std::min<size_t>(size - at - 1, data[at] / 3 + 1);
    at += 1;
    if (!open[connection]) {
      at += piece;
      continue;
    }
    in[connection].append(reinterpret_cast<const char*>(data + at), piece);
    at += piece;
    if (!store.serve(connection, in[connection], replies)) {
      open[connection] = false;
      store.closed(connection);
    }
    if (in[connection].size() > muster::kMaxRendezvousValue + 64) __builtin_trap();  // unbounded
    now += std::chrono::milliseconds(100);
    store.tick(now, replies);
    replies.clear();
  }
  return 0;
}
