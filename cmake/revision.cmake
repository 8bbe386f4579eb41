# Writes OUT: a header defining SORTD_GIT_REVISION, the source tree's git
# revision ("+dirty" with local changes). Outside a git checkout (a
# container build's context has no .git) the environment's SORTD_REVISION
# names it, else "unknown".
# Run at every build; the file is rewritten only when the text changes, so
# only what includes it rebuilds.
execute_process(
  COMMAND git describe --always --dirty=+dirty --abbrev=12
  WORKING_DIRECTORY ${SRC}
  OUTPUT_VARIABLE revision
  OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_QUIET)
if(NOT revision)
  if(DEFINED ENV{SORTD_REVISION} AND NOT "$ENV{SORTD_REVISION}" STREQUAL "")
    set(revision "$ENV{SORTD_REVISION}")
  else()
    set(revision unknown)
  endif()
endif()
set(text "#define SORTD_GIT_REVISION \"${revision}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
