#include "launcher/local/python_frames.h"

#include <map>
#include <optional>

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/local/rank_stacks.h"
#include "launcher/text_bytes.h"

namespace muster {
namespace {

// CPython 3.11's layouts on x86-64 and aarch64 (LP64), from its internal headers
// (pycore_runtime.h, pycore_interp.h, cpython/pystate.h, pycore_frame.h, cpython/code.h,
// cpython/unicodeobject.h). 3.12 moved them: this reader is for 3.11 alone, and says so.
namespace py311 {
constexpr uint64_t runtime_interpreters_head = 40;
constexpr uint64_t interpreter_threads_head = 16;
constexpr uint64_t thread_next = 8;
constexpr uint64_t thread_cframe = 56;
constexpr uint64_t thread_native_thread_id = 160;
constexpr uint64_t cframe_current_frame = 8;
constexpr uint64_t frame_code = 32;
constexpr uint64_t frame_previous = 48;
constexpr uint64_t frame_prev_instr = 56;
constexpr uint64_t code_first_line = 72;
constexpr uint64_t code_filename = 112;
constexpr uint64_t code_qualname = 128;
constexpr uint64_t code_linetable = 136;
constexpr uint64_t code_units = 184;  // co_code_adaptive
constexpr uint64_t var_size = 16;      // ob_size, and a str's length
constexpr uint64_t str_state = 32;
constexpr uint64_t ascii_data = 48;    // sizeof(PyASCIIObject)
constexpr uint64_t compact_data = 72;  // sizeof(PyCompactUnicodeObject)
constexpr uint64_t bytes_data = 32;
}  // namespace py311

// Characters read of one name or file name: the frame's text is cut to kMaxFrameText after.
constexpr size_t kMaxText = 512;
constexpr size_t kMaxLineTable = size_t(1) << 20;

class Memory {
 public:
  explicit Memory(const ReadProcessMemory& read) : read_(read) {}
  template <typename T>
  T at(uint64_t address) const {
    T value{};
    if (!read_(address, &value, sizeof value))
      throw Error(ErrorKind::Runtime, fmt::format("cannot read its memory at {:#x}", address));
    return value;
  }
  uint64_t pointer(uint64_t address) const { return at<uint64_t>(address); }
  std::string bytes(uint64_t address, size_t size) const {
    std::string out(size, '\0');
    if (size && !read_(address, out.data(), size))
      throw Error(ErrorKind::Runtime, fmt::format("cannot read its memory at {:#x}", address));
    return out;
  }
  // A str's text: compact ASCII and Latin-1 strings, as every name and file is; "?" else.
  std::string text(uint64_t str) const {
    if (!str) return "?";
    const int64_t length = at<int64_t>(str + py311::var_size);
    const uint32_t state = at<uint32_t>(str + py311::str_state);
    const unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (length < 0 || !compact || kind != 1) return "?";
    const size_t n = std::min<size_t>(size_t(length), kMaxText);
    const std::string latin1 = bytes(str + (ascii ? py311::ascii_data : py311::compact_data), n);
    if (ascii) return latin1;
    // A Latin-1 string's characters past ASCII are two bytes each in UTF-8.
    std::string utf8;
    for (unsigned char c : latin1) {
      if (c < 0x80) {
        utf8 += char(c);
      } else {
        utf8 += char(0xC0 | (c >> 6));
        utf8 += char(0x80 | (c & 0x3F));
      }
    }
    return utf8;
  }

