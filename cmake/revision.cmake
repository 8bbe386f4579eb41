# Writes OUT: a header defining SORTD_GIT_REVISION, the source tree's git
# revision ("unknown" outside a git checkout, "+dirty" with local changes).
# Run at every build; the file is rewritten only when the text changes, so
# only what includes it rebuilds.
execute_process(
  COMMAND git describe --always --dirty=+dirty --abbrev=12
  WORKING_DIRECTORY ${SRC}
  OUTPUT_VARIABLE revision
  OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_QUIET)
if(NOT revision)
  set(revision unknown)
endif()
set(text "#define SORTD_GIT_REVISION \"${revision}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
