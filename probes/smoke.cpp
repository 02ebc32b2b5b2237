#include "probes/smoke.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <tuple>

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {

const char* op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::Barrier: return "barrier";
    case CollectiveOp::AllReduce: return "all_reduce";
    case CollectiveOp::AllGather: return "all_gather";
    case CollectiveOp::ReduceScatter: return "reduce_scatter";
    case CollectiveOp::Broadcast: return "broadcast";
  }
  return "?";
}

std::optional<CollectiveOp> op_from_name(const std::string& name) {
  for (CollectiveOp op : {CollectiveOp::Barrier, CollectiveOp::AllReduce, CollectiveOp::AllGather,
                          CollectiveOp::ReduceScatter, CollectiveOp::Broadcast})
    if (name == op_name(op)) return op;
  return std::nullopt;
}

std::string pair_group(int a, int b) { return fmt::format("pair {}-{}", a, b); }

std::optional<std::pair<int, int>> nodes_of_pair_group(const std::string& group) {
  int a = -1, b = -1, end = 0;
  if (std::sscanf(group.c_str(), "pair %d-%d%n", &a, &b, &end) != 2 || size_t(end) != group.size() || a < 0 || b < 0)
    return std::nullopt;
  return std::pair(a, b);
}

std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, double factor) {
  std::vector<size_t> sizes;
  if (min_bytes == 0 || max_bytes < min_bytes) return sizes;
  for (double s = double(min_bytes); s <= double(max_bytes) * 1.0000001;
       s = factor > 1 ? s * factor : s + double(min_bytes))
    sizes.push_back(size_t(std::llround(s)));
  if (sizes.back() != max_bytes) sizes.push_back(max_bytes);
  return sizes;
}

double bus_factor(CollectiveOp op, int n) {
  switch (op) {
    case CollectiveOp::AllReduce: return 2.0 * (n - 1) / n;
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter: return double(n - 1) / n;
    case CollectiveOp::Broadcast: return 1.0;
    case CollectiveOp::Barrier: return 0;
  }
  return 0;
}

size_t elements_per_rank(CollectiveOp op, size_t bytes, int n) {
  size_t elements = bytes / sizeof(float);
  if (op == CollectiveOp::AllGather || op == CollectiveOp::ReduceScatter) elements /= size_t(n);
  return std::max<size_t>(elements, 1);
}

namespace {

// Rank r's element i: small integers, so every sum is exact in float32 and the expected
// result is computed here independently of the collective.
float value(int rank, size_t i) { return float(rank + 1) + float(i % 13); }
double all_ranks_sum(int n, size_t i) { return n * (n + 1) / 2.0 + double(n) * double(i % 13); }

long count_wrong(CollectiveOp op, const std::vector<float>& out, int n, int rank, size_t count) {
  if (op == CollectiveOp::Barrier) return 0;  // it moves no data: its buffer is never written
  long wrong = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    double expected = 0;
    switch (op) {
      case CollectiveOp::AllReduce: expected = all_ranks_sum(n, i); break;
      case CollectiveOp::Broadcast: expected = value(0, i); break;
      case CollectiveOp::AllGather: expected = value(int(i / count), i % count); break;
      case CollectiveOp::ReduceScatter: expected = all_ranks_sum(n, size_t(rank) * count + i); break;
      case CollectiveOp::Barrier: break;
    }
    wrong += double(out[i]) != expected;
  }
  return wrong;
}

// A pair's timed loop at most: plenty for a steady mean, and no more of a backend's per-run
// cost (NCCL records an event a run) than that.
constexpr int kMostPairIterations = 1000;

// Every member's `values` summed element by element, the same result on every member.
std::vector<float> sum_over(Collective& c, const std::vector<float>& values) {
  float* buffer = c.allocate(values.size());
  try {
    c.upload(buffer, values);
    c.run(CollectiveOp::AllReduce, buffer, buffer, values.size());
    std::vector<float> sums = c.download(buffer, values.size());
    c.release(buffer);
    return sums;
  } catch (...) {
    c.release(buffer);
    throw;
  }
}

class Sweeper {
 public:
  Sweeper(const SmokeSettings& s, const std::function<void(const SmokeEvent&)>& emit)
      : settings_(s), emit_(emit) {}

  void run_group(Collective& c, const std::string& group, const std::vector<CollectiveOp>& ops,
                 const std::vector<size_t>& sizes) {
    for (CollectiveOp op : ops)
      for (size_t bytes : sizes) {
        const SmokeEvent e = run_one(c, group, op, bytes, std::nullopt);
        if (group == "world" && op == CollectiveOp::AllReduce && bytes == settings_.max_bytes)
          largest_all_reduce_us = e.time_us;
      }
  }

