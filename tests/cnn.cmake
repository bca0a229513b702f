# cnn tests
# The CNN families through the same trainer: each has a 1x1x1 baseline (a CTest fixture) that its
# layouts reproduce to 1e-5 relative on every step, augmentation and batch norm on. alexnet covers
# DP (every reduction, ZeRO 1 and 2, buckets), micro-batches, channel TP and a pipeline of its
# convolutions (TP shards crossing stage boundaries); resnet the pipeline schedules over its blocks.
foreach(family alexnet resnet)
  set(dir ${CMAKE_BINARY_DIR}/e2e/equivalence_${family}_baseline)
  add_test(NAME equivalence_${family}_baseline
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cnn_baseline.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${dir} ${family})
  set_tests_properties(equivalence_${family}_baseline PROPERTIES LABELS "equivalence;mpi"
                       TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}"
                       FIXTURES_SETUP equivalence_${family}_baseline SKIP_RETURN_CODE 77)
  add_test(NAME equivalence_${family}_resume_layout
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cnn_resume_layout.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/equivalence_${family}_resume
                   ${dir}/trace.h5 ${family})
  set_tests_properties(equivalence_${family}_resume_layout PROPERTIES LABELS "equivalence;mpi"
                       TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}"
                       FIXTURES_REQUIRED equivalence_${family}_baseline)
endforeach()

# mpitron_cnn_layout_test(family name ranks flags...)
function(mpitron_cnn_layout_test family name ranks)
  add_test(NAME equivalence_${family}_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/layout.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/equivalence_${family}_${name}
                   ${CMAKE_BINARY_DIR}/e2e/equivalence_${family}_baseline/trace.h5 ${ranks} ${ARGN})
  set_tests_properties(equivalence_${family}_${name} PROPERTIES LABELS "equivalence;mpi"
                       TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}"
                       FIXTURES_REQUIRED equivalence_${family}_baseline)
endfunction()

mpitron_cnn_layout_test(alexnet dp2 2 --dp 2)
mpitron_cnn_layout_test(alexnet dp4 4 --dp 4)
mpitron_cnn_layout_test(alexnet dp2_ring 2 --dp 2 --dp-reduce ring)
mpitron_cnn_layout_test(alexnet dp2_gather_scatter 2 --dp 2 --dp-reduce gather-scatter)
mpitron_cnn_layout_test(alexnet dp2_zero1 2 --dp 2 --zero 1)
mpitron_cnn_layout_test(alexnet dp4_zero2_bucketed 4 --dp 4 --zero 2 --bucket-mb 0.01)
mpitron_cnn_layout_test(alexnet micro2 1 --micro-batches 2)
mpitron_cnn_layout_test(alexnet tp2_pp2 4 --tp 2 --pp 2 --micro-batches 2)
mpitron_cnn_layout_test(alexnet pp4_1f1b 4 --pp 4 --schedule 1f1b --micro-batches 4)
mpitron_cnn_layout_test(alexnet dp2_tp2 4 --dp 2 --tp 2)
mpitron_cnn_layout_test(resnet dp2 2 --dp 2)
mpitron_cnn_layout_test(resnet dp2_zero1_micro2 2 --dp 2 --zero 1 --micro-batches 2)
mpitron_cnn_layout_test(resnet pp4_gpipe 4 --pp 4 --schedule gpipe --micro-batches 8)
mpitron_cnn_layout_test(resnet pp4_1f1b 4 --pp 4 --schedule 1f1b --micro-batches 8)
mpitron_cnn_layout_test(resnet pp2_interleaved 2 --pp 2 --schedule interleaved --virtual-stages 3 --micro-batches 4)
mpitron_cnn_layout_test(resnet dp2_pp2 4 --dp 2 --pp 2 --micro-batches 2)

# 200 micro-batches through the resnet's 4 stages in bounded memory (1F1B against GPipe).
add_test(NAME resnet_pipeline_memory
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/pipeline_memory.sh $<TARGET_FILE:mpitron>
                 ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/resnet_pipeline_memory resnet)
set_tests_properties(resnet_pipeline_memory PROPERTIES LABELS mpi TIMEOUT 600
                     ENVIRONMENT "${MPITRON_MPI_ENV}" SKIP_RETURN_CODE 77)
mpitron_e2e_test(cnn_fashion_mnist cnn.sh unit 600)

# Oracle test (label oracle): both CNN families' logits, loss, every gradient (ghost-group batch
# norm) and a 5-step training run with its running statistics against the independent PyTorch
# models in validate/cnn_torch.py (the interpreter tests/python.cmake found with torch, and
# dataset-fashion-mnist; skipped, exit 77, where either is missing).
add_test(NAME oracle_cnn
         COMMAND ${MPITRON_ORACLE_PYTHON} ${CMAKE_SOURCE_DIR}/validate/cnn_oracle_test.py
                 --mpitron $<TARGET_FILE:mpitron> --repo ${CMAKE_SOURCE_DIR}
                 --workdir ${CMAKE_BINARY_DIR}/oracle_cnn_work)
set_tests_properties(oracle_cnn PROPERTIES LABELS oracle ENVIRONMENT "${MPITRON_MPI_ENV}"
                     TIMEOUT 300 SKIP_RETURN_CODE 77)
