# jaxlib's XLA FFI headers (jax.ffi.include_dir() is this folder), asked of a
# Python interpreter without importing jax: the folder and jaxlib's version, or
# "" where that interpreter has no jaxlib (or its headers). The Python package
# builds its handlers against them (python/CMakeLists.txt); the hip tests build
# the same handlers against them to call the ROCm target on the HIP test double
# (tests/hip/jax/).
function(flytune_jaxlib_ffi python out_include out_version)
  execute_process(COMMAND ${python} -c
    "import importlib.util, os; s = importlib.util.find_spec('jaxlib'); print(os.path.join(os.path.dirname(s.origin), 'include') if s else '')"
    OUTPUT_VARIABLE include OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  execute_process(COMMAND ${python} -c "import importlib.metadata as m; print(m.version('jaxlib'))"
    OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT rc EQUAL 0 OR NOT EXISTS "${include}/xla/ffi/api/ffi.h")
    set(include "")
    set(version "")
  endif()
  set(${out_include} "${include}" PARENT_SCOPE)
  set(${out_version} "${version}" PARENT_SCOPE)
endfunction()
