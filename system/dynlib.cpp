#include "system/dynlib.hpp"

#include <dlfcn.h>

#include <utility>

#include <fmt/format.h>

namespace ft {

DynLib::~DynLib() {
  if (handle_) dlclose(handle_);
}

DynLib::DynLib(DynLib&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)), path_(std::move(o.path_)) {}

DynLib& DynLib::operator=(DynLib&& o) noexcept {
  if (this != &o) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(o.handle_, nullptr);
    path_ = std::move(o.path_);
  }
  return *this;
}

Result<DynLib> DynLib::open(std::initializer_list<std::string_view> names, std::string_view what, Lifetime lifetime) {
  const int flags = RTLD_NOW | RTLD_LOCAL | (lifetime == Lifetime::process ? RTLD_NODELETE : 0);
  std::string tried, last_error;
  for (std::string_view n : names) {
    if (n.empty()) continue;
    std::string name(n);
    dlerror();
    if (void* h = dlopen(name.c_str(), flags)) {
      DynLib lib;
      lib.handle_ = h;
      lib.path_ = name;
      return lib;
    }
    if (const char* e = dlerror()) last_error = e;
    tried += (tried.empty() ? "" : ", ") + name;
  }
  return fail(Errc::not_found, fmt::format("{} not found (tried {})", what, tried));
}

void* DynLib::symbol(const char* name) const { return handle_ ? dlsym(handle_, name) : nullptr; }

}  // namespace ft
