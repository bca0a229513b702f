# Hugging Face BERT import (label oracle): a random BERT written in HF layout by
# validate/hf_bert_oracle_test.py (BertForPreTraining with gamma/beta names and vocab.txt, a BF16
# masked LM without prefix, a BertForSequenceClassification), imported, evaluated against the
# PyTorch model (logits and loss to 1e-5); export -> import bitwise with the special ids
# (config.json names them; a disagreeing vocab.txt is refused), also for a BERT mpitron trained;
# train --init-from (1 rank and tp 2), and one clear error line per bad model. Exit 77 (skipped) where no python imports
# torch and h5py (tests/python.cmake). About 25 s.
add_test(NAME oracle_hf_bert_import
         COMMAND ${MPITRON_ORACLE_PYTHON} ${CMAKE_SOURCE_DIR}/validate/hf_bert_oracle_test.py
                 --mpitron $<TARGET_FILE:mpitron> --workdir ${CMAKE_BINARY_DIR}/hf_bert_oracle_work)
set_tests_properties(oracle_hf_bert_import PROPERTIES LABELS oracle ENVIRONMENT
                     "${MPITRON_MPI_ENV}" TIMEOUT 300 SKIP_RETURN_CODE 77)
