# Writes OUTPUT (a header defining TLC_GIT_COMMIT) from `git describe` of SOURCE_DIR;
# run at every build, it rewrites the header only when the commit changed, so a new
# commit relinks what prints versions and nothing else.
execute_process(
  COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE status)
if(NOT status EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")  # a source tarball, or no git
endif()
set(text "#define TLC_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
