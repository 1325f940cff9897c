#pragma once
// Pieces of the layer program (layer/program.cpp) that the backward's program
// (layer/backward.cpp) builds with too: the argument scalars, a launch step,
// the align step(s) and the buffer sizes of layer/buffers.def's rules. Internal
// to ft_layer: callers build programs through program.hpp and backward.hpp.
#include <expected>
#include <string>

#include "layer/program.hpp"

namespace ft::program_parts {

// Errc::invalid_input, "layer program: <what>".
std::unexpected<Error> bad(const std::string& what);
// A program without steps at T with this row block: Errc::invalid_input for T
// outside 1..kMaxTokens or sizes beyond the kernels' 32-bit arguments.
Result<LayerProgram> start_program(const Problem& p, int tokens, int align_block);
// The scalars every step of a program at T takes.
MoeArgs base_args(const Problem& p, int tokens, int align_block, long long rows);
Step launch_step(std::string name, Role role, std::string symbol, const LaunchShape& shape, const MoeArgs& args);
// The align step(s): one block, or the wide align's count and scatter launches.
void push_align(LayerProgram& prog, const Target& t, const Problem& p, const MoeArgs& args, AlignForm form);
// Every row's size rule of layer/buffers.def on this program.
void size_buffers(LayerProgram& prog, const LayerRecipe& r);

}  // namespace ft::program_parts
