#include "compile/analyze/objdump_disassembler.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "system/subprocess.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;

// A code object written to a private file, removed when this goes away.
class TempObject {
 public:
  explicit TempObject(std::span<const std::byte> bytes) {
    std::error_code ec;
    fs::path base = fs::temp_directory_path(ec);
    std::string pattern = ((ec ? fs::path("/tmp") : base) / "flytune-objdump-XXXXXX").string();
    int fd = mkstemp(pattern.data());
    if (fd < 0) return;
    close(fd);
    std::ofstream f(pattern, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (f.good()) path_ = pattern;
  }
  TempObject(const TempObject&) = delete;
  TempObject& operator=(const TempObject&) = delete;
  ~TempObject() {
    std::error_code ec;
    if (!path_.empty()) fs::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string_view first_word(std::string_view line) {
  std::size_t start = 0;
  while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
  std::size_t end = start;
  while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
  return line.substr(start, end - start);
}

}  // namespace

InstructionMix parse_objdump_listing(std::string_view listing, std::string_view symbol) {
  InstructionMix mix;
  std::string header = fmt::format("<{}>:", symbol);
  bool inside = false;
  for (std::string_view rest = listing; !rest.empty();) {
    auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    if (line.ends_with(">:")) {  // "0000000000001900 <name>:" starts a function's listing
      inside = line.ends_with(header);
      continue;
    }
    if (!inside || line.empty() || !std::isspace(static_cast<unsigned char>(line.front()))) continue;
    std::string_view word = first_word(line);
    if (word.empty()) continue;
    if (word == "<unknown>") {
      ++mix.undecoded;
      continue;
    }
    ++mix.mnemonics[std::string(word)];
    ++mix.total;
  }
  return mix;
}

Result<InstructionMix> disassemble_with_objdump(const ClangInfo& clang, const Target& target,
                                                std::span<const std::byte> binary, std::string_view symbol) {
  std::string objdump = clang.tool("llvm-objdump");
  if (access(objdump.c_str(), X_OK) != 0)
    return fail(Errc::toolchain,
                fmt::format("disassembling {} needs LLVM >= {}: no {} beside clang {} (install llvm-{})", target.name,
                            target.min_llvm_major, objdump, clang.version, clang.major),
                std::string(target.name));
  TempObject file(binary);
  if (file.path().empty()) return fail(Errc::io, "cannot write the code object to a temporary file");
  std::vector<std::string> argv = clang.command(objdump);
  argv.insert(argv.end(), {"-d", fmt::format("--mcpu={}", target.name), "--no-show-raw-insn", "--no-leading-addr",
                           fmt::format("--disassemble-symbols={}", symbol), file.path()});
  auto run = FT_TRY(run_capture(argv, {}, std::chrono::seconds(120)));
  if (run.exit_code != 0 || run.timed_out)
    return fail(Errc::toolchain, fmt::format("{} failed: {}", objdump, run.output.substr(0, run.output.find('\n'))));
  InstructionMix mix = parse_objdump_listing(run.output, symbol);
  if (mix.total == 0)
    return fail(Errc::toolchain, fmt::format("{} listed no instructions of {}", objdump, symbol), std::string(target.name));
  return mix;
}

}  // namespace ft
