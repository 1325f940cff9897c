#include "compile/analyze/elf_image.hpp"

#include <elf.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace ft {
namespace {

std::vector<std::byte> bytes_of(std::string_view s) {
  auto v = std::as_bytes(std::span(s));
  return {v.begin(), v.end()};
}

TEST(ElfImage, RejectsWhatIsNotElf) {
  EXPECT_FALSE(ElfImage::parse(bytes_of("")));
  EXPECT_FALSE(ElfImage::parse(bytes_of("not an elf file at all, just text")));
  auto r = ElfImage::parse(bytes_of("\x7f" "ELF"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::invalid_input);
}

// A header whose section table points past the end of the file.
TEST(ElfImage, RejectsSectionsOutsideTheFile) {
  Elf64_Ehdr h{};
  std::memcpy(h.e_ident, ELFMAG, SELFMAG);
  h.e_ident[EI_CLASS] = ELFCLASS64;
  h.e_ident[EI_DATA] = ELFDATA2LSB;
  h.e_machine = kElfMachineAmdgpu;
  h.e_shentsize = sizeof(Elf64_Shdr);
  h.e_shnum = 4;
  h.e_shoff = 1 << 20;
  std::vector<std::byte> file(sizeof h);
  std::memcpy(file.data(), &h, sizeof h);
  auto r = ElfImage::parse(file);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("outside"), std::string::npos);
  h.e_shnum = 0;
  h.e_shoff = 0;
  std::memcpy(file.data(), &h, sizeof h);
  auto empty = ElfImage::parse(file);
  ASSERT_TRUE(empty) << empty.error().describe();
  EXPECT_EQ(empty->machine(), kElfMachineAmdgpu);
  EXPECT_TRUE(empty->symbols().empty());
}

}  // namespace
}  // namespace ft