 private:
  const ReadProcessMemory& read_;
};

int64_t varint(std::string_view table, size_t& at) {
  if (at >= table.size()) return 0;
  unsigned char b = table[at++];
  int64_t value = b & 63;
  int shift = 0;
  while ((b & 64) && at < table.size() && shift < 60) {
    b = table[at++];
    shift += 6;
    value |= int64_t(b & 63) << shift;
  }
  return value;
}

int64_t signed_varint(std::string_view table, size_t& at) {
  const int64_t v = varint(table, at);
  return (v & 1) ? -(v >> 1) : (v >> 1);
}

// What a frame's text needs of its code object, read once per code object in one reading of
// the threads: a recursive function, or every thread in one function, has many frames of one.
struct CodeText {
  std::string name, file;
  int first_line = 0;
  std::optional<std::string> line_table;  // none when too large to read
};
using CodeTexts = std::map<uint64_t, CodeText>;

const CodeText& code_text(const Memory& memory, uint64_t code, CodeTexts& known) {
  if (const auto it = known.find(code); it != known.end()) return it->second;
  CodeText text;
  text.name = memory.text(memory.pointer(code + py311::code_qualname));
  text.file = memory.text(memory.pointer(code + py311::code_filename));
  text.first_line = memory.at<int32_t>(code + py311::code_first_line);
  const uint64_t table_object = memory.pointer(code + py311::code_linetable);
  const int64_t table_size = memory.at<int64_t>(table_object + py311::var_size);
  if (table_size >= 0 && size_t(table_size) <= kMaxLineTable)
    text.line_table = memory.bytes(table_object + py311::bytes_data, size_t(table_size));
  return known.emplace(code, std::move(text)).first->second;
}

// "name (file:line)" within kMaxFrameText bytes, cut between characters: the name's end
// and the file's start give way, never the file's end (".py", which marks a Python frame)
// nor its line.
std::string clipped_frame(std::string name, const std::string& file, const std::string& line) {
  const std::string tail = line + ")";
  if (name.size() + 2 + file.size() + tail.size() <= kMaxFrameText) return name + " (" + file + tail;
  const size_t room = kMaxFrameText - tail.size() - 2;  // for name and file
  if (name.size() > room / 2) name = name.substr(0, character_boundary(name, room / 2 - 3, false)) + "...";
  const size_t file_room = room - name.size();
  std::string kept = file;
  if (kept.size() > file_room)
    kept = "..." + file.substr(character_boundary(file, file.size() - (file_room - 3), true));
  return name + " (" + kept + tail;
}

std::string frame_text(const Memory& memory, uint64_t frame, CodeTexts& known) {
  const uint64_t code = memory.pointer(frame + py311::frame_code);
  const CodeText& text = code_text(memory, code, known);
  const uint64_t prev_instr = memory.pointer(frame + py311::frame_prev_instr);
  const uint64_t units = code + py311::code_units;
  int line = text.first_line;
  if (text.line_table && prev_instr >= units)
    line = python311_line(*text.line_table, text.first_line, int((prev_instr - units) / 2));
  return clipped_frame(text.name, text.file, line >= 0 ? fmt::format(":{}", line) : "");
}

}  // namespace

int python311_line(std::string_view table, int first_line, int instruction) {
  if (instruction < 0) return first_line;
  int line = first_line;
  int start = 0;
  size_t at = 0;
  while (at < table.size()) {
    const unsigned char head = table[at++];
    const int code = (head >> 3) & 15;
    const int length = (head & 7) + 1;
    bool has_line = true;
    if (code == 15) {  // no location
      has_line = false;
    } else if (code == 14) {  // long form: line delta, end line delta, column, end column
      line += int(signed_varint(table, at));
      varint(table, at);
      varint(table, at);
      varint(table, at);
    } else if (code == 13) {  // no columns
      line += int(signed_varint(table, at));
    } else if (code >= 10) {  // one line, delta 0 to 2, and two column bytes
      line += code - 10;
      at += 2;
    } else {  // short form: the same line, one column byte
      at += 1;
    }
    if (instruction < start + length) return has_line ? line : -1;
    start += length;
  }
  return -1;
}

std::vector<PythonThread> read_python_threads(uint64_t runtime_address, const ReadProcessMemory& read,
                                              size_t max_threads, size_t max_frames) {
  const Memory memory(read);
  CodeTexts known;
  std::vector<PythonThread> threads;
  const uint64_t interpreter = memory.pointer(runtime_address + py311::runtime_interpreters_head);
  if (!interpreter) return threads;  // not yet initialised, or finalised
  uint64_t thread = memory.pointer(interpreter + py311::interpreter_threads_head);
  while (thread && threads.size() < max_threads) {
    PythonThread out;
    out.native_tid = memory.at<uint64_t>(thread + py311::thread_native_thread_id);
    const uint64_t cframe = memory.pointer(thread + py311::thread_cframe);
    uint64_t frame = cframe ? memory.pointer(cframe + py311::cframe_current_frame) : 0;
    std::vector<std::string> innermost_first;
    while (frame && innermost_first.size() < max_frames) {
      innermost_first.push_back(frame_text(memory, frame, known));
      frame = memory.pointer(frame + py311::frame_previous);
    }
    out.frames.assign(innermost_first.rbegin(), innermost_first.rend());
    threads.push_back(std::move(out));
    thread = memory.pointer(thread + py311::thread_next);
  }
  return threads;
}

}  // namespace muster
