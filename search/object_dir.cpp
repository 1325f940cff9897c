#include "search/object_dir.hpp"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "system/subprocess.hpp"

namespace ft {

ObjectDir::ObjectDir() : path(std::filesystem::temp_directory_path() / fmt::format("flytune-objects-{}", getpid())) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
}

Result<std::string> write_object(const std::filesystem::path& dir, const CodeObject& co) {
  const auto path = dir / (co.hash + std::string(code_object_extension(co.backend)));
  if (!std::filesystem::exists(path)) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(co.binary.data()), std::streamsize(co.binary.size()));
    if (!f) return fail(Errc::io, "cannot write a code object", path.string());
  }
  return path.string();
}

ObjectDir::~ObjectDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

void remove_stale_object_dirs() {
  std::error_code ec;
  const auto tmp = std::filesystem::temp_directory_path(ec);
  if (ec) return;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view prefix = "flytune-objects-";
    if (!name.starts_with(prefix)) continue;
    long pid = 0;
    const std::string_view digits = std::string_view(name).substr(prefix.size());
    auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc{} || end != digits.data() + digits.size() || process_alive(pid)) continue;
    std::error_code rm;
    std::filesystem::remove_all(entry.path(), rm);
  }
}

}  // namespace ft
