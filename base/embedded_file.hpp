#pragma once
// A file carried inside the binary (kernel templates, SQL migrations).
#include <span>
#include <string_view>

namespace ft {

struct EmbeddedFile {
  std::string_view path;  // relative to its source folder, e.g. "ft_port.hpp"
  std::string_view text;
};

}  // namespace ft
