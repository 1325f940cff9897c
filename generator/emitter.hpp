#pragma once
// Variant -> KernelSource: a small instantiation unit over the shared kernel
// templates (templates/ft). It only names a Config and an extern "C" entry
// point; kernel bodies live in the templates, never in emitted strings.
#include "generator/kernel_source.hpp"
#include "generator/problem.hpp"
#include "generator/variant.hpp"

namespace ft {

KernelSource emit_variant(const Variant& v);

// The layer's support kernels for a target and dtype, in one unit: align (one
// block, or the wide align's count and scatter launches), reduce (one per
// ft::Reduce), the weight pre-shuffle, and the reference and random-fill
// kernels verification uses. Names: ft_<target>_align{,_count,_scatter},
// ft_<target>_reduce_{atomic,partials,partials16}_<dtype>, ft_<target>_shuffle,
// ft_<target>_reference{1,2}_<dtype>, ft_<target>_fill. For e4m3 (fp8 layers,
// the target's flavour) also the quantise steps, ft_<target>_quantise_x and
// ft_<target>_quantise_inter (templates/ft/moe_quantise.hpp), and the
// reference's intermediate quantisation ft_<target>_reference_quantise_e4m3;
// its references are the fp8 ones and its reduce kernels write bf16.
KernelSource emit_support(const Target& target, DType dtype);

std::string support_unit_name(const Target& target, DType dtype);  // ft_<target>_support_<dtype>
std::string align_entry(const Target& target);
// The wide align's two launches (many pairs; templates/ft/moe_align.hpp).
std::string align_count_entry(const Target& target);
std::string align_scatter_entry(const Target& target);
std::string reduce_entry(const Target& target, Reduce r, DType dtype);
std::string shuffle_entry(const Target& target);
std::string reference_entry(const Target& target, StageRole stage, DType dtype);
std::string fill_entry(const Target& target);  // seeded random fill (templates/ft/random_fill.hpp)
// The forward's saved tensors for the backward, recomputed (templates/ft/moe_saved.hpp; 16-bit units).
std::string saved_entry(const Target& target, DType dtype);
std::string quantise_x_entry(const Target& target);
std::string quantise_inter_entry(const Target& target);
std::string reference_quantise_entry(const Target& target);

}  // namespace ft
