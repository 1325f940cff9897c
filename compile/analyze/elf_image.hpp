#pragma once
// A read-only view of a 64-bit little-endian ELF file in memory (AMDGPU code
// objects and CUDA cubins), enough to find sections, notes and symbols.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace ft {

inline constexpr std::uint16_t kElfMachineAmdgpu = 224;  // EM_AMDGPU
inline constexpr std::uint16_t kElfMachineCuda = 190;    // EM_CUDA

struct ElfSection {
  std::string name;
  std::uint32_t type = 0;
  std::uint64_t address = 0;
  std::uint64_t offset = 0;  // in the file
  std::uint64_t size = 0;
};

struct ElfSymbol {
  std::string name;
  std::uint8_t type = 0;     // STT_FUNC, STT_OBJECT, ...
  std::uint16_t section = 0; // index into sections (0: undefined)
  std::uint64_t value = 0;   // address
  std::uint64_t size = 0;
};

class ElfImage {
 public:
  // Checks the header and that every section lies inside `bytes`; the image
  // refers to `bytes`, which must outlive it.
  static Result<ElfImage> parse(std::span<const std::byte> bytes);

  std::uint16_t machine() const { return machine_; }
  std::uint16_t type() const { return type_; }  // ET_REL, ET_EXEC, ET_DYN
  std::uint32_t flags() const { return flags_; }
  const std::vector<ElfSection>& sections() const { return sections_; }
  const std::vector<ElfSymbol>& symbols() const { return symbols_; }  // .symtab, else .dynsym

  const ElfSection* section(std::string_view name) const;
  const ElfSymbol* symbol(std::string_view name) const;
  // The file bytes of a defined symbol (its size, or up to the next symbol of
  // its section when the size is 0).
  Result<std::span<const std::byte>> symbol_bytes(const ElfSymbol& s) const;
  std::span<const std::byte> section_bytes(const ElfSection& s) const;

 private:
  std::span<const std::byte> bytes_;
  std::uint16_t machine_ = 0, type_ = 0;
  std::uint32_t flags_ = 0;
  std::vector<ElfSection> sections_;
  std::vector<ElfSymbol> symbols_;
};

}  // namespace ft
