# Folders are layers: each flytune library sees, as includes, only its own
# folder and the folders of the libraries it links. flytune_layer(<target>
# <folder>...) gives <target> an include root holding just those folders
# (symbolic links into the source tree) as a PUBLIC include directory: a
# library that links <target> -- PUBLIC where its own headers include
# <target>'s, PRIVATE otherwise -- can include "<folder>/...", and one that
# does not link it cannot. An include of a higher layer therefore fails to
# build, and scripts/check-architecture.py (ctest label arch) holds
# docs/ARCHITECTURE.md to the same graph.
function(flytune_layer target)
  set(root ${PROJECT_BINARY_DIR}/layers/${target})
  foreach(folder IN LISTS ARGN)
    get_filename_component(parent ${root}/${folder} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    if(NOT EXISTS ${root}/${folder})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
    endif()
  endforeach()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")  # header-only (ft_base)
    target_include_directories(${target} INTERFACE ${root})
  else()
    target_include_directories(${target} PUBLIC ${root})
  endif()
endfunction()
