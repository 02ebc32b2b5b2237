#include "launcher/cluster/hostlist.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {
namespace {

[[noreturn]] void reject(std::string_view text, std::string_view problem) {
  // A pasted or generated list can be kilobytes long: quote its start, enough to find it.
  const bool long_text = text.size() > 120;
  throw Error(ErrorKind::Config, fmt::format("host list '{}{}': {}", text.substr(0, 100),
                                             long_text ? "..." : "", problem));
}

// One number of a host name as written: its value and the digits' width. Widths matter
// because ClusterShell keeps "01" and "1" apart.
struct Number {
  long value = 0;
  int width = 0;  // characters written
  bool padded() const { return width > 1 && std::to_string(value).size() < size_t(width); }
};

// ClusterShell orders numbers by written width, then value: n1 n3 n01 n10 n002.
bool number_less(const Number& a, const Number& b) {
  return std::tie(a.width, a.value) < std::tie(b.width, b.value);
}
bool number_equal(const Number& a, const Number& b) {
  return a.value == b.value && a.width == b.width;
}

std::string format_number(long value, int pad) {
  return fmt::format("{:0{}}", value, pad);
}

// --- parsing ---------------------------------------------------------------------------

struct RangeItem {
  long first, last, step;
  int pad;  // zero-padding width, 0 for none
};

long parse_long(std::string_view whole, std::string_view digits) {
  long value = 0;
  if (digits.empty() || digits.size() > 12 || digits[0] < '0' || digits[0] > '9')
    reject(whole, fmt::format("'{}' is not a number", digits));
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size())
    reject(whole, fmt::format("'{}' is not a number", digits));
  return value;
}

std::vector<RangeItem> parse_ranges(std::string_view whole, std::string_view inside) {
  if (inside.empty()) reject(whole, "empty range '[]'");
  std::vector<RangeItem> items;
  size_t start = 0;
  while (start <= inside.size()) {
    size_t comma = inside.find(',', start);
    std::string_view part = inside.substr(start, comma == std::string_view::npos
                                                     ? std::string_view::npos
                                                     : comma - start);
    if (part.empty()) reject(whole, "empty range in brackets");
    long step = 1;
    if (auto slash = part.find('/'); slash != std::string_view::npos) {
      step = parse_long(whole, part.substr(slash + 1));
      if (step < 1) reject(whole, fmt::format("step in '{}' must be at least 1", part));
      part = part.substr(0, slash);
    }
    std::string_view low = part, high = part;
    if (auto dash = part.find('-'); dash != std::string_view::npos) {
      low = part.substr(0, dash);
      high = part.substr(dash + 1);
    }
    RangeItem item{parse_long(whole, low), parse_long(whole, high), step, 0};
    if (low.size() > 1 && low[0] == '0') item.pad = int(low.size());
    if (item.first > item.last)
      reject(whole, fmt::format("range '{}' runs backwards; write '{}-{}'", part, high, low));
    items.push_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

// Products and sums that stop at a ceiling instead of wrapping around: a crafted list of
// ranges must not multiply out to zero and slip under the limit.
size_t saturating_add(size_t a, size_t b) {
  size_t sum;
  return __builtin_add_overflow(a, b, &sum) ? SIZE_MAX : sum;
}
size_t saturating_mul(size_t a, size_t b) {
  size_t product;
  return __builtin_mul_overflow(a, b, &product) ? SIZE_MAX : product;
}

size_t range_count(const std::vector<RangeItem>& items) {
  size_t n = 0;
  for (const auto& r : items) n = saturating_add(n, size_t((r.last - r.first) / r.step) + 1);
  return n;
}

// One comma-separated element, "r[1-2]n[001-004]": literal pieces around bracket groups.
struct Element {
  std::vector<std::string> literals;            // one more than groups
  std::vector<std::vector<RangeItem>> groups;
};

Element parse_element(std::string_view whole, std::string_view text) {
  Element element;
  element.literals.emplace_back();
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '[') {
      size_t close = text.find(']', i + 1);
      size_t next_open = text.find('[', i + 1);
      if (close == std::string_view::npos || next_open < close)
        reject(whole, fmt::format("'[' at column {} is never closed", i + 1));
      element.groups.push_back(parse_ranges(whole, text.substr(i + 1, close - i - 1)));
      element.literals.emplace_back();
      i = close;
    } else if (c == ']') {
      reject(whole, fmt::format("']' at column {} has no matching '['", i + 1));
    } else if (c == ' ' || c == '\t' || c == '\n') {
      reject(whole, "host names cannot contain white space");
    } else {
      element.literals.back() += c;
    }
  }
  return element;
}

