// A text table for the CLI's views: columns padded to their widest cell,
// numbers right-aligned (flytune db's views and its model check).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace ft::cli {

// A text table: columns padded to their widest cell; numbers right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::string right_aligned = {})
      : right_(std::move(right_aligned)) {
    rows_.push_back(std::move(header));
  }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.size() == 1; }
  void print(std::string_view indent = {}) const {
    std::vector<std::size_t> width(rows_[0].size(), 0);
    for (const auto& r : rows_)
      for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    for (const auto& r : rows_) {
      std::string line(indent);
      for (std::size_t c = 0; c < r.size(); ++c) {
        bool right = c < right_.size() && right_[c] == 'r';
        bool last = c + 1 == r.size();
        if (right) line += fmt::format("{:>{}}", r[c], width[c]);
        else line += last ? r[c] : fmt::format("{:<{}}", r[c], width[c]);
        if (!last) line += "  ";
      }
      fmt::print("{}\n", line);
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
  std::string right_;  // per column: 'r' right-aligned, anything else left
};

}  // namespace ft::cli
