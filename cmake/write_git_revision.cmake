# Run at every build (cmake -P, from the harness_git_revision target): writes OUT, a C++ source
# whose moe::git_revision() returns the commit of SOURCE_DIR (12 hex digits; "+dirty" when
# tracked files differ from it; "unknown" outside a git checkout). OUT is rewritten only when
# that string changes, so an unchanged revision recompiles nothing.
execute_process(COMMAND git rev-parse --short=12 HEAD
  WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE status
  OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT status EQUAL 0 OR NOT revision)
  set(revision "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD --
    WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE dirty OUTPUT_QUIET ERROR_QUIET)
  if(dirty EQUAL 1)
    string(APPEND revision "+dirty")
  endif()
endif()
file(WRITE "${OUT}.new"
  "// Written by cmake/write_git_revision.cmake at build time.\n"
  "#include \"ranks/git_revision.h\"\n\n"
  "namespace moe {\n\n"
  "const char* git_revision() { return \"${revision}\"; }\n\n"
  "}  // namespace moe\n")
file(COPY_FILE "${OUT}.new" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.new")
