# CPACK_POST_BUILD_SCRIPTS: takes out of the shared-library package the
# postinst and postrm that CPackDeb writes for any library under /usr/lib
# (they only call ldconfig; lintian: maintscript-calls-ldconfig). The package
# carries the ldconfig trigger instead (packaging/triggers). CPack 3.25 has no
# setting that turns these scripts off.
foreach(deb IN LISTS CPACK_PACKAGE_FILES)
  get_filename_component(name "${deb}" NAME)
  if(NOT name MATCHES "^${CPACK_QSP_DEB_RUNTIME}_.*\\.deb$")
    continue()
  endif()
  set(tree "${CPACK_TOPLEVEL_DIRECTORY}/repack-${CPACK_QSP_DEB_RUNTIME}")
  file(REMOVE_RECURSE "${tree}")
  execute_process(COMMAND dpkg-deb -R "${deb}" "${tree}" COMMAND_ERROR_IS_FATAL ANY)
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
  execute_process(COMMAND dpkg-deb --root-owner-group -Zxz -b "${tree}" "${deb}"
    OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
  file(REMOVE_RECURSE "${tree}")
endforeach()
