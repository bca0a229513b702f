# The encoder (bert family) through the same trainer: each task has a 1x1x1 baseline (a CTest
# fixture) that its layouts reproduce to 1e-5 relative on every step, dropout on. The masked LM
# covers every DP reduction, buckets, ZeRO 1 and 2, micro-batches and TP; the classifiers (padding
# masks, token types) DP and TP.
foreach(task mlm testament pairs)
  add_test(NAME equivalence_bert_${task}_baseline
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bert_baseline.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/equivalence_bert_${task}_baseline
                   ${task})
  set_tests_properties(equivalence_bert_${task}_baseline PROPERTIES LABELS "equivalence;mpi"
                       TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}"
                       FIXTURES_SETUP equivalence_bert_${task}_baseline)
endforeach()

# mpitron_bert_layout_test(task name ranks flags...)
function(mpitron_bert_layout_test task name ranks)
  add_test(NAME equivalence_bert_${task}_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/layout.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/equivalence_bert_${task}_${name}
                   ${CMAKE_BINARY_DIR}/e2e/equivalence_bert_${task}_baseline/trace.h5 ${ranks}
                   ${ARGN})
  set_tests_properties(equivalence_bert_${task}_${name} PROPERTIES LABELS "equivalence;mpi"
                       TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}"
                       FIXTURES_REQUIRED equivalence_bert_${task}_baseline)
endfunction()

mpitron_bert_layout_test(mlm dp2_allreduce 2 --dp 2 --dp-reduce allreduce)
mpitron_bert_layout_test(mlm dp2_ring 2 --dp 2 --dp-reduce ring)
mpitron_bert_layout_test(mlm dp2_gather_scatter 2 --dp 2 --dp-reduce gather-scatter)
mpitron_bert_layout_test(mlm dp2_bucketed 2 --dp 2 --bucket-mb 0.05)
mpitron_bert_layout_test(mlm dp4_zero1 4 --dp 4 --zero 1)
mpitron_bert_layout_test(mlm dp2_zero2 2 --dp 2 --zero 2)
mpitron_bert_layout_test(mlm micro2 1 --micro-batches 2)
mpitron_bert_layout_test(mlm tp2 2 --tp 2)
mpitron_bert_layout_test(mlm dp2_tp2 4 --dp 2 --tp 2)
mpitron_bert_layout_test(testament dp2 2 --dp 2)
mpitron_bert_layout_test(testament tp2_micro2 2 --tp 2 --micro-batches 2)
mpitron_bert_layout_test(pairs dp2_zero1 2 --dp 2 --zero 1)
mpitron_bert_layout_test(pairs tp2 2 --tp 2)

mpitron_e2e_test(bert bert.sh unit 600)
