#include "launcher/cluster/hostfile.h"
#include "launcher/cluster/hostlist.h"

#include <gtest/gtest.h>

#include "launcher/error.h"

namespace muster {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " ") + n;
  return out;
}

struct ExpandCase {
  const char* text;
  const char* expected;  // names in written order, space-separated
};

TEST(Hostlist, ExpandsInWrittenOrderKeepingPadding) {
  const ExpandCase cases[] = {
      {"gpu01", "gpu01"},
      {"gpu[01-04]", "gpu01 gpu02 gpu03 gpu04"},
      {"gpu[8-11]", "gpu8 gpu9 gpu10 gpu11"},
      {"gpu[08-11]", "gpu08 gpu09 gpu10 gpu11"},
      {"r[1-2]n[001-002]", "r1n001 r1n002 r2n001 r2n002"},
      {"a,b,c[1,3,5-7]", "a b c1 c3 c5 c6 c7"},
      {"b,a", "b a"},  // file order is rank order: never sorted here
      {"n[1-10/3]", "n1 n4 n7 n10"},
      {"n[1-3]-ib", "n1-ib n2-ib n3-ib"},
      {"10.0.0.[1-3]", "10.0.0.1 10.0.0.2 10.0.0.3"},
      {"a, b", "a b"},
      {"n1,n1", "n1 n1"},  // duplicates are the cluster file's to report
  };
  for (const auto& c : cases) EXPECT_EQ(joined(expand_hostlist(c.text)), c.expected) << c.text;
}

TEST(Hostlist, ExpandsSixteenGpuNodes) {
  auto names = expand_hostlist("gpu[01-16]");
  ASSERT_EQ(names.size(), 16u);
  EXPECT_EQ(names.front(), "gpu01");
  EXPECT_EQ(names.back(), "gpu16");
}

struct FoldCase {
  const char* names;  // comma-separated plain names
  const char* folded; // what `nodeset -f` prints (checked against nodeset by hand and in e2e)
};

TEST(Hostlist, FoldsLikeNodeset) {
  const FoldCase cases[] = {
      {"gpu01,gpu02,gpu03", "gpu[01-03]"},
      {"gpu9,gpu10,gpu11", "gpu[9-11]"},
      {"n09,n10", "n[09-10]"},
      {"n9,n10,n01", "n[9,01,10]"},
      {"n98,n99,n100,n098", "n[98-99,098,100]"},
      {"n0,n00,n1", "n[0-1,00]"},
      {"z,y1,y2,a", "a,y[1-2],z"},
      {"a,b,c1,c3,c5,c6,c7", "a,b,c[1,3,5-7]"},
      {"r1n001,r1n002,r2n001,r2n002", "r[1-2]n[001-002]"},
      {"r1n1,r1n2,r2n1", "r1n[1-2],r2n1"},
      {"r1n1,r1n2,r2n1,r2n2,r3n5", "r[1-2]n[1-2],r3n5"},
      {"x1y1,x1y2,x1y3,x2y1,x2y2,x2y3,x3y1,x3y2,x3y3,x2y5", "x[1,3]y[1-3],x2y[1-3,5]"},
      {"n1,n1,n2", "n[1-2]"},
      {"host-1.example,host-2.example", "host-[1-2].example"},
      {"A1,a1", "A1,a1"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> names;
    std::string text = c.names;
    for (size_t start = 0;;) {
      size_t comma = text.find(',', start);
      names.push_back(text.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    EXPECT_EQ(fold_hostlist(names), c.folded) << c.names;
  }
}

TEST(Hostlist, FoldThenExpandIsTheSameSet) {
  auto names = expand_hostlist("r[1-4]n[001-016],login[1-2],gpu[07-09,11]");
  auto again = expand_hostlist(fold_hostlist(names));
  EXPECT_EQ(sort_hostlist(names), sort_hostlist(again));
  EXPECT_EQ(again.size(), names.size());
}

TEST(Hostlist, SortsAsNodesetExpands) {
  EXPECT_EQ(joined(sort_hostlist({"n002", "n01", "n1", "n10", "n3"})), "n1 n3 n01 n10 n002");
  EXPECT_EQ(joined(sort_hostlist({"b", "a", "a"})), "a b");
}

struct BadCase {
  const char* text;
  const char* problem;  // a piece of the message
};

TEST(Hostlist, RejectsMalformedListsQuotingThem) {
  const BadCase cases[] = {
      {"gpu[3-1]", "runs backwards"},
      {"gpu[1-", "never closed"},
      {"gpu1-2]", "no matching '['"},
      {"gpu[]", "empty range"},
      {"gpu[1,]", "empty range"},
      {"a,,b", "empty name"},
      {"", "no host names"},
      {"gpu[x-y]", "not a number"},
      {"gpu[1--2]", "not a number"},
      {"a b", "white space"},
      {"n[1-100001]", "more than 100000 hosts"},
      {"r[1-1000]n[1-1000]", "more than 100000 hosts"},
      {"gpu[1-2/0]", "step"},
  };
  for (const auto& c : cases) {
    try {
      expand_hostlist(c.text);
      ADD_FAILURE() << "accepted '" << c.text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Config);
      std::string message = e.what();
      EXPECT_NE(message.find(std::string("'") + c.text + "'"), std::string::npos) << message;
      EXPECT_NE(message.find(c.problem), std::string::npos) << message;
    }
  }
}

TEST(Hostlist, AcceptsExactlyTheLimit) {
  EXPECT_EQ(expand_hostlist("n[1-100000]").size(), kMaxHostListSize);
}

TEST(Hostlist, RangesThatMultiplyPastTheWordSizeCannotWrapUnderTheLimit) {
  // 65536 x 2^48 names: the product is 2^64, which wraps to 0 in 64 bits.
  std::string items;
  for (int i = 0; i < 281; ++i) items += "0-999999999999,";
  const std::string wraps = "n[1-65536]x[" + items + "1-474976710656]";
  try {
    expand_hostlist(wraps);
    ADD_FAILURE() << "accepted a list of 2^64 names";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("names more than 100000 hosts"), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 300u) << "a long list is quoted by its start";
  }
}

TEST(Hostlist, TheLimitHoldsForAWholeInputNotEachList) {
  HostBudget budget;
  EXPECT_EQ(expand_hostlist("a[1-60000]", &budget).size(), 60000u);
  EXPECT_THROW(expand_hostlist("b[1-60000]", &budget), Error);
  EXPECT_THROW(parse_host_option("a[1-60000]:1,b[1-60000]:1"), Error);
  std::string lines = "a[1-60000] slots=1\nb[1-60000] slots=1\n";
  EXPECT_THROW(parse_hostfile(lines, "hosts"), Error);
  EXPECT_EQ(parse_host_option("a[1-50000],b[1-50000]").nodes.size(), 100000u);
}

TEST(Hostlist, SplitsOnlyOutsideBrackets) {
  auto parts = split_outside_brackets("gpu[01,03]:4,cpu1", ',');
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0], "gpu[01,03]:4");
  EXPECT_EQ(parts[1], "cpu1");
}

}  // namespace
}  // namespace muster
