#include "compile/cache.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "system/hash.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;
constexpr int kFormat = 1;

fs::path entry_path(const std::string& dir, const std::string& key, std::string_view ext) {
  return fs::path(dir) / key.substr(0, 2) / (key + std::string(ext));
}

std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return std::nullopt;
  return text;
}

// Write under a name no other writer uses, then rename over the final name.
Status write_atomically(const fs::path& p, std::string_view bytes) {
  static std::atomic<unsigned> counter{0};
  fs::path tmp = p;
  tmp += fmt::format(".tmp.{}.{}", getpid(), counter++);
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.close();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return fail(Errc::io, "cannot write cache entry", tmp.string());
    }
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return fail(Errc::io, fmt::format("cannot rename cache entry: {}", ec.message()), p.string());
  }
  return {};
}

std::optional<std::string> string_field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

std::optional<CodeObject> CompileCache::load(const std::string& key) const {
  if (key.size() < 2) return std::nullopt;
  auto meta_text = read_file(entry_path(dir_, key, ".json"));
  if (!meta_text) return std::nullopt;
  auto meta = nlohmann::json::parse(*meta_text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) return std::nullopt;
  auto format = meta.find("format");
  if (format == meta.end() || !format->is_number_integer() || format->get<int>() != kFormat) return std::nullopt;
  auto backend = string_field(meta, "backend");
  auto hash = string_field(meta, "hash");
  auto version = string_field(meta, "toolchain_version");
  auto log = string_field(meta, "log");
  auto ptx = string_field(meta, "ptx");
  if (!backend || !hash || !version || !log || !ptx) return std::nullopt;

  auto binary = read_file(entry_path(dir_, key, ".bin"));
  if (!binary || xxh3_128_hex(*binary) != *hash) return std::nullopt;  // missing or damaged

  CodeObject object;
  bool known_backend = false;
  for (Backend b : {Backend::comgr, Backend::clang, Backend::nvrtc})
    if (to_string(b) == *backend) {
      object.backend = b;
      known_backend = true;
    }
  if (!known_backend) return std::nullopt;
  auto bytes = std::as_bytes(std::span(*binary));
  object.binary.assign(bytes.begin(), bytes.end());
  object.hash = *hash;
  object.cache_key = key;
  object.toolchain_version = *version;
  object.log = *log;
  object.ptx = *ptx;
  object.from_cache = true;
  return object;
}

Status CompileCache::store(const CodeObject& object) const {
  const std::string& key = object.cache_key;
  if (key.size() < 2) return fail(Errc::internal, "cache entry without a key", object.kernel_name);
  std::error_code ec;
  fs::create_directories(entry_path(dir_, key, ".bin").parent_path(), ec);
  if (ec) return fail(Errc::io, fmt::format("cannot create cache folder: {}", ec.message()), dir_);
  nlohmann::json meta{{"format", kFormat},
                      {"backend", std::string(to_string(object.backend))},
                      {"toolchain_version", object.toolchain_version},
                      {"hash", object.hash},
                      {"kernel_name", object.kernel_name},
                      {"target", object.target},
                      {"log", object.log},
                      {"ptx", object.ptx}};
  // The binary first: a description only ever names a binary already in place.
  std::string_view binary(reinterpret_cast<const char*>(object.binary.data()), object.binary.size());
  FT_CHECK(write_atomically(entry_path(dir_, key, ".bin"), binary));
  return write_atomically(entry_path(dir_, key, ".json"),
                          meta.dump(1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace ft