void expand_into(const Element& e, size_t group, std::string prefix,
                 std::vector<std::string>& out) {
  prefix += e.literals[group];
  if (group == e.groups.size()) {
    out.push_back(std::move(prefix));
    return;
  }
  for (const auto& r : e.groups[group])
    for (long v = r.first; v <= r.last; v += r.step)
      expand_into(e, group + 1, prefix + format_number(v, r.pad), out);
}

// --- folding ---------------------------------------------------------------------------

// A name split into its non-numeric skeleton and its numbers. The skeleton is written as
// ClusterShell writes it, "%s" where a number was and "%%" for a literal '%', so that
// patterns sort as nodeset sorts them and a name holding "%s" stays a name.
struct SplitName {
  std::string pattern;
  std::vector<Number> numbers;
};

SplitName split_name(const std::string& name) {
  SplitName s;
  for (size_t i = 0; i < name.size();) {
    if (name[i] >= '0' && name[i] <= '9') {
      size_t j = i;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
      std::string_view digits(name.data() + i, j - i);
      if (digits.size() > 12) {  // too long to be an index: keep it as text
        s.pattern.append(digits);
      } else {
        long v = 0;
        std::from_chars(digits.data(), digits.data() + digits.size(), v);
        s.numbers.push_back({v, int(digits.size())});
        s.pattern += "%s";
      }
      i = j;
    } else {
      if (name[i] == '%') s.pattern += '%';
      s.pattern += name[i++];
    }
  }
  return s;
}

// A sorted set of numbers of one dimension, in ClusterShell's order.
using NumberSet = std::vector<Number>;

void normalise(NumberSet& set) {
  std::sort(set.begin(), set.end(), number_less);
  set.erase(std::unique(set.begin(), set.end(), number_equal), set.end());
}

// "1-3,5,08-10": consecutive values merge when the next one, written with the run's
// padding, is exactly what was written (so 9,10 merge, and 09,10 merge, but 9,010 don't).
std::string fold_numbers(const NumberSet& set) {
  std::string out;
  for (size_t i = 0; i < set.size();) {
    int pad = set[i].padded() ? set[i].width : 0;
    size_t j = i;
    while (j + 1 < set.size() && set[j + 1].value == set[j].value + 1 &&
           format_number(set[j + 1].value, pad).size() == size_t(set[j + 1].width))
      ++j;
    if (!out.empty()) out += ',';
    out += format_number(set[i].value, pad > 0 ? pad : set[i].width);
    if (j > i) out += '-' + format_number(set[j].value, pad > 0 ? pad : set[j].width);
    i = j + 1;
  }
  return out;
}

std::string write_number(const Number& n) { return format_number(n.value, n.width); }

// One rectangle of names: the product of a number set per dimension.
using Vector = std::vector<NumberSet>;

size_t vector_size(const Vector& v) {
  size_t n = 1;
  for (const auto& d : v) n *= d.size();
  return n;
}

// Larger rectangles first, then per dimension the larger set, then the lower first and last
// numbers: the order in which ClusterShell lists the parts of a multi-dimensional set. It
// compares those numbers as the text they are written as ("15" before "6"), so this does too.
bool vector_before(const Vector& a, const Vector& b) {
  size_t sa = vector_size(a), sb = vector_size(b);
  if (sa != sb) return sa > sb;
  auto text_less = [](const Number& x, const Number& y) { return write_number(x) < write_number(y); };
  for (size_t d = 0; d < a.size(); ++d) {
    if (a[d].size() != b[d].size()) return a[d].size() > b[d].size();
    if (!number_equal(a[d].front(), b[d].front())) return text_less(a[d].front(), b[d].front());
    if (!number_equal(a[d].back(), b[d].back())) return text_less(a[d].back(), b[d].back());
  }
  return false;
}

