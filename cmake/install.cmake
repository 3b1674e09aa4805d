# What `cmake --install` puts under CMAKE_INSTALL_PREFIX (GNUInstallDirs;
# DESTDIR honoured):
#   lib/      librdmx.so.0 (symbols versioned by src/rdmx.map), librdmx.a,
#             and the systems' static libraries: librdmx_page.a,
#             librdmx_kv.a, librdmx_registry.a
#   include/  rdmx.h and the systems' headers
#   bin/      the rdmx CLI, linked against librdmx.so
#   share/bash-completion/completions/rdmx  its completion
#   lib/pkgconfig/  rdmx.pc, rdmx-static.pc, rdmx_page.pc, rdmx_kv.pc,
#             rdmx_registry.pc
#   lib/cmake/rdmx/ the CMake package: find_package(rdmx CONFIG) gives
#             rdmx::rdmx (and rdmx::rdmx_static, rdmx::page, rdmx::kv,
#             rdmx::registry)
#   share/man/ the man pages (man/CMakeLists.txt)
include(CMakePackageConfigHelpers)

set(RDMX_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/rdmx)

install(TARGETS rdmx rdmx_static rdmx_page rdmx_kv rdmx_registry
        EXPORT rdmx-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES include/rdmx.h include/rdmx_page.h include/rdmx_kv.h
              include/rdmx_registry.h include/rdmx_lambda.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS rdmx_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES contrib/bash-completion/rdmx
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)

install(EXPORT rdmx-targets NAMESPACE rdmx:: FILE rdmx-targets.cmake
        DESTINATION ${RDMX_CMAKE_DIR})
configure_package_config_file(cmake/rdmx-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/rdmx-config.cmake
  INSTALL_DESTINATION ${RDMX_CMAKE_DIR})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/rdmx-config-version.cmake
  COMPATIBILITY SameMinorVersion) # 0.x: a minor release may break
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/rdmx-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/rdmx-config-version.cmake
        DESTINATION ${RDMX_CMAKE_DIR})

# pkg-config files name the prefix given at install time (cmake --install
# --prefix), not only the one configured: the prefix is filled in by the
# install step itself.
set(RDMX_PC_VERBS "")
if(VERBS_FOUND)
  set(RDMX_PC_VERBS " libibverbs librdmacm")
endif()
set(RDMX_PC_PREFIX "@CMAKE_INSTALL_PREFIX@")
foreach(pc rdmx rdmx-static rdmx_page rdmx_kv rdmx_registry)
  configure_file(cmake/${pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pc/${pc}.pc.in
                 @ONLY)
  install(CODE "configure_file(${CMAKE_CURRENT_BINARY_DIR}/pc/${pc}.pc.in
    ${CMAKE_CURRENT_BINARY_DIR}/pc/${pc}.pc @ONLY)")
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pc/${pc}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
