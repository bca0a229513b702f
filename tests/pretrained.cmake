# Hugging Face GPT-2 weights in and out: the safetensors unit tests are tests/test_safetensors.cpp
# (globbed, label unit); here the end-to-end script (import/export round trip, --init-from, clear
# errors) and the oracle (imported logits against PyTorch; exit 77 where torch is missing).
mpitron_e2e_test(pretrained_import_export pretrained.sh unit 300)
# Import's peak resident set against the weights' bytes (numpy only; about 10 s).
mpitron_e2e_test(import_memory import_memory.sh unit 120)
add_test(NAME oracle_hf_import
         COMMAND ${MPITRON_ORACLE_PYTHON} ${CMAKE_SOURCE_DIR}/validate/hf_oracle_test.py
                 --mpitron $<TARGET_FILE:mpitron> --workdir ${CMAKE_BINARY_DIR}/hf_oracle_work)
set_tests_properties(oracle_hf_import PROPERTIES LABELS oracle ENVIRONMENT "${MPITRON_MPI_ENV}"
                     TIMEOUT 180 SKIP_RETURN_CODE 77)