bool same_set(const NumberSet& a, const NumberSet& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), number_equal);
}

bool set_less(const NumberSet& a, const NumberSet& b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), number_less);
}

// The dimension in which two rectangles differ, when they differ in exactly one.
std::optional<size_t> only_difference(const Vector& a, const Vector& b) {
  std::optional<size_t> differing;
  for (size_t d = 0; d < a.size(); ++d) {
    if (same_set(a[d], b[d])) continue;
    if (differing) return std::nullopt;
    differing = d;
  }
  return differing;
}

// Folding rectangles the way ClusterShell's RangeSetND does, in O(n log n) for the lists
// users write. The rectangles start as single names and stay disjoint, so two that differ
// in one dimension only can always be merged along it. Merged sets are sorted once per pass.
class RectangleMerger {
 public:
  explicit RectangleMerger(std::vector<Vector> rects) : rects_(std::move(rects)) {}

  std::vector<Vector> merge() {
    if (!merge_univariate()) {
      // ClusterShell's easy passes first (each rectangle against the ones right after it in
      // sorted order, which is where its neighbours are), then the rectangles equal in every
      // dimension but one, found by hashing instead of comparing every pair.
      for (bool changed = true; changed;) {
        while (easy_pass()) {}
        changed = merge_by_hashing();
      }
    }
    std::stable_sort(rects_.begin(), rects_.end(), vector_before);
    return std::move(rects_);
  }

 private:
  // When only one dimension varies (always so with one dimension), everything is one rectangle.
  bool merge_univariate() {
    if (rects_.size() < 2) return true;
    std::optional<size_t> varying;
    for (size_t d = 0; d < rects_.front().size(); ++d) {
      bool same = std::all_of(rects_.begin(), rects_.end(),
                              [&](const Vector& v) { return same_set(v[d], rects_.front()[d]); });
      if (same) continue;
      if (varying) return false;
      varying = d;
    }
    if (!varying) return true;  // identical rectangles cannot happen: names are unique
    NumberSet& all = rects_.front()[*varying];
    for (size_t i = 1; i < rects_.size(); ++i)
      all.insert(all.end(), rects_[i][*varying].begin(), rects_[i][*varying].end());
    normalise(all);
    rects_.resize(1);
    return true;
  }

  void absorb(Vector& into, Vector& from, size_t d) {
    into[d].insert(into[d].end(), from[d].begin(), from[d].end());
    from.clear();  // gone: compacted away at the end of the pass
  }

  void compact() {
    rects_.erase(std::remove_if(rects_.begin(), rects_.end(), [](const Vector& v) { return v.empty(); }),
                 rects_.end());
    for (auto& v : rects_)
      for (auto& set : v) normalise(set);
  }

  bool easy_pass() {
    std::stable_sort(rects_.begin(), rects_.end(), vector_before);
    bool changed = false;
    for (size_t i = 0; i < rects_.size(); ++i) {
      if (rects_[i].empty()) continue;
      for (size_t j = i + 1; j < rects_.size(); ++j) {
        if (rects_[j].empty()) continue;
        auto d = only_difference(rects_[i], rects_[j]);
        if (!d) break;
        absorb(rects_[i], rects_[j], *d);
        changed = true;
      }
    }
    compact();
    return changed;
  }

  bool merge_by_hashing() {
    bool changed = false;
    for (size_t d = 0; d < (rects_.empty() ? 0 : rects_.front().size()); ++d) {
      // Rectangles whose other dimensions are the same sets merge along d.
      auto others_less = [d](const Vector* a, const Vector* b) {
        for (size_t k = 0; k < a->size(); ++k) {
          if (k == d || same_set((*a)[k], (*b)[k])) continue;
          return set_less((*a)[k], (*b)[k]);
        }
        return false;
      };
      std::map<const Vector*, Vector*, decltype(others_less)> first_with(others_less);
      for (auto& v : rects_) {
        auto [it, inserted] = first_with.emplace(&v, &v);
        if (inserted) continue;
        absorb(*it->second, v, d);
        changed = true;
      }
      compact();
    }
    return changed;
  }

