# `make install` / `make uninstall` (docs/install.md): what an installed kiln
# is. Included last from the top-level CMakeLists.txt, when every target
# exists. Paths are GNUInstallDirs' (CMAKE_INSTALL_BINDIR, ...), relative to
# CMAKE_INSTALL_PREFIX, under $DESTDIR when that is set.
#
#   BINDIR            kiln, kilnd, kiln-train, and kilnd's helpers
#                     kiln-monitor, kiln-slurm-task, kiln-mpi-agent and
#                     kiln-gpu-check (kilnd runs them from next to itself,
#                     src/daemon/main.c)
#   lib/kiln          the CUDA backend plugin, where built: kiln-train looks
#                     in ../lib/kiln from itself (src/runtime/backend/backend_load.c),
#                     so it is lib/kiln under the prefix, not LIBDIR (which
#                     is lib/<triplet> on Debian); src/cuda/CMakeLists.txt
#   DATADIR/kiln/catalog   the default catalog's files, for a site to start
#                     its --catalog file from (kiln has them built in)
#   DATADIR/kiln/runtimes  a TrainJob's stock runtimes (data/runtimes)
#   DOCDIR            README.md, docs/*.md, the OpenAPI description
#   MANDIR            kiln(1), kilnd(8), kiln-train(1), made from --help
#                     by help2man, where it is found
#   lib/systemd/system   kilnd.service, from packaging/kilnd.service.in
include(GNUInstallDirs)

foreach(t kiln kilnd kiln-monitor kiln-slurm-task kiln-mpi-agent kiln-gpu-check)
  if(TARGET ${t})
    install(TARGETS ${t} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/data/catalog/ DESTINATION ${CMAKE_INSTALL_DATADIR}/kiln/catalog
        FILES_MATCHING PATTERN "*.yaml")
# a TrainJob's stock runtimes (src/spec/trainjob.c reads them here when the
# source tree is not beside the binary)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/data/runtimes/ DESTINATION ${CMAKE_INSTALL_DATADIR}/kiln/runtimes
        FILES_MATCHING PATTERN "*.yaml")
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/VERSION
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
        FILES_MATCHING PATTERN "*.md" PATTERN "openapi.yaml" PATTERN "gpu-runs" EXCLUDE)
# The unit names the installed programs, so it is written at install time,
# from the prefix then in force (`cmake --install --prefix P` changes it);
# file(INSTALL) records it in the manifest as install(FILES) would.
foreach(_d BINDIR DOCDIR SYSCONFDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_d}}")
    set(_kiln_${_d} "${CMAKE_INSTALL_${_d}}")
  else() # the prefix of the install, read when it runs
    set(_kiln_${_d} "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_${_d}}")
  endif()
endforeach()
if(TARGET kilnd)
  install(CODE "
    set(KILN_BINDIR \"${_kiln_BINDIR}\")
    set(KILN_DOCDIR \"${_kiln_DOCDIR}\")
    set(KILN_SYSCONFDIR \"${_kiln_SYSCONFDIR}\")
    configure_file([[${CMAKE_SOURCE_DIR}/packaging/kilnd.service.in]]
                   [[${CMAKE_BINARY_DIR}/install/kilnd.service]] @ONLY)
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\" TYPE FILE
         FILES [[${CMAKE_BINARY_DIR}/install/kilnd.service]])")
endif()

# Man pages from the programs' own --help and --version (help2man), plus a
# few sections of words (packaging/man/*.h2m). Built with the programs, so
# they never disagree with them; without help2man there are none, and
# configure says so.
find_program(KILN_HELP2MAN help2man)
set(KILN_MAN_PAGES "")
if(KILN_HELP2MAN)
  macro(kiln_man prog sect what)
    if(TARGET ${prog})
      set(_out ${CMAKE_BINARY_DIR}/man/${prog}.${sect})
      set(_inc ${CMAKE_SOURCE_DIR}/packaging/man/${prog}.h2m)
      set(_incarg "")
      set(_incarg_dep "")
      if(EXISTS ${_inc})
        set(_incarg --include=${_inc})
        set(_incarg_dep ${_inc})
      endif()
      add_custom_command(
        OUTPUT ${_out}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
        COMMAND ${KILN_HELP2MAN} --no-info --no-discard-stderr --section=${sect}
                --name=${what} ${_incarg} --output=${_out} $<TARGET_FILE:${prog}>
        DEPENDS ${prog} ${CMAKE_SOURCE_DIR}/VERSION ${_incarg_dep}
        COMMENT "Man page ${prog}(${sect})" VERBATIM)
      list(APPEND KILN_MAN_PAGES ${_out})
      install(FILES ${_out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${sect})
    endif()
  endmacro()
  kiln_man(kiln 1 "command line of the kiln training platform")
  kiln_man(kilnd 8 "kiln's training job service")
  kiln_man(kiln-train 1 "kiln's training runtime")
  add_custom_target(kiln_man ALL DEPENDS ${KILN_MAN_PAGES})
  message(STATUS "Man pages: help2man ${KILN_HELP2MAN}")
else()
  message(STATUS "Man pages: not made (help2man not found: apt-get install help2man)")
endif()

# `make uninstall`: removes what the last install wrote (its manifest),
# then the directories of kiln's own that it leaves empty
add_custom_target(uninstall
  COMMAND ${CMAKE_COMMAND} -DMANIFEST=${CMAKE_BINARY_DIR}/install_manifest.txt
          -P ${CMAKE_SOURCE_DIR}/cmake/uninstall.cmake
  COMMENT "Uninstalling kiln" VERBATIM)

# The install test: into a DESTDIR, then the installed programs run
# (tests/install/test_install.sh)
add_test(NAME install_destdir
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/test_install.sh ${CMAKE_BINARY_DIR})
set_tests_properties(install_destdir PROPERTIES LABELS install TIMEOUT 180 SKIP_RETURN_CODE 77
                     RUN_SERIAL ON)

# The Debian packages `make deb` made (tests/install/test_deb.sh), installed
# in a fresh Debian 12 chroot (apt, minutes): label deb, which `make check`
# leaves out and `make check-deb` (after `make deb`) runs
add_test(NAME deb_package
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/test_deb.sh ${CMAKE_BINARY_DIR})
set_tests_properties(deb_package PROPERTIES LABELS deb TIMEOUT 1500 SKIP_RETURN_CODE 77
                     RUN_SERIAL ON)
