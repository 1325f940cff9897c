// flytune._core: the nanobind module over libflytune_runtime (python/src/export.hpp)
// and the JAX FFI handlers' capsules (python/src/jax_ffi.cpp). Pointers and streams
// cross as integers: the JAX and torch wrappers hand in their arrays' device
// pointers and the framework's stream.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/src/export.hpp"
#include "python/src/jax_ffi.hpp"

namespace nb = nanobind;
using ft::py::Export;

namespace {

nb::dict workspace_dict(const ft::py::WorkspaceLayout& w) {
  nb::dict d;
  d["total"] = w.total;
  nb::dict offsets, bytes;
  for (const ft::py::WorkspaceBuffer& b : w.buffers) {
    offsets[b.name.c_str()] = b.offset;
    bytes[b.name.c_str()] = b.bytes;
  }
  d["offsets"] = offsets;
  d["bytes"] = bytes;
  return d;
}

// {"x_scale": [1], "w1_scales": [E], ...}: the scale tensors an fp8 layer reads, by name (empty for 16-bit ones).
nb::dict scale_shapes(const std::vector<ft::py::ScaleTensor>& tensors) {
  nb::dict d;
  for (const ft::py::ScaleTensor& t : tensors) d[t.name.c_str()] = t.shape;
  return d;
}

void* stream_of(std::uintptr_t s) { return reinterpret_cast<void*>(s); }

nb::dict problem_dict(const ft::py::ProblemInfo& p) {
  nb::dict d;
  d["key"] = p.key, d["experts"] = p.experts, d["hidden"] = p.hidden, d["inter"] = p.inter;
  d["topk"] = p.topk, d["dtype"] = p.dtype, d["buckets"] = p.buckets;
  d["element_bytes"] = p.element_bytes, d["scales"] = p.scales, d["scale_shapes"] = scale_shapes(p.scale_tensors);
  d["has_backward"] = p.has_backward;
  return d;
}

nb::dict plan_dict(const ft::py::PlanInfo& i) {
  nb::dict d;
  d["problem"] = i.problem, d["tokens"] = i.tokens, d["bucket"] = i.bucket;
  d["w1_shuffled"] = i.w1_shuffled, d["w2_shuffled"] = i.w2_shuffled;
  d["w1_tiled"] = i.w1_tiled, d["w2_tiled"] = i.w2_tiled;
  d["w1"] = i.w1, d["w2"] = i.w2;
  d["workspace"] = workspace_dict(i.workspace);
  d["dtype"] = i.dtype, d["element_bytes"] = i.element_bytes, d["scales"] = i.scales;
  d["scale_shapes"] = scale_shapes(i.scale_tensors);
  d["coverage"] = i.coverage, d["coverage_note"] = i.coverage_note;
  nb::dict backward;
  backward["available"] = i.backward.available, backward["bucket"] = i.backward.bucket;
  backward["dw16"] = i.backward.dw16, backward["why"] = i.backward.why, backward["scratch"] = workspace_dict(i.backward.scratch);
  d["backward"] = backward;
  return d;
}

// ft::py::Error -> flytune._core.Error(status, message) (flytune/__init__.py re-raises
// it as the FlytuneError subclass of its status), and the C API's constants.
void define_errors_and_constants(nb::module_& m) {
  static nb::object error_type = nb::borrow(PyErr_NewException("flytune._core.Error", PyExc_RuntimeError, nullptr));
  m.attr("Error") = error_type;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ft::py::Error& e) {
      nb::object args = nb::make_tuple(e.status(), e.what());
      PyErr_SetObject(error_type.ptr(), args.ptr());
    }
  });
  m.attr("FT_ERR_MANIFEST") = int(FT_ERR_MANIFEST);
  m.attr("FT_ERR_FILE") = int(FT_ERR_FILE);
  m.attr("FT_ERR_HASH") = int(FT_ERR_HASH);
  m.attr("FT_ERR_TARGET") = int(FT_ERR_TARGET);
  m.attr("FT_ERR_DEVICE") = int(FT_ERR_DEVICE);
  m.attr("FT_ERR_NOT_FOUND") = int(FT_ERR_NOT_FOUND);
  m.attr("FT_ERR_ARGUMENT") = int(FT_ERR_ARGUMENT);
  m.attr("FT_ERR_INTERNAL") = int(FT_ERR_INTERNAL);
  m.attr("WEIGHT_LAYOUT_SHUFFLED") = int(FT_WEIGHT_LAYOUT_SHUFFLED);
  m.attr("WEIGHT_LAYOUT_TILED") = int(FT_WEIGHT_LAYOUT_TILED);
  m.attr("WORKSPACE_ALIGN") = std::size_t(FT_WORKSPACE_ALIGN);
  m.attr("PLAN_CACHE_PLANS") = ft::py::kPlanCachePlans;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "flytune's runtime (libflytune_runtime) for Python; use flytune.load()";

  define_errors_and_constants(m);

  nb::class_<Export>(m, "Export")
      .def_static("open", &Export::open, nb::arg("dir"), nb::arg("device"),
                  nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("key", &Export::key)
      .def_prop_ro("dir", &Export::dir)
      .def_prop_ro("target", &Export::target)
      .def_prop_ro("device", &Export::device)
      .def("problems",
           [](Export& e) {
             nb::list out;
             for (const ft::py::ProblemInfo& p : e.problems()) out.append(problem_dict(p));
             return out;
           })
      .def("find_problem", &Export::find_problem, nb::arg("experts"), nb::arg("hidden"), nb::arg("inter"),
           nb::arg("topk"), nb::arg("dtype"), nb::arg("tokens"), nb::arg("scales") = "none")
      .def("plan_info",
           [](Export& e, const std::string& problem, int tokens) { return plan_dict(e.plan_info(problem, tokens)); },
           nb::arg("problem"), nb::arg("tokens"))
      .def("weight_copies", &Export::weight_copies, nb::arg("problem"))
      .def("weights_read", &Export::weights_read, nb::arg("problem"))
      .def("open_on", &Export::open_on, nb::arg("selector"), nb::call_guard<nb::gil_scoped_release>())
      .def("is_open_on", &Export::is_open_on, nb::arg("selector"))
      .def("cached_plans", &Export::cached_plans, nb::arg("selector"))
      .def("launch",
           [](Export& e, const std::string& selector, const std::string& problem, int tokens, std::uintptr_t x,
              std::uintptr_t topk_ids, std::uintptr_t topk_weights, std::uintptr_t w1, std::uintptr_t w2,
              std::uintptr_t w1_shuffled, std::uintptr_t w2_shuffled, std::uintptr_t w1_tiled, std::uintptr_t w2_tiled,
              std::uintptr_t workspace, std::size_t workspace_bytes, std::uintptr_t y, std::uintptr_t stream,
              std::uintptr_t x_scale, std::uintptr_t w1_scales, std::uintptr_t w2_scales, std::uintptr_t inter_scale) {
             ft::py::LayerCall c{x,        topk_ids,        topk_weights, w1, w2,      w1_shuffled, w2_shuffled, w1_tiled,
                                 w2_tiled, workspace, workspace_bytes, y,  x_scale, w1_scales,   w2_scales,   inter_scale};
             nb::gil_scoped_release release;
             e.launch(selector, problem, tokens, c, stream_of(stream));
           },
           nb::arg("selector"), nb::arg("problem"), nb::arg("tokens"), nb::arg("x"), nb::arg("topk_ids"),
           nb::arg("topk_weights"), nb::arg("w1"), nb::arg("w2"), nb::arg("w1_shuffled"), nb::arg("w2_shuffled"),
           nb::arg("w1_tiled"), nb::arg("w2_tiled"), nb::arg("workspace"), nb::arg("workspace_bytes"), nb::arg("y"),
           nb::arg("stream"), nb::arg("x_scale") = 0, nb::arg("w1_scales") = 0, nb::arg("w2_scales") = 0,
           nb::arg("inter_scale") = 0)
      .def("launch_backward",
           [](Export& e, const std::string& selector, const std::string& problem, int tokens, std::uintptr_t x,
              std::uintptr_t topk_ids, std::uintptr_t topk_weights, std::uintptr_t w1, std::uintptr_t w2,
              std::uintptr_t dy, std::uintptr_t dx, std::uintptr_t dw1, std::uintptr_t dw2,
              std::uintptr_t d_topk_weights, std::uintptr_t scratch, std::size_t scratch_bytes, std::uintptr_t stream,
              std::uintptr_t dw1_16, std::uintptr_t dw2_16) {
             ft::py::GradCall c{x, topk_ids, topk_weights, w1, w2, dy, dx, dw1, dw2, d_topk_weights, scratch, scratch_bytes,
                                dw1_16, dw2_16};
             nb::gil_scoped_release release;
             e.launch_backward(selector, problem, tokens, c, stream_of(stream));
           },
           nb::arg("selector"), nb::arg("problem"), nb::arg("tokens"), nb::arg("x"), nb::arg("topk_ids"),
           nb::arg("topk_weights"), nb::arg("w1"), nb::arg("w2"), nb::arg("dy"), nb::arg("dx"), nb::arg("dw1"),
           nb::arg("dw2"), nb::arg("d_topk_weights"), nb::arg("scratch"), nb::arg("scratch_bytes"), nb::arg("stream"),
           nb::arg("dw1_16") = 0, nb::arg("dw2_16") = 0)
      .def("arrange",
           [](Export& e, const std::string& selector, std::uintptr_t src, std::uintptr_t dst, int rows, int cols,
              int layout, std::uintptr_t stream, int element_bytes) {
             nb::gil_scoped_release release;
             e.arrange(selector, src, dst, rows, cols, layout, stream_of(stream), element_bytes);
           },
           nb::arg("selector"), nb::arg("src"), nb::arg("dst"), nb::arg("rows"), nb::arg("cols"), nb::arg("layout"),
           nb::arg("stream"), nb::arg("element_bytes") = 2);

  // Host memory: flytune.fp8_ocp_to_fnuz checks the arrays and hands their addresses.
  m.def("fp8_ocp_to_fnuz", &ft::py::fp8_ocp_to_fnuz, nb::arg("codes"), nb::arg("count"), nb::arg("scales"),
        nb::arg("scale_count"));

  // The XLA FFI handlers, as capsules for jax.ffi.register_ffi_target.
  m.def("jax_handlers", [] {
    nb::list out;
    for (const ft::py::JaxHandler& h : ft::py::jax_handlers())
      out.append(nb::make_tuple(nb::str(h.name), nb::str(h.platform), nb::capsule(h.function)));
    return out;
  });
  m.attr("JAX_FFI_API_VERSION") = nb::make_tuple(ft::py::jax_ffi_api_version().first, ft::py::jax_ffi_api_version().second);
}
