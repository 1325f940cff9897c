#pragma once
// A shared library opened at run time (libcuda, libamdhip64, libnvrtc,
// libamd_comgr, libLLVM), so one flytune binary runs on machines without them
// and says which one is missing.
#include <initializer_list>
#include <string>
#include <string_view>

#include "base/error.hpp"

namespace ft {

class DynLib {
 public:
  DynLib() = default;
  ~DynLib();
  DynLib(DynLib&& o) noexcept;
  DynLib& operator=(DynLib&& o) noexcept;
  DynLib(const DynLib&) = delete;
  DynLib& operator=(const DynLib&) = delete;

  // How long the code stays mapped. Vendor runtimes and compilers stay for the
  // process (unloading them mid-process is unsafe, and leak checkers can still
  // name them); libraries flytune builds itself (emulated kernels) unload on close.
  enum class Lifetime { process, until_closed };

  // Tries each name in order (sonames, then absolute paths); the error lists
  // all tried names and the last dlerror().
  static Result<DynLib> open(std::initializer_list<std::string_view> names, std::string_view what,
                             Lifetime lifetime = Lifetime::process);

  bool loaded() const { return handle_ != nullptr; }
  const std::string& path() const { return path_; }  // the name that loaded

  void* symbol(const char* name) const;
  // Resolve a function into a typed pointer; false when the symbol is missing.
  template <class Fn>
  bool bind(Fn*& out, const char* name) const {
    out = reinterpret_cast<Fn*>(symbol(name));
    return out != nullptr;
  }

 private:
  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace ft
