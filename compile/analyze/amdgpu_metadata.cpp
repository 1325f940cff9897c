#include "compile/analyze/amdgpu_metadata.hpp"

#include <charconv>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "compile/comgr_api.hpp"

namespace ft {
namespace {

using detail::ComgrApi;

// A metadata node that releases itself.
class Node {
 public:
  Node(const ComgrApi& api, amd_comgr_metadata_node_t n) : api_(&api), node_(n) {}
  ~Node() {
    if (node_.handle) api_->destroy_metadata(node_);
  }
  Node(Node&& o) noexcept : api_(o.api_), node_(std::exchange(o.node_, {})) {}
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  Node& operator=(Node&&) = delete;
  amd_comgr_metadata_node_t get() const { return node_; }

  std::optional<Node> lookup(const char* key) const {
    amd_comgr_metadata_node_t child{};
    if (api_->metadata_lookup(node_, key, &child) != AMD_COMGR_STATUS_SUCCESS) return std::nullopt;
    return Node(*api_, child);
  }
  // The list's items; empty for a node that is not a list.
  std::vector<Node> items() const {
    std::vector<Node> out;
    size_t count = 0;
    if (api_->get_metadata_list_size(node_, &count) != AMD_COMGR_STATUS_SUCCESS) return out;
    for (size_t i = 0; i < count; ++i) {
      amd_comgr_metadata_node_t child{};
      if (api_->index_list_metadata(node_, i, &child) == AMD_COMGR_STATUS_SUCCESS) out.emplace_back(*api_, child);
    }
    return out;
  }
  std::optional<std::string> string() const {
    amd_comgr_metadata_kind_t kind{};
    if (api_->get_metadata_kind(node_, &kind) != AMD_COMGR_STATUS_SUCCESS || kind != AMD_COMGR_METADATA_KIND_STRING)
      return std::nullopt;
    size_t size = 0;
    if (api_->get_metadata_string(node_, &size, nullptr) != AMD_COMGR_STATUS_SUCCESS) return std::nullopt;
    std::string s(size, '\0');
    if (api_->get_metadata_string(node_, &size, s.data()) != AMD_COMGR_STATUS_SUCCESS) return std::nullopt;
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
  }

 private:
  const ComgrApi* api_;
  amd_comgr_metadata_node_t node_;
};

// comgr gives every scalar as a string.
int int_field(const Node& kernel, const char* key) {
  auto child = kernel.lookup(key);
  if (!child) return 0;
  auto text = child->string();
  int value = 0;
  if (text) std::from_chars(text->data(), text->data() + text->size(), value);
  return value;
}

std::string string_field(const Node& kernel, const char* key) {
  auto child = kernel.lookup(key);
  if (!child) return {};
  return child->string().value_or("");
}

AmdKernelMetadata kernel_metadata(const Node& k) {
  AmdKernelMetadata m;
  m.name = string_field(k, ".name");
  m.symbol = string_field(k, ".symbol");
  m.vgpr_count = int_field(k, ".vgpr_count");
  m.agpr_count = int_field(k, ".agpr_count");
  m.sgpr_count = int_field(k, ".sgpr_count");
  m.group_segment_fixed_size = int_field(k, ".group_segment_fixed_size");
  m.private_segment_fixed_size = int_field(k, ".private_segment_fixed_size");
  m.vgpr_spill_count = int_field(k, ".vgpr_spill_count");
  m.sgpr_spill_count = int_field(k, ".sgpr_spill_count");
  m.wavefront_size = int_field(k, ".wavefront_size");
  m.max_flat_workgroup_size = int_field(k, ".max_flat_workgroup_size");
  m.uses_dynamic_stack = string_field(k, ".uses_dynamic_stack") == "true";
  m.kernarg_segment_size = int_field(k, ".kernarg_segment_size");
  m.kernarg_segment_align = int_field(k, ".kernarg_segment_align");
  if (auto args = k.lookup(".args"))
    for (const Node& a : args->items())
      m.args.push_back(AmdKernelArg{int_field(a, ".offset"), int_field(a, ".size"), string_field(a, ".value_kind")});
  return m;
}

}  // namespace

Result<AmdCodeObjectMetadata> read_amdgpu_code_object_metadata(std::span<const std::byte> code_object) {
  const ComgrApi& api = *FT_TRY(detail::comgr_api());
  amd_comgr_data_t data{};
  if (auto s = api.create_data(AMD_COMGR_DATA_KIND_EXECUTABLE, &data); s != AMD_COMGR_STATUS_SUCCESS)
    return fail(Errc::toolchain, fmt::format("comgr: create data failed: {}", api.describe(s)));
  struct Release {
    const ComgrApi& api;
    amd_comgr_data_t data;
    ~Release() { api.release_data(data); }
  } release{api, data};
  if (auto s = api.set_data(data, code_object.size(), reinterpret_cast<const char*>(code_object.data()));
      s != AMD_COMGR_STATUS_SUCCESS)
    return fail(Errc::toolchain, fmt::format("comgr: set data failed: {}", api.describe(s)));
  amd_comgr_metadata_node_t root_handle{};
  if (auto s = api.get_data_metadata(data, &root_handle); s != AMD_COMGR_STATUS_SUCCESS)
    return fail(Errc::invalid_input, fmt::format("code object has no readable AMDGPU metadata ({})", api.describe(s)));
  Node root(api, root_handle);
  auto kernels = root.lookup("amdhsa.kernels");
  if (!kernels) return fail(Errc::invalid_input, "code object metadata has no amdhsa.kernels (code object v2?)");
  AmdCodeObjectMetadata out;
  out.target = string_field(root, "amdhsa.target");
  for (const Node& k : kernels->items()) out.kernels.push_back(kernel_metadata(k));
  return out;
}

Result<std::vector<AmdKernelMetadata>> read_amdgpu_metadata(std::span<const std::byte> code_object) {
  return FT_TRY(read_amdgpu_code_object_metadata(code_object)).kernels;
}

}  // namespace ft
