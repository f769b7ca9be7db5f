# Installs ringfeed@.service with its paths pointing at the prefix installed to. Runs at install
# time (cmake --install, included from cmake_install.cmake), so `cmake --install build --prefix P`
# gets ExecStart=P/bin/ringfeedd even when the build was configured for another prefix.
# Set before it (install(CODE) in systemd/CMakeLists.txt): RINGFEED_UNIT_SOURCE and the
# install dirs RINGFEED_UNIT_DIR, RINGFEED_BINDIR, RINGFEED_DOCDIR, RINGFEED_DATAROOTDIR
# (relative to the prefix, or absolute).
foreach(dir UNIT_DIR BINDIR DOCDIR DATAROOTDIR)
  if(IS_ABSOLUTE "${RINGFEED_${dir}}")
    set(full_${dir} "${RINGFEED_${dir}}")
  else()
    set(full_${dir} "${CMAKE_INSTALL_PREFIX}/${RINGFEED_${dir}}")
  endif()
endforeach()
file(READ "${RINGFEED_UNIT_SOURCE}" unit_text)
# Through placeholders, so that a prefix under /usr/local/share/ is not rewritten again.
string(REPLACE "/usr/local/bin/" "{{bindir}}/" unit_text "${unit_text}")
string(REPLACE "/usr/local/share/doc/ringfeed/" "{{docdir}}/" unit_text "${unit_text}")
string(REPLACE "/usr/local/share/" "{{datarootdir}}/" unit_text "${unit_text}")
string(REPLACE "{{bindir}}" "${full_BINDIR}" unit_text "${unit_text}")
string(REPLACE "{{docdir}}" "${full_DOCDIR}" unit_text "${unit_text}")
string(REPLACE "{{datarootdir}}" "${full_DATAROOTDIR}" unit_text "${unit_text}")
set(unit_path "$ENV{DESTDIR}${full_UNIT_DIR}/ringfeed@.service")
message(STATUS "Installing: ${unit_path} (ExecStart=${full_BINDIR}/ringfeedd)")
file(WRITE "${unit_path}" "${unit_text}")
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${unit_path}")
