// Watcher (watch.h) on a real directory with the kernel's inotify: the event kinds, recursive
// watches of new directories (and what they held before their watch), move pairing by cookie,
// moves out of and into the tree, the bounded queue's overflow event, and the errors of Create.
#include "agvisor/agent/watch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace agvisor::agent {
namespace {

using proto::WatchEvent;
using proto::WatchEventKind;

std::string Show(const WatchEvent& e) {
  std::string s(proto::WatchEventKindName(e.kind));
  if (e.kind == WatchEventKind::kMove) s += " " + e.old_path + " ->";
  if (!e.path.empty()) s += " " + e.path;
  if (e.is_dir) s += "/";
  return s;
}

class WatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/agvisor-watch-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string P(const std::string& rel) const { return dir_ + "/" + rel; }
  void Write(const std::string& rel, const std::string& data) {
    FILE* f = std::fopen(P(rel).c_str(), "a");
    ASSERT_NE(f, nullptr) << rel;
    std::fputs(data.c_str(), f);
    std::fclose(f);
  }
  // Everything the watcher has after the kernel queued the effects of what the test did (inotify
  // events are queued by the syscalls themselves: once they returned, the fd is readable).
  std::vector<std::string> Drain(Watcher& w) {
    std::vector<std::string> out;
    pollfd p{w.fd(), POLLIN, 0};
    while (::poll(&p, 1, 0) == 1) {
      auto r = w.ReadEvents();
      EXPECT_TRUE(r.ok()) << r.error().ToString();
      if (!r.ok()) break;
    }
    for (const auto& e : w.Take(1 << 20)) out.push_back(Show(e));
    return out;
  }
  std::string dir_;
};

TEST_F(WatcherTest, CreateModifyDeleteInTheRoot) {
  auto w = Watcher::Create(dir_, /*recursive=*/false);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  Write("a.txt", "1");
  Write("a.txt", "2");  // a second modify of the same path right after is one event
  ASSERT_EQ(::mkdir(P("d").c_str(), 0755), 0);
  ASSERT_EQ(::unlink(P("a.txt").c_str()), 0);
  EXPECT_EQ(Drain(**w), (std::vector<std::string>{"create a.txt", "modify a.txt", "create d/",
                                                  "delete a.txt"}));
  // Not recursive: what happens inside d is not reported.
  Write("d/x", "1");
  EXPECT_EQ(Drain(**w), std::vector<std::string>{});
  EXPECT_EQ((*w)->watch_count(), 1u);
}

TEST_F(WatcherTest, RecursiveWatchesNewDirectoriesAndWhatTheyAlreadyHeld) {
  ASSERT_EQ(::mkdir(P("old").c_str(), 0755), 0);
  auto w = Watcher::Create(dir_, /*recursive=*/true);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_EQ((*w)->watch_count(), 2u);
  Write("old/f", "x");
  EXPECT_EQ(Drain(**w), (std::vector<std::string>{"create old/f", "modify old/f"}));
  // A tree made in one go: the watch on a/ is added after b/ and f may already exist; the
  // listing at that moment reports them (inotify alone would miss them).
  std::filesystem::create_directories(P("a/b"));
  Write("a/b/f", "x");
  auto events = Drain(**w);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front(), "create a/");
  auto has = [&](const std::string& e) {
    return std::find(events.begin(), events.end(), e) != events.end();
  };
  EXPECT_TRUE(has("create a/b/")) << ::testing::PrintToString(events);
  EXPECT_TRUE(has("create a/b/f")) << ::testing::PrintToString(events);
  // Now watched: later changes deep down arrive as themselves.
  Write("a/b/f", "y");
  ASSERT_EQ(::unlink(P("a/b/f").c_str()), 0);
  EXPECT_EQ(Drain(**w), (std::vector<std::string>{"modify a/b/f", "delete a/b/f"}));
  EXPECT_EQ((*w)->watch_count(), 4u);
}

