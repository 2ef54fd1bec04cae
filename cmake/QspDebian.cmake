# Debian packages made by CPack: libqsp1 (component runtime), libqsp-dev (dev),
# qsp-tools (tools), each with a -dbgsym .ddeb. What lintian asks of them, and
# why each setting is here: docs/PACKAGING.md. Included from the root
# CMakeLists.txt after the install rules of the targets.
#
# Built with CMAKE_INSTALL_PREFIX=/usr (scripts/configure), GNUInstallDirs gives
# the multiarch libdir (lib/x86_64-linux-gnu); CPack installs under /usr too.

set(QSP_PKG_DIR ${PROJECT_SOURCE_DIR}/packaging)
set(QSP_PKG_OUT ${PROJECT_BINARY_DIR}/packaging)
set(QSP_DEB_RUNTIME libqsp${PROJECT_VERSION_MAJOR})
set(QSP_DEB_DEV libqsp-dev)
set(QSP_DEB_TOOLS qsp-tools)
# Files read at configure time: an edit re-runs CMake.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${QSP_PKG_DIR}/changelog
  ${QSP_PKG_DIR}/${QSP_DEB_RUNTIME}.description ${QSP_PKG_DIR}/${QSP_DEB_DEV}.description
  ${QSP_PKG_DIR}/${QSP_DEB_TOOLS}.description)

if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "qsp: CMAKE_INSTALL_PREFIX is ${CMAKE_INSTALL_PREFIX}; the Debian packages "
    "need /usr (scripts/configure sets it) to get the multiarch libdir")
endif()

# ---- changelog: Debian format, from packaging/changelog -------------------------
# The entries from this version's down (a tree whose version is older than the
# top entry, e.g. a branch before its release, ships the entries it has).
file(READ ${QSP_PKG_DIR}/changelog _qsp_changelog)
string(FIND "${_qsp_changelog}" "qsp (${PROJECT_VERSION}) " _qsp_at)
if(_qsp_at LESS 0)
  message(WARNING "packaging/changelog has no entry for ${PROJECT_VERSION}: add one "
    "(docs/PACKAGING.md); scripts/test-packages fails until then")
else()
  string(SUBSTRING "${_qsp_changelog}" ${_qsp_at} -1 _qsp_changelog)
endif()
# Written as is (no @VAR@ expansion), touched only when it changes.
file(WRITE ${QSP_PKG_OUT}/changelog.new "${_qsp_changelog}")
configure_file(${QSP_PKG_OUT}/changelog.new ${QSP_PKG_OUT}/changelog COPYONLY)
# gzip -9n: maximal compression, no name or time stamp (reproducible).
add_custom_command(OUTPUT ${QSP_PKG_OUT}/changelog.gz
  COMMAND gzip -9n -c ${QSP_PKG_OUT}/changelog > ${QSP_PKG_OUT}/changelog.gz
  DEPENDS ${QSP_PKG_OUT}/changelog ${QSP_PKG_DIR}/changelog
  COMMENT "changelog.gz for the Debian packages")
set(_qsp_pkg_outputs ${QSP_PKG_OUT}/changelog.gz)

# ---- per-package documentation: /usr/share/doc/<package>/ -------------------------
foreach(comp runtime dev tools)
  string(TOUPPER ${comp} _up)
  set(_doc ${CMAKE_INSTALL_DATAROOTDIR}/doc/${QSP_DEB_${_up}})
  install(FILES ${QSP_PKG_DIR}/copyright ${QSP_PKG_OUT}/changelog.gz DESTINATION ${_doc} COMPONENT ${comp})
  # lintian overrides, each with its reason in a comment (none today: docs/PACKAGING.md).
  if(EXISTS ${QSP_PKG_DIR}/lintian/${QSP_DEB_${_up}})
    install(FILES ${QSP_PKG_DIR}/lintian/${QSP_DEB_${_up}}
      DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides COMPONENT ${comp})
  endif()
endforeach()

# ---- qsp(1), generated from `qsp --help` (packaging/make-manpage) -------------------
if(TARGET qsp_cli)
  find_program(QSP_HELP2MAN help2man)
  if(QSP_HELP2MAN)
    add_custom_command(OUTPUT ${QSP_PKG_OUT}/qsp.1.gz
      COMMAND ${QSP_PKG_DIR}/make-manpage $<TARGET_FILE:qsp_cli> ${QSP_PKG_OUT}/changelog ${QSP_PKG_OUT}/qsp.1.gz
      DEPENDS qsp_cli ${QSP_PKG_DIR}/make-manpage ${QSP_PKG_OUT}/changelog
      COMMENT "qsp(1) from qsp --help")
    list(APPEND _qsp_pkg_outputs ${QSP_PKG_OUT}/qsp.1.gz)
    install(FILES ${QSP_PKG_OUT}/qsp.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tools)
  else()
    message(STATUS "qsp: help2man not found, no man page (the qsp-tools package needs it)")
  endif()
endif()
add_custom_target(qsp_package_files ALL DEPENDS ${_qsp_pkg_outputs})
# Debug information for qsp-tools-dbgsym (the package itself ships the tool
# stripped): without it the .debug file would hold the symbol table alone
# (lintian: debug-file-with-no-debug-symbols). The library's C boundary is
# compiled with -g already (for abidw).
if(TARGET qsp_cli)
  target_compile_options(qsp_cli PRIVATE -g)
