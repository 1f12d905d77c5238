# llama.cpp as prebuilt shared libraries (the Vulkan variant: scripts/setup
# --backend vulkan), with the headers of the pinned source they were built
# from. Defines the imported target `llama`.
#
# These libraries load their backends at run time (GGML_BACKEND_DL):
# libggml-vulkan.so and the libggml-cpu-<arch>.so that suits the CPU are
# dlopen'ed from RECLAIM_LLAMA_PREBUILT by engine/llama_runtime.cpp, and the CPU
# backend's own functions (its thread pool) are reached through the backend
# registry, since no library that reclaim links exports them.

if(NOT RECLAIM_LLAMA_HEADERS)
  message(FATAL_ERROR "RECLAIM_LLAMA_PREBUILT needs RECLAIM_LLAMA_HEADERS: the pinned llama.cpp source")
endif()

function(reclaim_find_one var pattern)
  file(GLOB found "${RECLAIM_LLAMA_PREBUILT}/${pattern}")
  list(LENGTH found n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one ${pattern} in ${RECLAIM_LLAMA_PREBUILT}, found ${n}: ${found}")
  endif()
  set(${var} ${found} PARENT_SCOPE)
endfunction()

# The package names them after its own release (libllama.vulkan.v0.4.0.so);
# their SONAMEs are those names, so the programs find them by RUNPATH.
reclaim_find_one(RECLAIM_LIBLLAMA "libllama.*.so")
reclaim_find_one(RECLAIM_LIBGGML "libggml.*.so")
reclaim_find_one(RECLAIM_LIBGGML_BASE "libggml-base.so")

add_library(ggml_base_prebuilt SHARED IMPORTED)
set_target_properties(ggml_base_prebuilt PROPERTIES IMPORTED_LOCATION ${RECLAIM_LIBGGML_BASE})
add_library(ggml_prebuilt SHARED IMPORTED)
set_target_properties(ggml_prebuilt PROPERTIES IMPORTED_LOCATION ${RECLAIM_LIBGGML}
  INTERFACE_LINK_LIBRARIES ggml_base_prebuilt)
add_library(llama SHARED IMPORTED)
set_target_properties(llama PROPERTIES IMPORTED_LOCATION ${RECLAIM_LIBLLAMA}
  INTERFACE_INCLUDE_DIRECTORIES "${RECLAIM_LLAMA_HEADERS}/include;${RECLAIM_LLAMA_HEADERS}/ggml/include"
  INTERFACE_LINK_LIBRARIES ggml_prebuilt
  INTERFACE_COMPILE_DEFINITIONS "RECLAIM_GGML_BACKEND_DL=1;RECLAIM_GGML_BACKEND_DIR=\"${RECLAIM_LLAMA_PREBUILT}\"")
set(CMAKE_BUILD_RPATH ${RECLAIM_LLAMA_PREBUILT})
set(CMAKE_INSTALL_RPATH ${RECLAIM_LLAMA_PREBUILT})
