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
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "generator/target.hpp"
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

// Help texts name targets only from generator/targets.def: a word that looks like a
// target ("gfx1100", "sm_100a") must be a row, a help with --target names every row,
// and the lists equal what the table builds.
std::string squeeze(const std::string& text) {  // whitespace runs -> one space (wrapped help)
  std::string out;
  for (char c : text) {
    const bool space = std::isspace(static_cast<unsigned char>(c));
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  return out;
}

std::vector<std::string> target_words(const std::string& text) {
  static const std::regex target_re(R"(\b(gfx[0-9][0-9a-z]*|sm_[0-9]+[a-z]?)\b)");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), target_re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

// Every help text of the binary: the top level, each command and each view, by name.
std::vector<std::pair<std::string, std::string>> all_help_texts() {
  std::vector<std::pair<std::string, std::string>> out;
  auto top = run_flytune({"--help"});
  out.emplace_back("flytune", top.output);
  for (const std::string& command : subcommands(top.output)) {
    auto help = run_flytune({command, "--help"});
    out.emplace_back(command, help.output);
    for (const std::string& view : subcommands(help.output))
      out.emplace_back(command + " " + view, run_flytune({command, view, "--help"}).output);
  }
  return out;
}

TEST(HelpTargets, EveryTargetNamedIsARowAndTargetOptionsNameAll) {
  const auto helps = all_help_texts();
  ASSERT_GE(helps.size(), 10u);
  int with_target = 0;
  for (const auto& [where, help] : helps) {
    for (const std::string& word : target_words(help))
      EXPECT_NE(find_target(word), nullptr) << "flytune " << where << " --help names " << word
                                            << ", which generator/targets.def has no row for";
    if (!long_options(help).contains("--target")) continue;
    ++with_target;
    for (const Target& t : all_targets())
      EXPECT_TRUE(mentions(help, std::string(t.name))) << "flytune " << where << " --help: --target misses " << t.name;
  }
  EXPECT_GE(with_target, 7) << "generate, compile, verify, search, export, db winners and db variants take --target";
}

TEST(HelpTargets, ListsAreBuiltFromTheTable) {
  const std::string all_or = known_target_names(" or ");
  const std::vector<std::pair<std::vector<std::string>, std::string>> expected{
      {{"generate", "--help"}, "--target TEXT REQUIRED Target: " + all_or},
      {{"compile", "--help"}, "--target TEXT REQUIRED Target: " + all_or},
      {{"verify", "--help"}, "Target (with --emulate: any of " + known_target_names() + ")"},
      {{"search", "--help"}, "Target(s) to build: " + all_or + "; with a GPU, must match it (default: the GPU's own; dry run: " +
                                 dry_run_default_names() + ")"},
      {{"export", "--help"}, "Only winners of this target (" + all_or + ")"},
      {{"db", "winners", "--help"}, "Only devices of this target (" + all_or + ")"},
      {{"db", "variants", "--help"}, "Only this target (" + all_or + ")"}};
  for (const auto& [args, text] : expected) {
    auto help = run_flytune(args);
    ASSERT_EQ(help.exit_code, 0) << help.output;
    EXPECT_NE(squeeze(help.output).find(text), std::string::npos) << args[0] << ": wants \"" << text << "\" in\n" << help.output;
  }
  auto r = run_flytune({"verify", "--emulate"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--emulate needs --target (" + all_or + ")"), std::string::npos) << r.output;
}

// docs/USAGE.md too: every target it names is a row, and the --target rows list the table.
TEST(HelpTargets, UsageDocNamesTheTablesTargets) {
  const std::string doc = read_usage_doc();
  ASSERT_FALSE(doc.empty());
  for (const std::string& word : target_words(doc))
    EXPECT_NE(find_target(word), nullptr) << "docs/USAGE.md names " << word << ", which generator/targets.def has no row for";
  EXPECT_NE(doc_section(doc, "generate").find("| `--target T` | " + known_target_names(" or ") + " (required) |"), std::string::npos);
  EXPECT_NE(doc_section(doc, "search").find("dry run: " + dry_run_default_names() + ")"), std::string::npos);
}

}  // namespace
}  // namespace ft