  // This rank's time of the world's all-reduce at the largest size, once run.
  std::optional<double> largest_all_reduce_us;

  // One all-reduce at `bytes` between two ranks, timed over a quarter of `budget_s`; this
  // rank's bandwidth in Gbit/s. `start_together` is called between the checked first run and
  // the timing: where every pair of a round waits, so that their timed loops share the same
  // moments.
  double run_pair(Collective& c, const std::string& group, size_t bytes, double budget_s,
                  const std::function<void()>& start_together) {
    const SmokeEvent e = run_one(c, group, CollectiveOp::AllReduce, bytes, budget_s, start_together);
    return e.time_us > 0 ? double(bytes) * 8 / 1e3 / e.time_us * bus_factor(CollectiveOp::AllReduce, 2) : 0;
  }

  // Keeps every rank's sequence numbers in step, whether or not it is in a group, and says
  // it passed them: the head waits for no result of this rank there.
  void skip(size_t steps) {
    if (steps == 0) return;
    seq_ += int(steps);
    emit_(SmokeEvent{SmokeEvent::Kind::Skip, seq_, "", CollectiveOp::Barrier, 0, 0, 0, 0, ""});
  }

 private:
  // With `budget_s`, the runs are timed over a window of a quarter of it (windowed_mean_us),
  // after `start_together`, and no other warm-up runs.
  SmokeEvent run_one(Collective& c, const std::string& group, CollectiveOp op, size_t bytes,
                     std::optional<double> budget_s, const std::function<void()>& start_together = {}) {
    const int n = c.size();
    const size_t count = elements_per_rank(op, bytes, n);
    const size_t send_elems = op == CollectiveOp::ReduceScatter ? count * size_t(n) : count;
    const size_t recv_elems = op == CollectiveOp::AllGather ? count * size_t(n) : count;
    SmokeEvent e{SmokeEvent::Kind::Enter, ++seq_, group, op, bytes, count, 0, 0, ""};
    emit_(e);
    std::vector<float> input(send_elems);
    for (size_t i = 0; i < send_elems; ++i) input[i] = value(c.rank(), i);
    // All-reduce runs in place, as torch.distributed and DDP run it: out of place, Gloo
    // first copies the input into the output, which measured 15-20% of a 16 MiB all-reduce
    // on 2 ranks and is not what a training job pays.
    const bool in_place = op == CollectiveOp::AllReduce;
    float* recv = c.allocate(recv_elems);
    float* send = in_place ? recv : c.allocate(send_elems);
    auto release = [&] {
      if (send != recv) c.release(send);
      c.release(recv);
    };
    try {
      c.upload(send, input);
      // In place, every run adds into the last one's sums: only the first starts from the
      // input, so it is the checked run, and the first warm-up too. Out of place, the last
      // timed run is checked.
      int warmups_left = settings_.warmup;
      if (in_place) {
        c.run(op, send, recv, count);
        e.wrong = count_wrong(op, c.download(recv, recv_elems), n, c.rank(), count);
        warmups_left = std::max(0, warmups_left - 1);
      }
      if (start_together) start_together();
      if (budget_s) {
        // Timed over a quarter of the budget, whatever --iters says: two runs of a healthy
        // pair take a few milliseconds, and one scheduler hiccup on a busy node made one look
        // five times slower. The rest is for the runs before it and the group's setup.
        e.time_us = windowed_mean_us(c, op, send, recv, count, *budget_s / 4);
      } else {
        for (int i = 0; i < warmups_left; ++i) c.run(op, send, recv, count);
        e.time_us = timed_us(c, op, send, recv, count, settings_.iters) / std::max(1, settings_.iters);
      }
      if (!in_place) e.wrong = count_wrong(op, c.download(recv, recv_elems), n, c.rank(), count);
      e.kind = SmokeEvent::Kind::Result;
      emit_(e);
    } catch (const std::exception& ex) {
      // Said before the buffers go back: releasing them aborts a failed NCCL communicator,
      // which is what its peers notice; the cause must be on record before their reports.
      e.kind = SmokeEvent::Kind::Error;
      e.message = ex.what();
      e.gave_up = dynamic_cast<const CollectiveTimedOut*>(&ex) != nullptr;
      emit_(e);
      release();
      throw;
    }
    release();
    return e;
  }

  // `times` runs, started together, in microseconds.
  static double timed_us(Collective& c, CollectiveOp op, float* send, float* recv, size_t count, int times) {
    c.run(CollectiveOp::Barrier, nullptr, nullptr, 0);  // start the timed loop together
    const auto start = std::chrono::steady_clock::now();
    c.run_repeatedly(op, send, recv, count, times);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }

