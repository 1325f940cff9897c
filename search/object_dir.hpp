// The folder of code objects a search hands its workers (/tmp/flytune-objects-PID),
// removed with the search, and the sweep of folders whose search died.
#pragma once

#include <filesystem>
#include <string>

#include "base/error.hpp"
#include "compile/compile.hpp"

namespace ft {

// This process's folder of code objects for the worker, removed with it.
struct ObjectDir {
  std::filesystem::path path;
  ObjectDir();
  ObjectDir(const ObjectDir&) = delete;
  ObjectDir& operator=(const ObjectDir&) = delete;
  ~ObjectDir();
};

// A code object as the file <dir>/<hash><extension> the worker loads (written
// once; a later call finds it); its path.
Result<std::string> write_object(const std::filesystem::path& dir, const CodeObject& co);

// Removes /tmp/flytune-objects-PID folders whose search process is gone (a
// kill -9 or a crash skips the guard that removes a search's own folder).
void remove_stale_object_dirs();

}  // namespace ft