endif()

# ---- symbols file and ldconfig trigger of libqsp1 ----------------------------------
# packaging/libqsp1.symbols lists every exported symbol with the version that
# introduced it (docs/ABI.md, "The symbols file"); ctest dist.debian_symbols
# checks it against the built library. CPack names control files after their
# file name, hence the copy to a file called `symbols`.
configure_file(${QSP_PKG_DIR}/${QSP_DEB_RUNTIME}.symbols ${QSP_PKG_OUT}/${QSP_DEB_RUNTIME}/symbols COPYONLY)
# The shlibs file (policy 8.6.4 wants it beside the symbols file; dpkg-shlibdeps
# prefers the symbols): the version of the newest symbol, which a program
# built against this package may use; at most this package's own version (a
# tree ahead of its version bump exports symbols dated to the next release).
file(STRINGS ${QSP_PKG_DIR}/${QSP_DEB_RUNTIME}.symbols _qsp_sym_lines REGEX "^ [^ ]+ [0-9]")
set(_qsp_sym_versions)
foreach(_l IN LISTS _qsp_sym_lines)
  string(REGEX REPLACE "^ [^ ]+ ([^ ]+).*" "\\1" _v "${_l}")
  list(APPEND _qsp_sym_versions ${_v})
endforeach()
list(SORT _qsp_sym_versions COMPARE NATURAL ORDER DESCENDING)
list(GET _qsp_sym_versions 0 QSP_SHLIBS_MINVER)
if(QSP_SHLIBS_MINVER VERSION_GREATER PROJECT_VERSION)
  set(QSP_SHLIBS_MINVER ${PROJECT_VERSION})
endif()
file(WRITE ${QSP_PKG_OUT}/${QSP_DEB_RUNTIME}/shlibs
  "libqsp ${PROJECT_VERSION_MAJOR} ${QSP_DEB_RUNTIME} (>= ${QSP_SHLIBS_MINVER})\n")

# ---- CPack ---------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME qsp)
set(CPACK_PACKAGE_VENDOR "qsp developers")
set(CPACK_PACKAGE_CONTACT "qsp developers <qsp@example.invalid>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPackDeb would prepend it to every
# component's description. Each description file starts with its synopsis.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
# Debug symbols: CPack splits them into <package>-dbgsym .ddeb files
# (/usr/lib/debug/.build-id/) and strips the binaries (objcopy --strip-unneeded).
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
# 0644/0755 control files whatever the checkout's permissions.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

file(READ ${QSP_PKG_DIR}/${QSP_DEB_RUNTIME}.description CPACK_DEBIAN_RUNTIME_DESCRIPTION)
file(READ ${QSP_PKG_DIR}/${QSP_DEB_DEV}.description CPACK_DEBIAN_DEV_DESCRIPTION)
file(READ ${QSP_PKG_DIR}/${QSP_DEB_TOOLS}.description CPACK_DEBIAN_TOOLS_DESCRIPTION)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ${QSP_DEB_RUNTIME})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
# The trigger replaces ldconfig calls in maintainer scripts. CPack writes a
# postinst/postrm calling ldconfig for any library under /usr/lib:
# packaging/QspDebPostBuild.cmake takes them out of the finished package.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
  ${QSP_PKG_OUT}/${QSP_DEB_RUNTIME}/symbols ${QSP_PKG_OUT}/${QSP_DEB_RUNTIME}/shlibs ${QSP_PKG_DIR}/triggers)
set(CPACK_POST_BUILD_SCRIPTS ${QSP_PKG_DIR}/QspDebPostBuild.cmake)
set(CPACK_QSP_DEB_RUNTIME ${QSP_DEB_RUNTIME})
# NCCL is loaded at run time (dlopen), only for contexts that span several
# GPUs (src/cuda/nccl_lib.h): a suggestion, not a dependency.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "libnccl2")
# Multi-Arch: same (CPack 3.25 has no setting for it; the post-build script
# adds it): the library and its development files live in the multiarch
# directories, and what they share (/usr/include, /usr/share/doc) is the same
# on every architecture, so libqsp1:amd64 and libqsp1:i386 can be installed
# together.
set(CPACK_QSP_MULTIARCH_SAME ${QSP_DEB_RUNTIME} ${QSP_DEB_DEV})

set(CPACK_DEBIAN_DEV_PACKAGE_NAME ${QSP_DEB_DEV})
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# libutf8proc-dev: what a static link against libqsp.a (qsp.pc's Libs.private,
# the CMake package's qsp::qsp_static) needs besides libqsp1's own dependencies.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${QSP_DEB_RUNTIME} (= ${PROJECT_VERSION}), libutf8proc-dev")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME ${QSP_DEB_TOOLS})
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
# dpkg-shlibdeps cannot see libqsp1 (a sibling package being built), so the
# tool's dependencies are spelled out.
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${QSP_DEB_RUNTIME} (= ${PROJECT_VERSION}), libc6, libstdc++6, libgcc-s1")
set(CPACK_DEBIAN_TOOLS_PACKAGE_SHLIBDEPS OFF)
include(CPack)
