#include "agvisor/base/strings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace agvisor {
namespace {

using ::testing::ElementsAre;

TEST(SplitTest, KeepsEveryFieldEmptyOnesIncluded) {
  EXPECT_THAT(Split("a:b:c", ':'), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Split("a::b", ':'), ElementsAre("a", "", "b"));
  EXPECT_THAT(Split(":a:", ':'), ElementsAre("", "a", ""));
  EXPECT_THAT(Split("/a/b", '/'), ElementsAre("", "a", "b"));
}

TEST(SplitTest, AStringWithoutTheSeparatorIsOneField) {
  EXPECT_THAT(Split("abc", '/'), ElementsAre("abc"));
  EXPECT_THAT(Split("", '/'), ElementsAre(""));
}

TEST(EscapeForTerminalTest, TheTitleAndClearSequenceOfAFileNameIsShownNotActedOn) {
  const std::string name = "\x1b]0;owned\a\x1b[2J";
  const std::string shown = EscapeForTerminal(name);
  EXPECT_EQ(shown, R"(\e]0;owned\x07\e[2J)");
  EXPECT_EQ(shown.find('\x1b'), std::string::npos);
}

TEST(EscapeForTerminalTest, EveryC0ControlAndDelIsEscaped) {
  for (int c = 0; c < 0x20; ++c) {
    const std::string shown = EscapeForTerminal(std::string(1, static_cast<char>(c)));
    EXPECT_EQ(shown[0], '\\') << c;
    EXPECT_GE(shown.size(), 2u) << c;
  }
  EXPECT_EQ(EscapeForTerminal("\x7f"), R"(\x7f)");
  EXPECT_EQ(EscapeForTerminal(std::string("a\0b", 3)), R"(a\x00b)");
  EXPECT_EQ(EscapeForTerminal("a\tb\nc\rd"), R"(a\tb\nc\rd)");
}

TEST(EscapeForTerminalTest, ABackslashIsEscapedSoTheOutputIsUnambiguous) {
  EXPECT_EQ(EscapeForTerminal(R"(\e)"), R"(\\e)");
  EXPECT_NE(EscapeForTerminal(R"(\e)"), EscapeForTerminal("\x1b"));
}

TEST(EscapeForTerminalTest, C1ControlsAndBidiOverridesAreEscaped) {
  EXPECT_EQ(EscapeForTerminal("\xc2\x9b"
                              "2J"),
            R"(\u009b2J)");  // CSI as a character
  EXPECT_EQ(EscapeForTerminal("a\xe2\x80\xae"
                              "b"),
            R"(a\u202eb)");  // right-to-left override
  EXPECT_EQ(EscapeForTerminal("\xe2\x81\xa6"), R"(\u2066)");
  EXPECT_EQ(EscapeForTerminal("\xe2\x80\xa8"), R"(\u2028)");
}

// Invisible format characters: "ab" and "a<ZWSP>b" would print alike (a spoofed name or path).
TEST(EscapeForTerminalTest, InvisibleFormatCharactersAreEscaped) {
  EXPECT_EQ(EscapeForTerminal("a\xe2\x80\x8b"
                              "b"),
            R"(a\u200bb)");                                   // zero width space
  EXPECT_EQ(EscapeForTerminal("\xe2\x80\x8d"), R"(\u200d)");  // zero width joiner
  EXPECT_EQ(EscapeForTerminal("\xe2\x81\xa0"), R"(\u2060)");  // word joiner
  EXPECT_EQ(EscapeForTerminal("\xe2\x81\xa4"), R"(\u2064)");  // invisible plus
  EXPECT_EQ(EscapeForTerminal("\xe2\x81\xaa"), R"(\u206a)");
  EXPECT_EQ(EscapeForTerminal("\xe2\x81\xaf"), R"(\u206f)");
  EXPECT_EQ(EscapeForTerminal("\xef\xbb\xbf"), R"(\ufeff)");  // byte order mark
  EXPECT_EQ(EscapeForTerminal("\xef\xbf\xb9"), R"(\ufff9)");
  EXPECT_EQ(EscapeForTerminal("\xef\xbf\xbb"), R"(\ufffb)");
  // Tag characters, past U+FFFF: the 8-digit form.
  EXPECT_EQ(EscapeForTerminal("\xf3\xa0\x80\x80"), R"(\U000e0000)");
  EXPECT_EQ(EscapeForTerminal("\xf3\xa0\x81\xbf"), R"(\U000e007f)");
  // Their visible neighbours stay: U+FFFC (object replacement), U+200A (hair space).
  EXPECT_EQ(EscapeForTerminal("\xef\xbf\xbc"), "\xef\xbf\xbc");
  EXPECT_EQ(EscapeForTerminal("\xe2\x80\x8a"), "\xe2\x80\x8a");  // hair space: visible width
}

TEST(EscapeForTerminalTest, InvalidUtf8BytesAreEscapedOneByOne) {
  EXPECT_EQ(EscapeForTerminal("\x9b"
                              "2J"),
            R"(\x9b2J)");                                                   // a raw 8-bit CSI
  EXPECT_EQ(EscapeForTerminal("\xc0\xaf"), R"(\xc0\xaf)");                  // overlong '/'
  EXPECT_EQ(EscapeForTerminal("\xed\xa0\x80"), R"(\xed\xa0\x80)");          // a surrogate
  EXPECT_EQ(EscapeForTerminal("\xf4\x90\x80\x80"), R"(\xf4\x90\x80\x80)");  // > U+10FFFF
  EXPECT_EQ(EscapeForTerminal("\xe2\x82"), R"(\xe2\x82)");                  // truncated
  EXPECT_EQ(EscapeForTerminal("\xe2\x82x"), R"(\xe2\x82x)");
}

TEST(EscapeForTerminalTest, PrintableTextAndUtf8AreKept) {
  const std::string text = "src/caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 ~!@#$%^&*()";
  EXPECT_EQ(EscapeForTerminal(text), text);
  EXPECT_EQ(EscapeForTerminal(""), "");
}

TEST(HexEncodeTest, TwoLowerCaseDigitsAByte) {
  EXPECT_EQ(HexEncode(std::string_view("\x00\x01\x7f\x80\xab\xff", 6)), "00017f80abff");
  EXPECT_EQ(HexEncode(""), "");
}

TEST(RandomHexTest, TwoDigitsAByteAndFreshEachCall) {
  auto a = RandomHex(16);
  auto b = RandomHex(16);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_THAT(*a, ::testing::MatchesRegex("[0-9a-f]{32}"));
  EXPECT_NE(*a, *b);
  // More than one getrandom call may be needed past 256 bytes.
  auto big = RandomHex(4096);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->size(), 8192u);
  EXPECT_EQ(RandomHex(0).value(), "");
}

}  // namespace
}  // namespace agvisor