TEST_F(WatcherTest, MovesArePairedByCookieAndDirectoriesKeepTheirWatch) {
  std::filesystem::create_directories(P("src/sub"));
  std::filesystem::create_directories(P("dst"));
  Write("src/f", "x");
  auto w = Watcher::Create(dir_, /*recursive=*/true);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  ASSERT_EQ(::rename(P("src/f").c_str(), P("dst/g").c_str()), 0);
  ASSERT_EQ(::rename(P("src/sub").c_str(), P("dst/sub2").c_str()), 0);
  EXPECT_EQ(Drain(**w),
            (std::vector<std::string>{"move src/f -> dst/g", "move src/sub -> dst/sub2/"}));
  // The moved directory's watch reports under its new name.
  Write("dst/sub2/n", "x");
  EXPECT_EQ(Drain(**w), (std::vector<std::string>{"create dst/sub2/n", "modify dst/sub2/n"}));
}

TEST_F(WatcherTest, MovesOutOfAndIntoTheTreeAreDeleteAndCreate) {
  char other[] = "/tmp/agvisor-watch-out-XXXXXX";
  ASSERT_NE(::mkdtemp(other), nullptr);
  const std::string out = other;
  std::filesystem::create_directories(P("w"));
  Write("w/f", "x");
  std::filesystem::create_directories(out + "/in/deep");
  auto w = Watcher::Create(P("w"), /*recursive=*/true);
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  ASSERT_EQ(::rename(P("w/f").c_str(), (out + "/f").c_str()), 0);
  ASSERT_EQ(::rename((out + "/in").c_str(), P("w/in").c_str()), 0);
  EXPECT_EQ(Drain(**w), (std::vector<std::string>{"delete f", "create in/", "create in/deep/"}));
  std::error_code ec;
  std::filesystem::remove_all(out, ec);
}

TEST_F(WatcherTest, AFullQueueEndsInOneOverflowEventAfterWhatItHeld) {
  auto w = Watcher::Create(dir_, /*recursive=*/false,
                           WatcherLimits{.max_watches = 16, .max_queued_events = 8});
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  for (int i = 0; i < 50; ++i) Write("f" + std::to_string(i), "x");
  auto events = Drain(**w);
  // 8 queued events (create f0, modify f0, ... f3), then the overflow; the rest were dropped.
  ASSERT_EQ(events.size(), 9u) << ::testing::PrintToString(events);
  EXPECT_EQ(events[0], "create f0");
  EXPECT_EQ(events[7], "modify f3");
  EXPECT_EQ(events[8], "overflow");
  // After the consumer has seen it, events flow again.
  Write("later", "x");
  EXPECT_EQ(Drain(**w), (std::vector<std::string>{"create later", "modify later"}));
}

TEST_F(WatcherTest, TakeHonoursTheByteBudget) {
  auto w = Watcher::Create(dir_, false);
  ASSERT_TRUE(w.ok());
  Write("aaaa", "x");  // create + modify: 14 bytes each encoded
  pollfd p{(*w)->fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 1000), 1);
  ASSERT_TRUE((*w)->ReadEvents().ok());
  EXPECT_TRUE((*w)->Take(13).empty());  // the first does not fit: nothing
  EXPECT_EQ((*w)->Take(14 + 13).size(), 1u);
  EXPECT_EQ((*w)->Take(100).size(), 1u);
  EXPECT_FALSE((*w)->has_events());
}

TEST_F(WatcherTest, TheRootGoingAwayEndsTheWatch) {
  std::filesystem::create_directories(P("r"));
  auto w = Watcher::Create(P("r"), true);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(::rmdir(P("r").c_str()), 0);
  Drain(**w);
  EXPECT_TRUE((*w)->ended());
}

TEST_F(WatcherTest, CreateErrorsSayWhatIsWrong) {
  Write("file", "x");
  auto not_dir = Watcher::Create(P("file"), true);
  ASSERT_FALSE(not_dir.ok());
  EXPECT_EQ(not_dir.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(not_dir.error().message().find("not a directory"), std::string::npos);
  auto missing = Watcher::Create(P("nope"), true);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  auto relative = Watcher::Create("tmp", true);
  ASSERT_FALSE(relative.ok());
  EXPECT_EQ(relative.error().code(), ErrorCode::kInvalidArgument);
  std::filesystem::create_directories(P("t/a/b/c"));
  auto too_many = Watcher::Create(P("t"), true, WatcherLimits{.max_watches = 3});
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.error().code(), ErrorCode::kResourceExhausted);
}

}  // namespace
}  // namespace agvisor::agent
