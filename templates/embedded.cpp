#include "templates/embedded.hpp"

namespace ft::templates {

std::optional<std::string_view> find(std::string_view path) {
  for (const EmbeddedFile& f : files())
    if (f.path == path) return f.text;
  return std::nullopt;
}

}  // namespace ft::templates
