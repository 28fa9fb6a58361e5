#include "agvisor/cli/help.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "agvisor/cli/common.h"

namespace agvisor::cli {
namespace {

std::string ReadDoc() {
  std::ifstream in(AGVISOR_CLI_DOC);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether docs/cli.md's command table has a row for `path`: a line "| `PATH ...` |", or the
// second half of a shared row ("| `pause SANDBOX...` / `resume SANDBOX...` |").
bool DocHasRow(const std::string& doc, std::string_view path) {
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("| `")) continue;
    const std::string row = line.substr(0, line.find("` |") + 1);
    for (const std::string lead : {"| `", "/ `"}) {
      for (std::size_t at = row.find(lead + std::string(path)); at != std::string::npos;
           at = row.find(lead + std::string(path), at + 1)) {
        const char next = row[at + lead.size() + path.size()];
        if (next == ' ' || next == '`') return true;
      }
    }
  }
  return false;
}

TEST(SecretOptionTest, FileHostsAndHeaderOrByName) {
  auto a =
      ParseSecretOption("API_KEY=@/run/keys/a:b.txt:api.example.com,x.example:header=x-api-key");
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(a->first.name, "API_KEY");
  EXPECT_EQ(a->first.hosts, (std::vector<std::string>{"api.example.com", "x.example"}));
  EXPECT_EQ(a->first.header, "x-api-key");
  EXPECT_FALSE(a->first.value.has_value());
  EXPECT_EQ(a->second, "/run/keys/a:b.txt");
  auto by_name = ParseSecretOption("GIT_TOKEN:git.example.com");
  ASSERT_TRUE(by_name.ok());
  EXPECT_EQ(by_name->first.name, "GIT_TOKEN");
  EXPECT_EQ(by_name->second, "");
  // A value in the command line is refused, and not repeated in the message.
  auto inline_value = ParseSecretOption("K=sk-live-123:api.example.com");
  ASSERT_FALSE(inline_value.ok());
  EXPECT_NE(inline_value.error().message().find("@FILE"), std::string::npos);
  EXPECT_EQ(inline_value.error().message().find("sk-live"), std::string::npos);
  EXPECT_FALSE(ParseSecretOption("K=@f").ok());        // no host
  EXPECT_FALSE(ParseSecretOption(":a.example").ok());  // no name
}

TEST(CommandHelpTest, EveryCommandHasOneEntryAndARowInTheDocs) {
  const std::string doc = ReadDoc();
  ASSERT_FALSE(doc.empty()) << AGVISOR_CLI_DOC;
  std::set<std::string_view> seen;
  for (const CommandHelp& c : CommandHelps()) {
    EXPECT_TRUE(seen.insert(c.path).second) << "twice in cli/help.cc: " << c.path;
    EXPECT_FALSE(c.help.empty()) << c.path;
    EXPECT_TRUE(DocHasRow(doc, c.path)) << "docs/cli.md has no row for `" << c.path << "`";
  }
  EXPECT_GE(seen.size(), 20u);
}

TEST(CommandHelpTest, AddCommandTakesTheNameAndHelpFromTheTable) {
  CLI::App app;
  auto* network = AddCommand(app, "network");
  auto* create = AddCommand(*network, "network create");
  EXPECT_EQ(network->get_name(), "network");
  EXPECT_EQ(create->get_name(), "create");
  for (const CommandHelp& c : CommandHelps()) {
    if (c.path == "network create") {
      EXPECT_EQ(create->get_description(), c.help);
    }
  }
}

}  // namespace
}  // namespace agvisor::cli
