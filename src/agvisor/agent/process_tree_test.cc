#include "agvisor/agent/process_tree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

namespace agvisor::agent {
namespace {

TEST(ParseProcStatTest, Plain) {
  auto p = ParseProcStat("1234 (sleep) S 1 1234 1234 0 -1 4194560 103 0 0 0");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->pid, 1234);
  EXPECT_EQ(p->ppid, 1);
  EXPECT_EQ(p->state, 'S');
}

TEST(ParseProcStatTest, CommandNameWithSpacesAndParens) {
  auto p = ParseProcStat("77 (a) (b) Z c) Z 42 77 77 0");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->pid, 77);
  EXPECT_EQ(p->ppid, 42);
  EXPECT_EQ(p->state, 'Z');
}

TEST(ParseProcStatTest, Malformed) {
  for (const char* bad :
       {"", "12", "x (a) S 1", "12 (a) S", "12 (a) S x 3", "12 (a)S 1 2", "12 a) S 1 2"}) {
    EXPECT_FALSE(ParseProcStat(bad)) << bad;
  }
}

TEST(DescendantsOfTest, WalksChainsAndSkipsOthers) {
  std::vector<ProcessInfo> table = {
      {1, 0, 'S'},   {10, 1, 'S'}, {11, 10, 'S'}, {12, 11, 'Z'},
      {13, 10, 'S'}, {20, 1, 'S'}, {21, 20, 'S'},
  };
  auto d = DescendantsOf(10, table);
  std::sort(d.begin(), d.end());
  EXPECT_EQ(d, (std::vector<pid_t>{11, 12, 13}));
  EXPECT_TRUE(DescendantsOf(21, table).empty());
  EXPECT_TRUE(DescendantsOf(99, table).empty());
}

TEST(DescendantsOfTest, SurvivesInconsistentTable) {
  // A cycle cannot exist in a snapshot, but /proc is read while processes come and go.
  std::vector<ProcessInfo> table = {{2, 3, 'S'}, {3, 2, 'S'}, {4, 1, 'S'}};
  auto d = DescendantsOf(2, table);
  EXPECT_LE(d.size(), table.size());
}

TEST(ReadProcessTableTest, SeesThisProcessAndItsParent) {
  auto t = ReadProcessTable();
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  auto self =
      std::find_if(t->begin(), t->end(), [](const ProcessInfo& p) { return p.pid == ::getpid(); });
  ASSERT_NE(self, t->end());
  EXPECT_EQ(self->ppid, ::getppid());
  EXPECT_FALSE(ReadProcessTable("/nonexistent-proc").ok());
}

}  // namespace
}  // namespace agvisor::agent
