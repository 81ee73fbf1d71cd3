# Passed as -DCMAKE_PROJECT_INCLUDE=<this file> when building llama.cpp for servediff: of llama.cpp's
# tools only llama-server and llama-perplexity are built; every other executable is left out of the
# default target, which cuts the build time on a small machine by about half.
set(_servediff_keep llama-server llama-perplexity)

function(_servediff_exclude_dir dir)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
        get_target_property(kind ${target} TYPE)
        if(kind STREQUAL "EXECUTABLE" AND NOT target IN_LIST _servediff_keep)
            set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL ON)
        endif()
    endforeach()
    get_property(children DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(child IN LISTS children)
        _servediff_exclude_dir("${child}")
    endforeach()
endfunction()

function(_servediff_exclude_all)
    _servediff_exclude_dir("${CMAKE_SOURCE_DIR}")
endfunction()

# Only the top-level project: ggml's own project() call includes this file too.
if(CMAKE_SOURCE_DIR STREQUAL CMAKE_CURRENT_SOURCE_DIR)
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _servediff_exclude_all)
endif()
