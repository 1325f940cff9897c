#pragma once
// The kernel templates as carried inside the binary.
#include <span>

#include "base/embedded_file.hpp"

namespace ft::templates {

std::span<const EmbeddedFile> files();  // generated at build time

}  // namespace ft::templates
