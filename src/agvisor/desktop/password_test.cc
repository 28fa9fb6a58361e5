#include "agvisor/desktop/password.h"

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "agvisor/desktop/des.h"

namespace agvisor::desktop {
namespace {

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

TEST(Password, IsPasswordAcceptsOnlyWhatNewPasswordMakes) {
  EXPECT_TRUE(IsPassword(NewPassword()));
  EXPECT_TRUE(IsPassword("aZ09bY18"));
  EXPECT_FALSE(IsPassword(""));
  EXPECT_FALSE(IsPassword("aZ09bY1"));    // 7
  EXPECT_FALSE(IsPassword("aZ09bY18x"));  // 9
  EXPECT_FALSE(IsPassword("aZ09bY1\n"));
  EXPECT_FALSE(IsPassword("aZ09bY1\x1b"));  // an escape sequence for the terminal that prints it
  EXPECT_FALSE(IsPassword(std::string("aZ09bY1\0", 8)));
}

}  // namespace
}  // namespace agvisor::desktop
