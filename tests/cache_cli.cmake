# `kiln cache` end to end on a fresh KILN_CACHE_DIR: import a file, list it, export it, clear, import the
# export, list again, verify (the entry's device is not this machine's: skipped, with the reason), and
# refuse a foreign file. Run by CTest: cmake -DKILN=<kiln binary> -DWORK=<scratch folder> -P cache_cli.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/cache)
set(ENV{KILN_CACHE_DIR} ${WORK}/cache)

# Runs `kiln cache ARGS...`; checks the exit status and that the output matches each expected regex.
function(kiln_cache expect_rc)
  cmake_parse_arguments(ARG "" "" "ARGS;EXPECT;REJECT" ${ARGN})
  execute_process(COMMAND ${KILN} cache ${ARG_ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}${err}")
  list(JOIN ARG_ARGS " " shown)
  message(STATUS "$ kiln cache ${shown}  (exit ${rc})\n${all}")
  if(NOT rc EQUAL expect_rc)
    message(FATAL_ERROR "kiln cache ${ARG_ARGS}: exit status ${rc}, expected ${expect_rc}")
  endif()
  foreach(pattern IN LISTS ARG_EXPECT)
    if(NOT all MATCHES "${pattern}")
      message(FATAL_ERROR "kiln cache ${ARG_ARGS}: the output does not match \"${pattern}\"")
    endif()
  endforeach()
  foreach(pattern IN LISTS ARG_REJECT)
    if(all MATCHES "${pattern}")
      message(FATAL_ERROR "kiln cache ${ARG_ARGS}: the output matches \"${pattern}\" and should not")
    endif()
  endforeach()
endfunction()

set(key "0123456789abcdef | CPU test-arch test-cc 1 | C | actions=1 | beam=2 | schema=1")
file(WRITE ${WORK}/fixture.json "{\"format\": \"kiln-tuning-cache\", \"schema\": 1, \"entries\": {\"${key}\": {
  \"key\": {\"ast_hash\": \"0123456789abcdef\", \"device\": \"CPU test-arch test-cc 1\", \"renderer\": \"C\",
          \"action_space\": 1, \"search\": \"beam=2\", \"schema\": 1},
  \"kernel\": \"r_fixture_4_16\", \"opts\": [\"UPCAST(0,4)\"], \"default_seconds\": 0.002, \"best_seconds\": 0.001,
  \"created\": \"2026-11-30T12:00:00Z\", \"ast\": \"\"}}}\n")
file(WRITE ${WORK}/foreign.json "{\"editor.fontSize\": 14}\n")

kiln_cache(0 ARGS ls EXPECT "0 entries" "compiled binaries")
kiln_cache(0 ARGS import ${WORK}/fixture.json EXPECT "1 added")
kiln_cache(0 ARGS ls EXPECT "1 entry" "r_fixture_4_16 +CPU test-arch test-cc 1 \\(C\\) +UPCAST\\(0,4\\) +default 2 ms, best 1 ms, 2x")
kiln_cache(0 ARGS export ${WORK}/exported.json EXPECT "exported 1 tuning entry")
kiln_cache(0 ARGS clear EXPECT "removed .*tuning.json. \\(1 tuning entry\\)" "removed .*compile")
kiln_cache(0 ARGS ls EXPECT "0 entries" REJECT "r_fixture")
kiln_cache(0 ARGS import ${WORK}/exported.json EXPECT "1 added")
kiln_cache(0 ARGS import ${WORK}/exported.json EXPECT "0 added, 0 replaced .* 1 kept")
kiln_cache(0 ARGS ls EXPECT "r_fixture_4_16")
kiln_cache(0 ARGS verify EXPECT "skipped  r_fixture_4_16" "1 skipped")
kiln_cache(1 ARGS import ${WORK}/foreign.json EXPECT "refused .*foreign.json.*not a kiln tuning cache")
kiln_cache(2 ARGS export)
kiln_cache(0 ARGS ls EXPECT "1 entry")
file(REMOVE_RECURSE ${WORK})
