// libFuzzer: what ranks may write on their PMI sockets (the input's first half from rank 0
// of a node, the rest from rank 1), then a barrier each: a rank's words are answered or
// refused with an Error naming it, never more, and the barrier completes for whoever is left.
#include <cstdint>
#include <string>

#include "launcher/error.h"
#include "launcher/local/pmi1.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  muster::Pmi1Node node({"kvs", 2, muster::pmi1_process_mapping({0, 0})}, {0, 1});
  std::string bytes[2];
  for (size_t i = 0; i < size; ++i) bytes[0].push_back(char(data[i]));
  // The first half from rank 0, the rest from rank 1: requests cut anywhere.
  const size_t half = bytes[0].size() / 2;
  bytes[1] = bytes[0].substr(half);
  bytes[0].resize(half);
  bool open[2] = {true, true};
  for (int round = 0; round < 2; ++round)
    for (int rank = 0; rank < 2; ++rank) {
      if (!open[rank]) continue;
      try {
        node.feed(rank, round == 0 ? bytes[rank] : "cmd=barrier_in\n");
      } catch (const muster::Error&) {
        open[rank] = false;  // the connection is closed, as the service closes it
      }
      if (node.barrier_ready()) node.complete_barrier(node.take_puts());
    }
  return 0;
}
