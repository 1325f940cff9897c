// The layer program described as JSON (the export manifest's steps and
// buffer sizes, layer/program.hpp): what a host launching without the runtime reads.
#include <nlohmann/json.hpp>

#include "layer/program.hpp"

namespace ft {

nlohmann::json steps_json(const LayerProgram& p) {
  nlohmann::json out = nlohmann::json::array();
  for (const Step& s : p.steps) {
    if (s.op == Step::Op::memset_u32) {
      out.push_back({{"step", s.name}, {"op", "memset_u32"}, {"buffer", to_string(s.buffer)}, {"value", s.value}, {"count", s.count}});
      continue;
    }
    const MoeArgs& a = s.args;
    out.push_back({{"step", s.name},
                   {"op", "launch"},
                   {"role", to_string(s.role)},
                   {"symbol", s.symbol},
                   {"grid", {s.shape.grid_x, s.shape.grid_y, s.shape.grid_z}},
                   {"block", {s.shape.block, 1, 1}},
                   {"dynamic_shared", s.shape.lds_bytes},
                   {"args",
                    {{"tokens", a.tokens},
                     {"hidden", a.hidden},
                     {"inter_size", a.inter_size},
                     {"experts", a.experts},
                     {"topk", a.topk},
                     {"align_block", a.align_block},
                     {"max_padded_rows", a.max_padded_rows},
                     {"flags", a.flags},
                     {"w1", to_string(s.w1)},
                     {"w2", to_string(s.w2)}}}});
    if (a.scales) out.back()["args"]["scales"] = a.scales;  // fp8 layers only: 16-bit steps read as before
    if (const auto& m = s.weight_map)  // the kernel takes ft::MappedMoeArgs: this map of the weights, then the args
      out.back()["weight_map"] = {{"matrix", to_string(s.role == Role::stage2 ? s.w2 : s.w1)},
                                  {"rows", m->rows},
                                  {"cols", m->cols},
                                  {"row_stride_bytes", m->row_stride_bytes},
                                  {"elem_bytes", m->elem_bytes},
                                  {"box", {m->box_cols, m->box_rows}},
                                  {"swizzle", m->swizzle}};
  }
  return out;
}

nlohmann::json buffers_json(const LayerProgram& p) {
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t i = 0; i < kBufCount; ++i)
    if (p.bytes[i]) out[std::string(to_string(Buf(i)))] = p.bytes[i];
  return out;
}

}  // namespace ft
