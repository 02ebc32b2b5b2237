// A Collective of one process that pretends to be rank `rank` of `size`: every call is
// recorded, and results are what the other ranks would have contributed with the sweep's
// data pattern, so the sweep's own checks pass unless the fake is told to corrupt one.
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "probes/collective.h"

namespace muster::testing {

class RecordingCollective : public Collective {
 public:
  RecordingCollective(int rank, int size, std::shared_ptr<std::vector<std::string>> log,
                      std::string name = "world")
      : rank_(rank), size_(size), log_(std::move(log)), name_(std::move(name)) {}

  std::string backend() const override { return "fake"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  float* allocate(size_t elements) override { return new float[std::max<size_t>(elements, 1)](); }
  void release(float* b) override { delete[] b; }
  void upload(float* b, const std::vector<float>& h) override { std::memcpy(b, h.data(), h.size() * 4); }
  std::vector<float> download(const float* b, size_t n) override { return {b, b + n}; }

  void run(CollectiveOp op, const float* send, float* recv, size_t count) override {
    log_->push_back(fmt::format("{} {} {}", name_, op_name(op), count));
    in_place_calls += op != CollectiveOp::Barrier && send == recv;
    const int n = size_;
    auto value = [](int r, size_t i) { return float(r + 1) + float(i % 13); };
    // This rank's element i of its send buffer added to what the other n-1 ranks, holding
    // value(r, i), contribute, rank by rank: independent of the closed form the sweep checks
    // against, and wrong when the sweep sends something other than its input (a buffer
    // still holding an earlier in-place result).
    auto sum = [&](size_t i) {
      float total = 0;
      for (int r = 0; r < n; ++r) total += r == rank_ ? send[i] : value(r, i);
      return total;
    };
    switch (op) {
      case CollectiveOp::Barrier: break;
      case CollectiveOp::AllReduce: for (size_t i = 0; i < count; ++i) recv[i] = sum(i); break;
      case CollectiveOp::Broadcast: for (size_t i = 0; i < count; ++i) recv[i] = value(0, i); break;
      case CollectiveOp::AllGather:
        for (size_t i = 0; i < count * size_t(n); ++i) recv[i] = value(int(i / count), i % count);
        break;
      case CollectiveOp::ReduceScatter:
        for (size_t i = 0; i < count; ++i) recv[i] = sum(size_t(rank_) * count + i);
        break;
    }
    if (corrupt && recv && op != CollectiveOp::Barrier) recv[0] += 1;
  }

  std::unique_ptr<Collective> subgroup(const std::string& name, const std::vector<int>& members) override {
    log_->push_back(fmt::format("subgroup {} of {}", name, members.size()));
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i] == rank_)
        return std::make_unique<RecordingCollective>(int(i), int(members.size()), log_, name);
    return nullptr;
  }

  bool corrupt = false;  // while set, one element of every result is off by one
  int in_place_calls = 0;  // collectives whose send buffer was their receive buffer

 private:
  int rank_, size_;
  std::shared_ptr<std::vector<std::string>> log_;
  std::string name_;
};

}  // namespace muster::testing
