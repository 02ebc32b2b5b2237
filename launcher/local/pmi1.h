// The PMI-1 wire protocol as MPICH's Hydra serves it ("simple PMI": a pre-connected socket
// in PMI_FD, one newline-ended "cmd=..." request at a time), for MPICH, Intel MPI and
// anything linked with a libpmi that speaks it. The protocol as Flux's RFC 13 writes it down:
// init, get_maxes, get_appnum, get_universe_size, get_my_kvsname, put, barrier_in, get,
// finalize and abort.
//
// One Pmi1Node serves a node's ranks. Its barrier is the job's: once every local rank is in
// it, the puts they made since the last one go out in one exchange (across nodes, through
// the head; on one node, straight back), and every rank's barrier_out waits for all of them.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/local/fence_exchange.h"

namespace muster {

struct Pmi1Job {
  std::string kvsname;          // the job's one key-value space
  int size = 0;                 // ranks in the job
  // "(vector,(0,2,4))": which ranks share a node (RFC 13), for MPICH's shared memory.
  std::string process_mapping;
};

// PMI_process_mapping for a job whose rank r runs on node `node_of_rank[r]`: a block
// (node, nodes, ranks per node) for each run of ranks on one node, joined with the next
// when it continues on the next node with the same count; "" (unknown, as RFC 13 allows)
// when that is longer than a value may be.
std::string pmi1_process_mapping(const std::vector<int>& node_of_rank);

// A node's puts of one barrier as its part of the exchange ("KEYLEN VALUELEN\n" KEY VALUE,
// each pair), and every node's parts read back into one map. Throws Error(Runtime) on a part
// that is not that, or parts together larger than the key-value space may be.
std::string pack_pmi1_puts(const std::map<std::string, std::string>& puts);
std::map<std::string, std::string> unpack_pmi1_puts(const std::vector<std::string>& parts);

// What a rank asked for that ends it: MPI_Abort's code and message.
struct Pmi1Abort {
  int rank = 0;
  int exit_code = 1;
  std::string message;
};

// What one put takes of the key-value space: its bytes as pack_pmi1_puts packs them.
size_t packed_pmi1_put_size(const std::string& key, const std::string& value);

class Pmi1Node {
 public:
  // What the protocol allows, as Hydra's limits: names, keys and values longer are refused.
  static constexpr size_t kMaxName = 256, kMaxKey = 64, kMaxValue = 1024;
  // A rank's requests: one line at most this long; at most this many puts between barriers.
  static constexpr size_t kMaxLine = 2048, kMaxPutsPerRank = 4096;
  // The key-value space, every node's puts of every barrier together, each counted as it is
  // packed to cross the nodes (packed_pmi1_put_size): at most a fence's worth, so that any
  // barrier's puts fit the fence that carries them (MPICH puts a business card of a few
  // hundred bytes a rank per barrier).
  static constexpr size_t kMaxSpaceBytes = kMaxFenceBytes;

  Pmi1Node(Pmi1Job job, std::vector<int> local_ranks);

  // Bytes rank `rank` wrote: the replies to write back to it now (a barrier's waits for the
  // exchange). Throws Error(Runtime) naming the rank on a request that breaks the protocol
  // (a line too long, a command before init); the caller ends that rank's connection.
  std::string feed(int rank, std::string_view bytes);

  // Every local rank is in the barrier: the exchange may start.
  bool barrier_ready() const;
  // The puts of this node's ranks since the last barrier, for the exchange (once per barrier).
  std::map<std::string, std::string> take_puts();
  // The exchange came back with every node's puts: they join the key-value space, and each
  // local rank gets its barrier_out (rank -> reply). Throws Error(Runtime) when they would
  // take the space past kMaxSpaceBytes (other nodes' puts count as this node's own do).
  std::map<int, std::string> complete_barrier(const std::map<std::string, std::string>& all_puts);

  // Set once a rank asked to abort the job.
  const std::optional<Pmi1Abort>& abort_request() const { return abort_; }
  // How many barriers the ranks have completed, and the ranks not yet in the current one:
  // what a timeout names.
  int barriers() const { return barriers_; }
  int size() const { return job_.size; }
  std::vector<int> ranks_not_in_barrier() const;

 private:
  struct Client {
    std::string pending;       // bytes of a line not yet ended
    bool initialized = false;
    bool in_barrier = false;
    bool finalized = false;
    size_t puts = 0;
  };
  std::string answer(int rank, Client& c, const std::map<std::string, std::string>& request,
                     const std::string& cmd);
  Client& client(int rank);

  Pmi1Job job_;
  std::map<int, Client> clients_;
  std::map<std::string, std::string> kvs_;   // what every barrier so far made visible
  std::map<std::string, std::string> puts_;  // this node's since the last barrier
  size_t kvs_bytes_ = 0;                     // of kvs_, packed
  size_t puts_bytes_ = 0;                    // of puts_, packed
  std::optional<Pmi1Abort> abort_;
  int barriers_ = 0;
};

}  // namespace muster
