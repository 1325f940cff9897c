// docs/USAGE.md lists every command and option that `--help` shows: each
// command has a "### `flytune CMD`" section naming every one of its options
// (and, for `db`, every view and the views' options). Parsed from the real
// binary's help, so a new option without a doc row fails here.
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/run_flytune.hpp"

namespace ft {
namespace {

using test::run_flytune;

std::string read_usage_doc() {
  std::ifstream f(std::filesystem::path(FT_TEST_SOURCE_DIR) / "docs" / "USAGE.md");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The lines of a CLI11 help section ("SUBCOMMANDS:" or "OPTIONS:"), up to the
// next blank line.
std::vector<std::string> section(const std::string& help, const std::string& title) {
  std::vector<std::string> out;
  std::istringstream in(help);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside) {
      std::string upper = line;
      for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
      inside = upper.rfind(title, 0) == 0;
      continue;
    }
    if (line.find_first_not_of(' ') == std::string::npos) break;
    out.push_back(line);
  }
  return out;
}

// The subcommand names of a help text.
std::vector<std::string> subcommands(const std::string& help) {
  std::vector<std::string> out;
  for (const std::string& line : section(help, "SUBCOMMANDS:")) {
    std::istringstream words(line);
    std::string name;
    if (words >> name) out.push_back(name);
  }
  return out;
}

// Every long option ("--tokens") a help text shows, except --help.
std::set<std::string> long_options(const std::string& help) {
  std::set<std::string> out;
  static const std::regex option_re(R"((^|[\s,])(--[a-z][a-z0-9-]*))");
  for (const std::string& line : section(help, "OPTIONS:")) {
    // Only the option column: CLI11 starts each option line with spaces then '-'.
    const auto first = line.find_first_not_of(' ');
    if (first == std::string::npos || line[first] != '-') continue;
    const std::string column = line.substr(first, line.find("  ", first) - first);
    for (auto it = std::sregex_iterator(column.begin(), column.end(), option_re); it != std::sregex_iterator(); ++it)
      if ((*it)[2] != "--help") out.insert((*it)[2]);
  }
  return out;
}

// Whether `text` names `word` as a whole word ("--db" is not in "--db-file").
bool mentions(const std::string& text, const std::string& word) {
  auto part_of_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; };
  for (auto at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool starts = at == 0 || !part_of_word(text[at - 1]);
    const bool ends = at + word.size() == text.size() || !part_of_word(text[at + word.size()]);
    if (starts && ends) return true;
  }
  return false;
}

// The text of "### `flytune CMD`" up to the next "### ".
std::string doc_section(const std::string& doc, const std::string& command) {
  const std::string head = "### `flytune " + command + "`";
  const auto start = doc.find(head);
  if (start == std::string::npos) return {};
  const auto end = doc.find("\n### ", start + head.size());
  return doc.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

TEST(UsageDoc, ListsEveryCommandAndOptionHelpShows) {
  const std::string doc = read_usage_doc();
  ASSERT_FALSE(doc.empty()) << "docs/USAGE.md not found under " << FT_TEST_SOURCE_DIR;
  auto top = run_flytune({"--help"});
  ASSERT_EQ(top.exit_code, 0) << top.output;
  const std::vector<std::string> commands = subcommands(top.output);
  ASSERT_GE(commands.size(), 9u) << top.output;  // targets db report search generate compile verify devices export
  for (const std::string& command : commands) {
    const std::string text = doc_section(doc, command);
    ASSERT_FALSE(text.empty()) << "docs/USAGE.md has no \"### `flytune " << command << "`\" section";
    auto help = run_flytune({command, "--help"});
    ASSERT_EQ(help.exit_code, 0) << help.output;
    for (const std::string& option : long_options(help.output))
      EXPECT_TRUE(mentions(text, option)) << "docs/USAGE.md, flytune " << command << ": no " << option;
    for (const std::string& view : subcommands(help.output)) {
      EXPECT_TRUE(mentions(text, "`" + view)) << "docs/USAGE.md, flytune " << command << ": no view " << view;
      auto view_help = run_flytune({command, view, "--help"});
      ASSERT_EQ(view_help.exit_code, 0) << view_help.output;
      for (const std::string& option : long_options(view_help.output))
        EXPECT_TRUE(mentions(text, option)) << "docs/USAGE.md, flytune " << command << " " << view << ": no " << option;
    }
  }
}

TEST(UsageDoc, EveryCommandHelpHasExamples) {
  auto top = run_flytune({"--help"});
  ASSERT_EQ(top.exit_code, 0) << top.output;
  EXPECT_NE(top.output.find("Examples:"), std::string::npos) << top.output;
  for (const std::string& command : subcommands(top.output)) {
    auto help = run_flytune({command, "--help"});
    EXPECT_NE(help.output.find("Examples:\n  flytune " + command), std::string::npos) << command << ":\n" << help.output;
  }
}

}  // namespace
}  // namespace ft
