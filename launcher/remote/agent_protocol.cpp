#include "launcher/remote/agent_protocol.h"

#include <cctype>
#include <charconv>
#include <climits>
#include <cstdio>

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {
namespace {

constexpr std::pair<FrameKind, const char*> kNames[] = {
    {FrameKind::Hello, "HELLO"}, {FrameKind::Spec, "SPEC"}, {FrameKind::Stop, "STOP"}, {FrameKind::Beat, "BEAT"}, {FrameKind::Bye, "BYE"},
    {FrameKind::Ask, "ASK"},     {FrameKind::Answer, "ANSWER"},
    {FrameKind::Bound, "BOUND"}, {FrameKind::Out, "OUT"},     {FrameKind::Err, "ERR"},   {FrameKind::Exit, "EXIT"},
    {FrameKind::Done, "DONE"},   {FrameKind::Fail, "FAIL"},   {FrameKind::Fence, "FENCE"},
    {FrameKind::Fenced, "FENCED"}, {FrameKind::Fetch, "FETCH"}, {FrameKind::Fetched, "FETCHED"},
};

constexpr size_t kMaxHeader = 64;

// A number that ends at `end` in `text`, from `at`; advances `at` past `end`.
std::optional<unsigned long long> number_until(std::string_view text, size_t& at, char end) {
  const size_t stop = text.find(end, at);
  if (stop == std::string_view::npos || stop == at || stop - at > 20) return std::nullopt;
  unsigned long long value = 0;
  const auto [ptr, error] = std::from_chars(text.data() + at, text.data() + stop, value);
  if (error != std::errc() || ptr != text.data() + stop) return std::nullopt;
  at = stop + 1;
  return value;
}

// "PROTOCOL NUMBER\n": the protocol is a short word of letters and digits.
FencePart fence_header(std::string_view payload, size_t& at) {
  const size_t space = payload.find(' ');
  if (space == std::string_view::npos || space == 0 || space > 8)
    throw Error(ErrorKind::Runtime, "a fence message without its protocol");
  FencePart part;
  part.protocol = std::string(payload.substr(0, space));
  for (char c : part.protocol)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      throw Error(ErrorKind::Runtime, "a fence message without its protocol");
  at = space + 1;
  const auto number = number_until(payload, at, '\n');
  if (!number || *number > 1'000'000'000) throw Error(ErrorKind::Runtime, "a fence message without its number");
  part.number = int(*number);
  return part;
}

}  // namespace

std::string encode_fence(const FencePart& part) {
  return fmt::format("{} {}\n", part.protocol, part.number) + part.bytes;
}

Frame fence_frame(int run, FencePart part) {
  if (part.bytes.size() > kMaxFenceBytes)
    return {FrameKind::Fail, run,
            fmt::format("this node's data for MPI's {} fence {} came to {} bytes, more than the {} MiB "
                        "muster carries in one fence", part.protocol, part.number + 1, part.bytes.size(),
                        kMaxFenceBytes >> 20)};
  return {FrameKind::Fence, run, encode_fence(part)};
}

FencePart decode_fence(std::string_view payload) {
  size_t at = 0;
  FencePart part = fence_header(payload, at);
  part.bytes = std::string(payload.substr(at));
  return part;
}

std::string encode_fetch(int request, int rank) { return fmt::format("{} {}", request, rank); }

std::pair<int, int> decode_fetch(std::string_view payload) {
  std::string text(payload);
  text += '\n';
  size_t at = 0;
  const auto request = number_until(text, at, ' ');
  const auto rank = number_until(text, at, '\n');
  if (!request || !rank || at != text.size() || *request > INT_MAX || *rank > INT_MAX)
    throw Error(ErrorKind::Runtime, "a fetch message is malformed");
  return {int(*request), int(*rank)};
}

std::string encode_fetched(int request, int status, std::string_view data) {
  return fmt::format("{} {}\n", request, status) + std::string(data);
}

std::tuple<int, int, std::string> decode_fetched(std::string_view payload) {
  size_t at = 0;
  const auto request = number_until(payload, at, ' ');
  // PMIx's statuses are negative: the sign, then the number.
  const bool negative = at < payload.size() && payload[at] == '-';
  if (negative) ++at;
  const auto status = number_until(payload, at, '\n');
  if (!request || !status || *request > INT_MAX || *status > INT_MAX)
    throw Error(ErrorKind::Runtime, "a fetch's answer is malformed");
  return {int(*request), negative ? -int(*status) : int(*status), std::string(payload.substr(at))};
}

std::string encode_fenced(const std::string& protocol, int number, const std::vector<std::string>& parts) {
  std::string out = fmt::format("{} {}\n", protocol, number);
  for (const std::string& part : parts) out += fmt::format("{}\n", part.size()) + part;
  return out;
}

std::pair<FencePart, std::vector<std::string>> decode_fenced(std::string_view payload) {
  size_t at = 0;
  FencePart header = fence_header(payload, at);
  std::vector<std::string> parts;
  while (at < payload.size()) {
    const auto size = number_until(payload, at, '\n');
    if (!size || *size > payload.size() - at) throw Error(ErrorKind::Runtime, "a fence's parts are malformed");
    parts.emplace_back(payload.substr(at, size_t(*size)));
    at += size_t(*size);
  }
  return {std::move(header), std::move(parts)};
}

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