  // The mean time of one run, in microseconds, over runs until `window_s` has passed since they
  // started together: a window of time, not a count, so that the pairs of a round, started
  // by one barrier, stream over the same moments and end together. A count chosen from each
  // pair's first run did not: a pair whose first run was slowed chose few runs and ended
  // early, and the rest then ran alone at up to four times the pace. After each chunk of runs
  // the members agree on their mean time so far, so each runs the same count.
  static double windowed_mean_us(Collective& c, CollectiveOp op, float* send, float* recv, size_t count,
                                 double window_s) {
    const double first_us = agreed_mean(c, timed_us(c, op, send, recv, count, 1));
    // A twentieth of the window a chunk, as the first run paces it.
    const int chunk = int(std::clamp(window_s * 1e6 / 20 / first_us, 1.0, double(kMostPairIterations) / 20));
    c.run(CollectiveOp::Barrier, nullptr, nullptr, 0);
    const auto start = std::chrono::steady_clock::now();
    for (int runs = chunk;; runs += chunk) {
      c.run_repeatedly(op, send, recv, count, chunk);
      const double elapsed_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      if (runs >= kMostPairIterations || agreed_mean(c, elapsed_us) >= window_s * 1e6) return elapsed_us / runs;
    }
  }

  // The mean over the group's members of `value`, the same on every member.
  static double agreed_mean(Collective& c, double value) {
    return std::max(1.0, double(sum_over(c, {float(value)}).front()) / c.size());
  }

  const SmokeSettings& settings_;
  const std::function<void(const SmokeEvent&)>& emit_;
  int seq_ = 0;
};

// The bus bandwidth of the world's largest all-reduce, in GB/s, from the ranks' mean time as
// the head's row has it: the same on every rank. Unset when the sweep ran none (no
// all_reduce among the ops): nothing measured is nothing to search on.
std::optional<double> world_busbw_gbps(Collective& world, const Sweeper& sweeper, const SmokeSettings& settings) {
  const double mean_us = double(sum_over(world, {float(sweeper.largest_all_reduce_us.value_or(0))}).front()) /
                         world.size();
  if (!sweeper.largest_all_reduce_us || mean_us <= 0) return std::nullopt;
  return double(settings.max_bytes) / 1e3 / mean_us * bus_factor(CollectiveOp::AllReduce, world.size());
}

}  // namespace

std::optional<CulpritReport> run_smoke_sweep(Collective& world, const SmokeSettings& settings,
                                             const std::vector<int>& node_of_rank,
                                             const std::function<void(const SmokeEvent&)>& emit) {
  Sweeper sweeper(settings, emit);
  const auto sizes = sweep_sizes(settings.min_bytes, settings.max_bytes, settings.step_factor);

  // 1. Every rank together.
  sweeper.run_group(world, "world", {CollectiveOp::Barrier}, {0});
  sweeper.run_group(world, "world", settings.ops, sizes);
  bool world_too_slow = false;
  if (settings.pairs_below_busbw_gbps && !settings.pairs)
    if (const auto busbw = world_busbw_gbps(world, sweeper, settings))
      world_too_slow = *busbw < *settings.pairs_below_busbw_gbps;

  // Nodes and their first ranks, from the layout every rank shares.
  std::map<int, std::vector<int>> ranks_of_node;
  for (size_t r = 0; r < node_of_rank.size(); ++r) ranks_of_node[node_of_rank[r]].push_back(int(r));
  std::vector<int> nodes, leaders;
  for (const auto& [node, ranks] : ranks_of_node) {
    nodes.push_back(node);
    leaders.push_back(ranks.front());
  }
  const size_t steps = settings.ops.size() * sizes.size();

  // 2. --split node: inside each node, then across nodes, so a slow link and a slow node
  //    are told apart.
  if (settings.split_node) {
    for (const auto& [node, ranks] : ranks_of_node) {
      std::string name = fmt::format("node {}", node);
      if (auto group = world.subgroup(name, ranks)) sweeper.run_group(*group, name, settings.ops, sizes);
      else sweeper.skip(steps);
    }
    if (auto group = world.subgroup("across nodes", leaders))
      sweeper.run_group(*group, "across nodes", settings.ops, sizes);
    else
      sweeper.skip(steps);
    world.run(CollectiveOp::Barrier, nullptr, nullptr, 0);
  }

  // 3. --pairs: the pair search over one rank of each node. Each round's disjoint pairs run
  //    at once, an all-reduce at the largest size each within the round's budget; every rank
  //    then learns every pair's number, so all of them choose the same next round. The pairs
  //    are timed from one moment, after a world barrier that every rank passes once a round,
  //    so that no pair streams alone while the others still set up (windowed_mean_us).
  if (!(settings.pairs || world_too_slow) || nodes.size() < 2) return std::nullopt;
  int round = 0;
  const MeasurePairs measure = [&](const std::vector<std::pair<int, int>>& pairs) {
    if (pairs.empty()) return std::vector<std::optional<double>>{};
    ++round;
    std::vector<float> halves(pairs.size(), 0);  // each member's half of its pair's bandwidth
    bool started = false;
    const std::function<void()> start_together = [&] {
      world.run(CollectiveOp::Barrier, nullptr, nullptr, 0);
      started = true;
    };
    for (size_t k = 0; k < pairs.size(); ++k) {
      const auto [a, b] = pairs[k];
      const std::string group = pair_group(nodes[size_t(a)], nodes[size_t(b)]);
      // A pair may be measured again: its group's name is new each round.
      if (auto pair = world.subgroup(fmt::format("{} round {}", group, round), {leaders[size_t(a)], leaders[size_t(b)]}))
        halves[k] = float(sweeper.run_pair(*pair, group, settings.max_bytes, settings.pair_round_s, start_together) / 2);
      else
        sweeper.skip(1);
    }
    if (!started) start_together();  // a rank in no pair this round
    const std::vector<float> sums = sum_over(world, halves);
    std::vector<std::optional<double>> gbps;
    for (float g : sums) gbps.push_back(g > 0 ? std::optional<double>(g) : std::nullopt);
    return gbps;
  };
  CulpritReport found = find_culprits(int(nodes.size()), measure);
  // Numbered as the caller numbers nodes, not by their place among the nodes with ranks.
  auto node = [&](int k) { return nodes[size_t(k)]; };
  for (int& n : found.slow_nodes) n = node(n);
  for (int& n : found.unknown) n = node(n);
  for (auto* links : {&found.slow_links, &found.unknown_links})
    for (auto& [a, b] : *links) std::tie(a, b) = std::pair(node(a), node(b));
  for (auto& m : found.measured) std::tie(m.a, m.b) = std::pair(node(m.a), node(m.b));
  return found;
}

