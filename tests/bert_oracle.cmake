# Oracle test (label oracle): the bert encoder family's loss, logits and every parameter gradient
# (masked LM, testament and verse-pair classification, padding and token types; mpitron's initial
# checkpoint and a randomised copy), the masking rule it applies, and wrong references that must
# fail, against the independent PyTorch model in validate/bert_torch.py (the interpreter
# tests/python.cmake found with torch; skipped, exit 77, where none has it). About 30 s; the
# timeout leaves room for a loaded machine.
add_test(NAME oracle_bert
         COMMAND ${MPITRON_ORACLE_PYTHON} ${CMAKE_SOURCE_DIR}/validate/bert_oracle_test.py
                 --mpitron $<TARGET_FILE:mpitron> --repo ${CMAKE_SOURCE_DIR}
                 --workdir ${CMAKE_BINARY_DIR}/oracle_bert_work)
set_tests_properties(oracle_bert PROPERTIES LABELS oracle ENVIRONMENT "${MPITRON_MPI_ENV}"
                     TIMEOUT 300 SKIP_RETURN_CODE 77)
