# Removes every file the install manifest names, under $DESTDIR when that
# is set (the manifest's paths are the prefix's, without it), then each of
# kiln's own directories (a path component "kiln") left empty, deepest first.
#   [DESTDIR=...] cmake -DMANIFEST=BUILD/install_manifest.txt -P uninstall.cmake
if(NOT EXISTS ${MANIFEST})
  message(FATAL_ERROR "nothing to uninstall: ${MANIFEST} does not exist (no make install yet)")
endif()
file(STRINGS ${MANIFEST} files)
set(dirs "")
foreach(f ${files})
  set(f "$ENV{DESTDIR}${f}")
  if(EXISTS ${f} OR IS_SYMLINK ${f})
    message(STATUS "Removing ${f}")
    file(REMOVE ${f})
  endif()
  get_filename_component(d ${f} DIRECTORY)
  while(d MATCHES "/kiln(/|$)")
    list(APPEND dirs ${d})
    get_filename_component(d ${d} DIRECTORY)
  endwhile()
endforeach()
list(REMOVE_DUPLICATES dirs)
list(SORT dirs)
list(REVERSE dirs) # children sort after their parents
foreach(d ${dirs})
  file(GLOB left ${d}/*)
  if(IS_DIRECTORY ${d} AND NOT left)
    file(REMOVE_RECURSE ${d}) # empty: nothing but the directory goes
  endif()
endforeach()