void add_to_row(SmokeRow& row, int rank, const SmokeEvent& e) {
  row.group = e.group;
  row.op = e.op;
  row.bytes = e.bytes;
  row.count = e.count;
  row.ranks += 1;
  row.wrong += e.wrong;
  row.time_us_by_rank[rank] = e.time_us;
  row.max_time_us = std::max(row.max_time_us, e.time_us);
}

void finish_row(SmokeRow& row) {
  // nccl-tests' default (-a 1): bandwidth from the average of the ranks' times.
  double total = 0;
  for (const auto& [rank, t] : row.time_us_by_rank) total += t;
  row.time_us = row.time_us_by_rank.empty() ? 0 : total / double(row.time_us_by_rank.size());
  if (row.op != CollectiveOp::Barrier && row.time_us > 0) {
    row.algbw_gbps = double(row.bytes) / 1e9 / (row.time_us / 1e6);
    row.busbw_gbps = row.algbw_gbps * bus_factor(row.op, row.ranks);
  }
}

std::vector<SmokeRow> summarize_smoke(const std::map<int, std::vector<SmokeEvent>>& results) {
  std::map<int, SmokeRow> by_seq;
  for (const auto& [rank, events] : results)
    for (const auto& e : events)
      if (e.kind == SmokeEvent::Kind::Result) add_to_row(by_seq[e.seq], rank, e);
  std::vector<SmokeRow> rows;
  for (auto& [seq, row] : by_seq) {
    finish_row(row);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<int> ranks_never_arrived(const std::map<int, int>& last_enter_by_rank, int world_size,
                                     int failing_seq) {
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    auto it = last_enter_by_rank.find(r);
    if (it == last_enter_by_rank.end() || it->second < failing_seq) missing.push_back(r);
  }
  return missing;
}

std::vector<int> ranks_stuck_in(const std::map<int, int>& last_enter_by_rank,
                                const std::map<int, std::vector<SmokeEvent>>& events_by_rank,
                                int failing_seq) {
  std::vector<int> stuck;
  for (const auto& [rank, seq] : last_enter_by_rank) {
    if (seq != failing_seq) continue;
    auto it = events_by_rank.find(rank);
    const bool left = it != events_by_rank.end() &&
                      std::any_of(it->second.begin(), it->second.end(),
                                  [&](const SmokeEvent& e) { return e.seq == failing_seq; });
    if (!left) stuck.push_back(rank);
  }
  return stuck;
}

}  // namespace muster
