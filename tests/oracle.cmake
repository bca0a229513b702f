# Oracle test (label oracle): mpitron's logits, loss, every gradient and a 10-step training run
# against the independent PyTorch model in validate/gpt_torch.py (the interpreter
# tests/python.cmake found with torch; skipped, exit 77, where none has it). About 10 s; the timeout
# leaves room for a loaded machine.
add_test(NAME oracle_gpt_tiny
         COMMAND ${MPITRON_ORACLE_PYTHON} ${CMAKE_SOURCE_DIR}/validate/oracle_test.py
                 --mpitron $<TARGET_FILE:mpitron> --repo ${CMAKE_SOURCE_DIR}
                 --workdir ${CMAKE_BINARY_DIR}/oracle_work)
set_tests_properties(oracle_gpt_tiny PROPERTIES LABELS oracle ENVIRONMENT "${MPITRON_MPI_ENV}"
                     TIMEOUT 180 SKIP_RETURN_CODE 77)
