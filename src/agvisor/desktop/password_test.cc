#include "agvisor/desktop/password.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "agvisor/desktop/vnc.h"

namespace agvisor::desktop {
namespace {

struct Entry {
  char type = 0;
  unsigned mode = 0;
  std::string contents;
};

// The entries of a ustar archive by name (just enough of the format for TarWriter's output).
std::map<std::string, Entry> ReadUstar(const std::string& tar) {
  std::map<std::string, Entry> out;
  for (std::size_t at = 0; at + 512 <= tar.size();) {
    const std::string name = tar.substr(at, 100).c_str();
    if (name.empty()) break;  // the end-of-archive blocks
    Entry e;
    e.mode = static_cast<unsigned>(std::stoul(tar.substr(at + 100, 8), nullptr, 8));
    const std::size_t size = std::stoul(tar.substr(at + 124, 12), nullptr, 8);
    e.type = tar[at + 156];
    e.contents = tar.substr(at + 512, size);
    out[name] = e;
    at += 512 + (size + 511) / 512 * 512;
  }
  return out;
}

TEST(Password, NewPasswordsAreEightAlphanumericsAndDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string pw = NewPassword();
    ASSERT_EQ(pw.size(), vnc::kMaxPasswordLength);
    for (char c : pw) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << pw;
    seen.insert(pw);
  }
  // 62^8 possibilities: a repeat in 100 draws means the randomness is broken.
  EXPECT_EQ(seen.size(), 100u);
}

TEST(Password, ArchiveHoldsBothFilesForRootOnly) {
  auto tar = PasswordArchive("s3cret");
  ASSERT_TRUE(tar.ok()) << tar.error().message();
  const auto entries = ReadUstar(*tar);
  ASSERT_EQ(entries.size(), 5u);
  const Entry& dir = entries.at("run/agvisor/desktop/");
  EXPECT_EQ(dir.type, '5');
  EXPECT_EQ(dir.mode, 0700u);
  const Entry& plain = entries.at("run/agvisor/desktop/password");
  EXPECT_EQ(plain.contents, "s3cret");
  EXPECT_EQ(plain.mode, 0600u);
  const Entry& vnc = entries.at("run/agvisor/desktop/vnc.passwd");
  EXPECT_EQ(vnc.contents, vnc::VncPasswordFile("s3cret"));
  EXPECT_EQ(vnc.mode, 0600u);
}

TEST(Password, ArchiveRefusesPasswordsVncCannotUse) {
  EXPECT_EQ(PasswordArchive("").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(PasswordArchive("123456789").error().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agvisor::desktop
