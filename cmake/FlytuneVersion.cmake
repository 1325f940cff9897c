# The git commit is read at configure time; templates/ carry their own commit
# (the last one that touched them) because results depend on kernel source.
# A commit or checkout re-runs the configure step (git's HEAD log is a configure
# dependency), so `flytune --version` and every run row name the commit built.
find_package(Git QUIET)
set(FLYTUNE_GIT_COMMIT "unknown")
set(FLYTUNE_TEMPLATES_COMMIT "unknown")
if(GIT_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _c OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _c)
    set(FLYTUNE_GIT_COMMIT "${_c}")
  endif()
  execute_process(COMMAND ${GIT_EXECUTABLE} log -1 --format=%h --abbrev=12 -- templates
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _t OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _t)
    set(FLYTUNE_TEMPLATES_COMMIT "${_t}")
  endif()
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --absolute-git-dir
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _gd OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND EXISTS "${_gd}/logs/HEAD")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_gd}/logs/HEAD")
  endif()
endif()
