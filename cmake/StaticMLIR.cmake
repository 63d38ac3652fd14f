# MLIR and LLVM are linked statically into every binary and into libtlc.
#
# Debian's MLIR targets link the 129 MB libLLVM.so. The imported `LLVM` target is
# pointed at the static LLVMSupport and LLVMDemangle archives instead: every MLIR
# static library reaches LLVM only through it. So tlc, the tools and libtlc need nothing
# but libc and libstdc++ (the GPU machine has no MLIR), tlc --help lists no LLVM
# target options, and libtlc can hide MLIR and LLVM from the programs that load it.
set(_llvm_support "${LLVM_LIBRARY_DIR}/libLLVMSupport.a")
set(_llvm_demangle "${LLVM_LIBRARY_DIR}/libLLVMDemangle.a")
foreach(_archive ${_llvm_support} ${_llvm_demangle})
  if(NOT EXISTS "${_archive}")
    message(FATAL_ERROR "tlc links LLVM statically and needs ${_archive} (package llvm-19-dev)")
  endif()
endforeach()
get_target_property(_configs LLVM IMPORTED_CONFIGURATIONS)
foreach(_config ${_configs})
  set_target_properties(LLVM PROPERTIES IMPORTED_LOCATION_${_config} "${_llvm_support}")
endforeach()
set_target_properties(LLVM PROPERTIES
  IMPORTED_LOCATION "${_llvm_support}"
  IMPORTED_NO_SONAME TRUE
  INTERFACE_LINK_LIBRARIES "${_llvm_demangle};Threads::Threads;${CMAKE_DL_LIBS};m;rt")

# Gives a compiler-side target MLIR's and LLVM's headers and definitions. The runtime
# never calls this, so its sources cannot include MLIR.
function(tlc_use_mlir target)
  target_include_directories(${target} SYSTEM PUBLIC ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR})
  target_compile_definitions(${target} PUBLIC ${LLVM_DEFINITIONS})
  if(NOT LLVM_ENABLE_RTTI)
    target_compile_options(${target} PRIVATE -fno-rtti)
  endif()
endfunction()