  std::vector<Vector> rects_;
};

struct FoldedPattern {
  std::string pattern;
  std::vector<Vector> rects;
};

std::vector<FoldedPattern> fold_sets(const std::vector<std::string>& names) {
  using Tuple = std::vector<std::pair<int, long>>;  // (width, value) per dimension
  std::map<std::string, std::vector<Tuple>> by_pattern;
  for (const auto& name : names) {
    SplitName s = split_name(name);
    Tuple key;
    for (const auto& n : s.numbers) key.emplace_back(n.width, n.value);
    by_pattern[s.pattern].push_back(std::move(key));
  }
  std::vector<FoldedPattern> out;
  for (auto& [pattern, tuples] : by_pattern) {
    std::sort(tuples.begin(), tuples.end());
    tuples.erase(std::unique(tuples.begin(), tuples.end()), tuples.end());
    std::vector<Vector> rects;
    rects.reserve(tuples.size());
    for (const auto& t : tuples) {
      Vector v;
      for (auto [w, val] : t) v.push_back(NumberSet{Number{val, w}});
      rects.push_back(std::move(v));
    }
    out.push_back({pattern, RectangleMerger(std::move(rects)).merge()});
  }
  return out;
}

std::string fill_pattern(const std::string& pattern, const std::vector<std::string>& parts) {
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern.compare(i, 2, "%s") == 0) {
      out += parts[k++];
      ++i;
    } else if (pattern.compare(i, 2, "%%") == 0) {
      out += '%';
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

void expand_rect(const std::string& pattern, const Vector& rect, size_t dim,
                 std::vector<std::string>& parts, std::vector<std::string>& out) {
  if (dim == rect.size()) {
    out.push_back(fill_pattern(pattern, parts));
    return;
  }
  for (const auto& n : rect[dim]) {
    parts.push_back(write_number(n));
    expand_rect(pattern, rect, dim + 1, parts, out);
    parts.pop_back();
  }
}

}  // namespace

std::vector<std::string> split_outside_brackets(std::string_view text, char separator) {
  std::vector<std::string> out;
  int depth = 0;
  std::string current;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == separator && depth <= 0) {
      out.push_back(std::move(current));
      current.clear();
    } else {
      current += c;
    }
  }
  out.push_back(std::move(current));
  return out;
}

void HostBudget::spend(std::size_t n, std::string_view text) {
  used_ = saturating_add(used_, n);
  if (used_ > kMaxHostListSize)
    reject(text, fmt::format("names more than {} hosts{}; check the ranges", kMaxHostListSize,
                             used_ > n ? " together with the lists before it" : ""));
}

std::vector<std::string> expand_hostlist(std::string_view text, HostBudget* budget) {
  HostBudget own;
  HostBudget& spent = budget ? *budget : own;
  std::vector<Element> elements;
  size_t total = 0;
  for (const std::string& element : split_outside_brackets(text, ',')) {
    std::string_view part = element;  // "a, b" in YAML: the spaces around names go
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (part.empty())
      reject(text, text.empty() ? "no host names" : "empty name between commas");
    Element e = parse_element(text, part);
    size_t count = 1;
    for (const auto& g : e.groups) count = saturating_mul(count, range_count(g));
    spent.spend(count, text);
    total += count;
    elements.push_back(std::move(e));
  }
  std::vector<std::string> out;
  out.reserve(total);
  for (const auto& e : elements) expand_into(e, 0, "", out);
  return out;
}

std::string fold_hostlist(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& folded : fold_sets(names)) {
    for (const auto& rect : folded.rects) {
      std::vector<std::string> parts;
      for (const auto& dim : rect) {
        std::string numbers = fold_numbers(dim);
        parts.push_back(dim.size() > 1 ? "[" + numbers + "]" : numbers);
      }
      if (!out.empty()) out += ',';
      out += fill_pattern(folded.pattern, parts);
    }
  }
  return out;
}

std::vector<std::string> sort_hostlist(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& folded : fold_sets(names))
    for (const auto& rect : folded.rects) {
      std::vector<std::string> parts;
      expand_rect(folded.pattern, rect, 0, parts, out);
    }
  return out;
}

}  // namespace muster
