#include "compile/analyze/ptx_report.hpp"

#include <cctype>
#include <regex>
#include <sstream>

#include <fmt/format.h>

namespace ft {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

int first_number(const std::string& line, const std::regex& re) {
  std::smatch m;
  return std::regex_search(line, m, re) ? std::stoi(m[1].str()) : 0;
}

}  // namespace

Result<PtxasReport> parse_ptxas_report(std::string_view log, std::string_view entry) {
  static const std::regex compiling_re(R"(Compiling entry function '([^']+)')");
  static const std::regex registers_re(R"(Used (\d+) registers)");
  static const std::regex barriers_re(R"(used (\d+) barriers)");
  static const std::regex smem_re(R"((\d+) bytes smem)");
  static const std::regex cmem_re(R"((\d+) bytes cmem\[0\])");
  static const std::regex stack_re(R"((\d+) bytes stack frame)");
  static const std::regex stores_re(R"((\d+) bytes spill stores)");
  static const std::regex loads_re(R"((\d+) bytes spill loads)");

  PtxasReport report;
  bool in_entry = false, found = false, saw_used = false;
  std::string text(log);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    // Printed before the entry's "Compiling" line, naming the function.
    if (auto at = line.find("wgmma.mma_async instructions are serialized"); at != std::string::npos) {
      if (line.find(fmt::format("function '{}'", entry)) != std::string::npos) {
        auto code = line.find("(C7");
        report.wgmma_serialized = std::string(trim(line.substr(code != std::string::npos && code < at ? code : at)));
      }
      continue;
    }
    if (std::regex_search(line, m, compiling_re)) {
      in_entry = m[1].str() == entry;
      found = found || in_entry;
      continue;
    }
    if (!in_entry) continue;
    if (line.find("bytes stack frame") != std::string::npos) {
      report.stack_bytes = first_number(line, stack_re);
      report.spill_store_bytes = first_number(line, stores_re);
      report.spill_load_bytes = first_number(line, loads_re);
    } else if (line.find("Used ") != std::string::npos && line.find(" registers") != std::string::npos) {
      report.registers = first_number(line, registers_re);
      report.barriers = first_number(line, barriers_re);
      report.smem_bytes = first_number(line, smem_re);
      report.cmem0_bytes = first_number(line, cmem_re);
      saw_used = true;
    }
  }
  if (!found || !saw_used)
    return fail(Errc::not_found, "no ptxas resource report for this entry (compile with --ptxas-options=-v)",
                std::string(entry));
  return report;
}

Result<PtxInstructionMix> count_ptx_instructions(std::string_view ptx, std::string_view entry) {
  // The entry's body: from the first '{' after ".entry <name>(" to its matching '}'.
  std::string header = fmt::format(".entry {}(", entry);
  auto at = ptx.find(header);
  if (at == std::string_view::npos) {
    header = fmt::format(".entry {}\n", entry);
    at = ptx.find(header);
  }
  if (at == std::string_view::npos) return fail(Errc::not_found, "no such .entry in the PTX", std::string(entry));
  auto open = ptx.find('{', at);
  if (open == std::string_view::npos) return fail(Errc::invalid_input, "PTX entry without a body", std::string(entry));
  int depth = 0;
  std::size_t close = open;
  for (; close < ptx.size(); ++close) {
    if (ptx[close] == '/' && close + 1 < ptx.size() && ptx[close + 1] == '/') {
      close = ptx.find('\n', close);
      if (close == std::string_view::npos) break;
      continue;
    }
    if (ptx[close] == '{') ++depth;
    if (ptx[close] == '}' && --depth == 0) break;
  }
  std::string_view body = ptx.substr(open + 1, close - open - 1);

  PtxInstructionMix mix;
  while (!body.empty()) {
    auto nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body.remove_prefix(nl == std::string_view::npos ? body.size() : nl + 1);
    if (auto comment = line.find("//"); comment != std::string_view::npos) line = line.substr(0, comment);
    // Statements end with ';' (inline assembly may put several on one line).
    while (!line.empty()) {
      auto semi = line.find(';');
      std::string_view stmt = trim(line.substr(0, semi));
      line.remove_prefix(semi == std::string_view::npos ? line.size() : semi + 1);
      while (!stmt.empty() && (stmt.front() == '{' || stmt.front() == '}')) stmt = trim(stmt.substr(1));
      if (auto colon = stmt.find(':'); colon != std::string_view::npos && stmt.substr(0, colon).find(' ') == std::string_view::npos &&
                                       stmt.substr(0, colon).find('.') == std::string_view::npos)
        stmt = trim(stmt.substr(colon + 1));  // a label
      if (stmt.empty() || stmt.front() == '.') continue;  // directives and declarations
      if (stmt.front() == '@') {                           // guard predicate
        auto space = stmt.find_first_of(" \t");
        if (space == std::string_view::npos) continue;
        stmt = trim(stmt.substr(space));
      }
      std::string_view opcode = stmt.substr(0, stmt.find_first_of(" \t"));
      if (opcode.empty()) continue;
      ++mix.instructions;
      if (opcode.starts_with("mma.") || opcode.starts_with("wgmma.mma_async")) ++mix.matrix_ops[std::string(opcode)];
    }
  }
  return mix;
}

}  // namespace ft
