#include "launcher/remote/agent_protocol.h"

#include <charconv>
#include <cstdio>

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {
namespace {

constexpr std::pair<FrameKind, const char*> kNames[] = {
    {FrameKind::Hello, "HELLO"}, {FrameKind::Spec, "SPEC"}, {FrameKind::Stop, "STOP"}, {FrameKind::Beat, "BEAT"}, {FrameKind::Bye, "BYE"},
    {FrameKind::Ask, "ASK"},     {FrameKind::Answer, "ANSWER"},
    {FrameKind::Bound, "BOUND"}, {FrameKind::Out, "OUT"},     {FrameKind::Err, "ERR"},   {FrameKind::Exit, "EXIT"},
    {FrameKind::Done, "DONE"},   {FrameKind::Fail, "FAIL"},
};

constexpr size_t kMaxHeader = 64;

}  // namespace

std::string encode_frame(const Frame& frame) {
  const char* name = "?";
  for (const auto& [kind, n] : kNames)
    if (kind == frame.kind) name = n;
  return fmt::format("{} {} {}\n", name, frame.rank, frame.payload.size()) + frame.payload;
}

std::optional<Frame> FrameReader::next() {
  auto newline = buffer_.find('\n');
  if (newline == std::string::npos) {
    if (buffer_.size() > kMaxHeader)
      throw Error(ErrorKind::Runtime, "the agent's output is not muster's protocol");
    return std::nullopt;
  }
  char name[16] = {};
  long rank = 0;
  unsigned long long length = 0;
  std::string header = buffer_.substr(0, newline);
  if (std::sscanf(header.c_str(), "%15s %ld %llu", name, &rank, &length) != 3)
    throw Error(ErrorKind::Runtime,
                fmt::format("the agent's output is not muster's protocol: '{}'",
                            header.substr(0, kMaxHeader)));
  if (length > max_payload_)
    throw Error(ErrorKind::Runtime,
                fmt::format("a {} message of {} bytes is over the protocol's limit of {} MiB", name,
                            length, max_payload_ >> 20));
  if (buffer_.size() < newline + 1 + length) return std::nullopt;
  Frame frame;
  bool known = false;
  for (const auto& [kind, n] : kNames)
    if (header.rfind(std::string(n) + " ", 0) == 0) {
      frame.kind = kind;
      known = true;
    }
  if (!known)
    throw Error(ErrorKind::Runtime, fmt::format("unknown agent message '{}'", name));
  frame.rank = int(rank);
  frame.payload = buffer_.substr(newline + 1, length);
  buffer_.erase(0, newline + 1 + length);
  return frame;
}

}  // namespace muster
