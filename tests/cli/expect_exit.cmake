# Runs EXE with ARGS and fails unless it exits with EXPECT and prints a message on stderr.
execute_process(COMMAND ${EXE} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT)
  message(FATAL_ERROR "expected exit ${EXPECT}, got ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
if(EXPECT EQUAL 2 AND NOT err MATCHES "moemem: error: ")
  message(FATAL_ERROR "no 'moemem: error:' message on stderr: ${err}")
endif()
