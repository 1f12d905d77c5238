# Install rules of libreclaim (included by the top CMakeLists.txt).
include(CMakePackageConfigHelpers)

add_library(reclaim_lib INTERFACE)
target_link_libraries(reclaim_lib INTERFACE reclaim_runtime)
set_target_properties(reclaim_core PROPERTIES EXPORT_NAME core)
set_target_properties(reclaim_engine PROPERTIES EXPORT_NAME engine)
set_target_properties(reclaim_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(reclaim_lib PROPERTIES EXPORT_NAME reclaim)

# The engine's speculative decoding calls llama.cpp's common library (its
# n-gram lookup), which llama.cpp's package does not install: its two
# archives go beside libreclaim's, and a program that links the engine links
# them after it.
install(FILES ${RECLAIM_LLAMA_COMMON}/libllama-common.a ${RECLAIM_LLAMA_COMMON}/libllama-common-base.a DESTINATION lib)
target_link_libraries(reclaim_engine PRIVATE $<INSTALL_INTERFACE:$<INSTALL_PREFIX>/lib/libllama-common.a>
                                             $<INSTALL_INTERFACE:$<INSTALL_PREFIX>/lib/libllama-common-base.a>)

# Its image projectors are llama.cpp's mtmd library, likewise not installed
# by llama.cpp's package.
install(FILES ${RECLAIM_LLAMA_MTMD}/tools/mtmd/libmtmd.a ${RECLAIM_LLAMA_MTMD}/vendor/hash/libvendor-hash.a DESTINATION lib)
target_link_libraries(reclaim_engine PRIVATE $<INSTALL_INTERFACE:$<INSTALL_PREFIX>/lib/libmtmd.a>
                                             $<INSTALL_INTERFACE:$<INSTALL_PREFIX>/lib/libvendor-hash.a>)

install(TARGETS reclaim_core reclaim_engine reclaim_runtime reclaim_lib EXPORT reclaimTargets
        ARCHIVE DESTINATION lib)
install(EXPORT reclaimTargets NAMESPACE reclaim:: DESTINATION lib/cmake/reclaim)

# The public headers: reclaim.h and what it includes, found by the compiler
# (`g++ -MM -Isrc src/reclaim.h`); a test builds the example against the
# installed tree, so a header missing here fails it.
set(reclaim_public_headers
  reclaim.h
  core/cancel.h core/error.h core/heap.h core/histogram.h core/ledger.h core/resource.h core/scope.h
  core/scoped_thread.h core/stack_thread.h core/thresholds.h core/usage.h
  engine/batcher.h engine/core_turns.h engine/device_life.h engine/embed.h engine/rerank.h engine/generate.h engine/gguf_check.h engine/model.h engine/model_info.h
  engine/owners.h engine/placement.h engine/prompt_cache.h engine/prompt_store.h engine/llama_runtime.h
  engine/sampling.h engine/session.h engine/speculation.h engine/drafter.h engine/test_model.h engine/vet.h
  runtime/budget.h runtime/catalogue.h runtime/line.h runtime/model_entry.h runtime/model_life.h runtime/model_settings.h
  runtime/model_status.h runtime/registry.h runtime/registry_errors.h runtime/registry_options.h runtime/room.h runtime/vetter.h)
foreach(h IN LISTS reclaim_public_headers)
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/src/${h} DESTINATION include/reclaim/${dir})
endforeach()
# ggml's buffers in huge pages are compiled into each program that links the
# engine (see the engine's target): its source and the headers it uses.
install(FILES ${PROJECT_SOURCE_DIR}/src/engine/ggml_buffers.cpp DESTINATION share/reclaim)
install(FILES ${PROJECT_SOURCE_DIR}/src/core/env_switch.h DESTINATION include/reclaim/core)
install(FILES ${PROJECT_SOURCE_DIR}/src/engine/ggml_buffers.h DESTINATION include/reclaim/engine)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/reclaimConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/reclaimConfig.cmake INSTALL_DESTINATION lib/cmake/reclaim)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/reclaimConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/reclaimConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/reclaimConfigVersion.cmake
        DESTINATION lib/cmake/reclaim)
