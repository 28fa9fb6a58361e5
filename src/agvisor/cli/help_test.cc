#include "agvisor/cli/help.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

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
