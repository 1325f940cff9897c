#pragma once
// The kernel templates as carried inside the binary.
#include <optional>
#include <span>
#include <string_view>

#include "generator/embedded_file.hpp"

namespace ft::templates {

std::span<const EmbeddedFile> files();  // generated at build time
std::optional<std::string_view> find(std::string_view path);

}  // namespace ft::templates
