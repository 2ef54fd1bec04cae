# CPACK_POST_BUILD_SCRIPTS: the finishing touches CPack 3.25 cannot be told to
# make, applied to the packages it wrote (each unpacked with dpkg-deb -R,
# changed, packed again):
# - libqsp1 and libqsp-dev get Multi-Arch: same (cmake/QspDebian.cmake says why);
# - the shared-library package loses the postinst and postrm that CPackDeb
#   writes for any library under /usr/lib: they only call ldconfig (lintian:
#   maintscript-calls-ldconfig); the package carries the ldconfig trigger
#   instead (packaging/triggers);
# - a -dbgsym .ddeb gets its md5sums with package-relative paths (CPack writes
#   the staging directory's absolute ones) and, as debhelper makes them, its
#   /usr/share/doc/<package>-dbgsym as a link to the doc directory of the
#   package it depends on (copyright and changelog); the .debug files 0644.
function(qsp_repack pkg)
  set(tree "${CPACK_TOPLEVEL_DIRECTORY}/repack")
  file(REMOVE_RECURSE "${tree}")
  execute_process(COMMAND dpkg-deb -R "${pkg}" "${tree}" COMMAND_ERROR_IS_FATAL ANY)
  get_filename_component(name "${pkg}" NAME)
  string(REGEX REPLACE "_.*" "" package "${name}")
  if(package IN_LIST CPACK_QSP_MULTIARCH_SAME)
    file(READ "${tree}/DEBIAN/control" control)
    if(NOT control MATCHES "\nMulti-Arch:")
      string(REPLACE "\nDescription:" "\nMulti-Arch: same\nDescription:" control "${control}")
      file(WRITE "${tree}/DEBIAN/control" "${control}")
    endif()
  endif()
  if(name MATCHES "^${CPACK_QSP_DEB_RUNTIME}_.*\\.deb$")
    foreach(script postinst postrm)
      if(EXISTS "${tree}/DEBIAN/${script}")
        file(READ "${tree}/DEBIAN/${script}" body)
        string(REGEX REPLACE "(#![^\n]*|set -e|if \\[ \"\\$1\" = \"[a-z]+\" \\]; then|ldconfig|fi|[ \t\n])" "" rest "${body}")
        if(NOT rest STREQUAL "")
          message(FATAL_ERROR "${name}: ${script} does more than call ldconfig:\n${body}")
        endif()
        file(REMOVE "${tree}/DEBIAN/${script}")
      endif()
    endforeach()
  elseif(name MATCHES "^(.*)-dbgsym_.*\\.ddeb$")
    set(parent ${CMAKE_MATCH_1})
    file(STRINGS "${tree}/DEBIAN/md5sums" sums)
    set(fixed "")
    foreach(line IN LISTS sums)
      string(REGEX REPLACE "^([0-9a-f]+)  .*/(usr/lib/debug/.*)$" "\\1  \\2" line "${line}")
      string(APPEND fixed "${line}\n")
    endforeach()
    file(WRITE "${tree}/DEBIAN/md5sums" "${fixed}")
    file(GLOB_RECURSE debug_files "${tree}/usr/lib/debug/*.debug")
    foreach(f IN LISTS debug_files)
      file(CHMOD "${f}" FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
    endforeach()
    file(MAKE_DIRECTORY "${tree}/usr/share/doc")
    file(CREATE_LINK ${parent} "${tree}/usr/share/doc/${parent}-dbgsym" SYMBOLIC)
  endif()
  execute_process(COMMAND dpkg-deb --root-owner-group -Zxz -b "${tree}" "${pkg}"
    OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
  file(REMOVE_RECURSE "${tree}")
endfunction()

foreach(pkg IN LISTS CPACK_PACKAGE_FILES)
  qsp_repack("${pkg}")
endforeach()
