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

# An entry whose "opts" nests 60,000 levels deep (120 KB): ls, verify and import neither crash nor
# quote it whole; the good entry is still listed, and the warning says one entry was lost.
string(REPEAT "[" 60000 open)
string(REPEAT "]" 60000 close)
set(deep_key "fedcba9876543210 | CPU test-arch test-cc 1 | C | actions=1 | beam=2 | schema=1")
file(READ ${WORK}/cache/tuning.json good)
string(REPLACE "\"entries\": {" "\"entries\": {\"${deep_key}\": {\"opts\": [${open}${close}]}, " deep "${good}")
file(WRITE ${WORK}/cache/tuning.json "${deep}")
file(WRITE ${WORK}/deep.json "${deep}")
kiln_cache(0 ARGS ls EXPECT "1 entry" "r_fixture_4_16" "nests JSON more than 16 levels deep" "1 entry still parses and is used, 1 entry is lost")
kiln_cache(0 ARGS verify EXPECT "1 skipped" "nests JSON more than 16 levels deep")
kiln_cache(1 ARGS import ${WORK}/deep.json EXPECT "refused .*deep.json.*nests JSON more than 16 levels deep" REJECT "\\[\\[\\[\\[")

# A number out of range names the file and what happens next (not nlohmann's bare message).
string(REPLACE "0.001" "1e400" huge "${good}")
file(WRITE ${WORK}/cache/tuning.json "${huge}")
kiln_cache(0 ARGS ls EXPECT "tuning.json. holds a number out of range .*1 entry is lost .*the next store moves the file aside")

# An entry with a well-formed hash but garbage AST text is refused by import, with the reason.
file(WRITE ${WORK}/cache/tuning.json "${good}")
string(REPLACE "\"ast\": \"\"" "\"ast\": \"kiln-uops 1\\n0 SINK void [3] -\\n\"" garbage "${good}")
file(WRITE ${WORK}/garbage.json "${garbage}")
kiln_cache(0 ARGS import ${WORK}/garbage.json EXPECT "0 added, 0 replaced .* 1 refused" "its \"ast\" is not a kernel AST: parse_program: line 2")

# A search that finds a bad cache warns once, naming the cache once ("tuning cache: tuning cache:" no more).
file(WRITE ${WORK}/cache/tuning.json "not json")
execute_process(COMMAND ${KILN} search matmul 8 8 8 --beam 1 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "$ kiln search matmul 8 8 8 --beam 1  (exit ${rc})\n${err}")
if(NOT rc EQUAL 0 OR NOT err MATCHES "kiln: warning: tuning cache: .*is not valid JSON" OR err MATCHES "tuning cache: tuning cache")
  message(FATAL_ERROR "kiln search with a bad tuning cache: exit ${rc}; expected one warning naming the cache once")
endif()

# Two processes searching different workloads into one KILN_CACHE_DIR at once both keep their results.
file(REMOVE_RECURSE ${WORK}/cache)
execute_process(COMMAND sh -c "'${KILN}' search matmul 8 8 8 --beam 1 >/dev/null & a=$!; '${KILN}' search reduce 4096 --beam 1 >/dev/null & b=$!; wait $a && wait $b"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "two concurrent searches: exit status ${rc}\n${err}")
endif()
kiln_cache(0 ARGS ls EXPECT "r_8_8_8" "r_4096|r_[0-9]+_[0-9]+ " REJECT "warning")
file(REMOVE_RECURSE ${WORK})
