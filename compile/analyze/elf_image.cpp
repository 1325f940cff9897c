#include "compile/analyze/elf_image.hpp"

#include <elf.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace ft {
namespace {

template <class T>
bool read_at(std::span<const std::byte> bytes, std::uint64_t offset, T& out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(&out, bytes.data() + offset, sizeof(T));
  return true;
}

bool inside(std::span<const std::byte> bytes, std::uint64_t offset, std::uint64_t size) {
  return offset <= bytes.size() && size <= bytes.size() - offset;
}

std::string string_at(std::span<const std::byte> table, std::uint32_t offset) {
  if (offset >= table.size()) return {};
  const char* start = reinterpret_cast<const char*>(table.data()) + offset;
  return std::string(start, strnlen(start, table.size() - offset));
}

}  // namespace

Result<ElfImage> ElfImage::parse(std::span<const std::byte> bytes) {
  Elf64_Ehdr header;
  if (!read_at(bytes, 0, header) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
    return fail(Errc::invalid_input, "not an ELF file");
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB)
    return fail(Errc::invalid_input, "not a 64-bit little-endian ELF file");
  if (header.e_shentsize != sizeof(Elf64_Shdr) ||
      !inside(bytes, header.e_shoff, std::uint64_t(header.e_shnum) * sizeof(Elf64_Shdr)))
    return fail(Errc::invalid_input, "ELF section table lies outside the file");

  ElfImage image;
  image.bytes_ = bytes;
  image.machine_ = header.e_machine;
  image.type_ = header.e_type;
  image.flags_ = header.e_flags;
  std::vector<Elf64_Shdr> raw(header.e_shnum);
  for (size_t i = 0; i < raw.size(); ++i) {
    read_at(bytes, header.e_shoff + i * sizeof(Elf64_Shdr), raw[i]);
    if (raw[i].sh_type != SHT_NOBITS && !inside(bytes, raw[i].sh_offset, raw[i].sh_size))
      return fail(Errc::invalid_input, fmt::format("ELF section {} lies outside the file", i));
  }
  std::span<const std::byte> names;
  if (header.e_shstrndx < raw.size()) names = bytes.subspan(raw[header.e_shstrndx].sh_offset, raw[header.e_shstrndx].sh_size);
  for (const auto& s : raw)
    image.sections_.push_back({string_at(names, s.sh_name), s.sh_type, s.sh_addr, s.sh_offset, s.sh_size});

  auto load_symbols = [&](std::uint32_t table_type) {
    for (const auto& s : raw) {
      if (s.sh_type != table_type || s.sh_entsize != sizeof(Elf64_Sym) || s.sh_link >= raw.size()) continue;
      auto strings = bytes.subspan(raw[s.sh_link].sh_offset, raw[s.sh_link].sh_size);
      for (std::uint64_t at = 0; at + sizeof(Elf64_Sym) <= s.sh_size; at += sizeof(Elf64_Sym)) {
        Elf64_Sym sym;
        read_at(bytes, s.sh_offset + at, sym);
        if (sym.st_name == 0) continue;
        image.symbols_.push_back(
            {string_at(strings, sym.st_name), std::uint8_t(ELF64_ST_TYPE(sym.st_info)), sym.st_shndx, sym.st_value, sym.st_size});
      }
    }
  };
  load_symbols(SHT_SYMTAB);
  if (image.symbols_.empty()) load_symbols(SHT_DYNSYM);
  return image;
}

const ElfSection* ElfImage::section(std::string_view name) const {
  auto it = std::find_if(sections_.begin(), sections_.end(), [&](const ElfSection& s) { return s.name == name; });
  return it == sections_.end() ? nullptr : &*it;
}

const ElfSymbol* ElfImage::symbol(std::string_view name) const {
  auto it = std::find_if(symbols_.begin(), symbols_.end(), [&](const ElfSymbol& s) { return s.name == name; });
  return it == symbols_.end() ? nullptr : &*it;
}

std::span<const std::byte> ElfImage::section_bytes(const ElfSection& s) const {
  if (s.type == SHT_NOBITS) return {};
  return bytes_.subspan(s.offset, s.size);
}

Result<std::span<const std::byte>> ElfImage::symbol_bytes(const ElfSymbol& s) const {
  if (s.section == 0 || s.section >= sections_.size())
    return fail(Errc::invalid_input, "symbol is not defined in a section", s.name);
  const ElfSection& sec = sections_[s.section];
  // Relocatable files hold section-relative values; linked ones, addresses.
  std::uint64_t start = type_ == ET_REL ? s.value : s.value - sec.address;
  if (type_ != ET_REL && s.value < sec.address) return fail(Errc::invalid_input, "symbol lies before its section", s.name);
  std::uint64_t size = s.size;
  if (size == 0) {
    std::uint64_t end = sec.size;
    for (const auto& other : symbols_) {
      std::uint64_t o = type_ == ET_REL ? other.value : other.value - sec.address;
      if (other.section == s.section && other.value > s.value && o < end) end = o;
    }
    size = end - start;
  }
  if (start > sec.size || size > sec.size - start)
    return fail(Errc::invalid_input, "symbol lies outside its section", s.name);
  return section_bytes(sec).subspan(start, size);
}

}  // namespace ft
