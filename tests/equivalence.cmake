# The loss-equivalence matrix of the default mode: every data-parallel layout reproduces the 1x1x1
# baseline's loss trace to 1e-5 relative on every step (ARCHITECTURE.md, "Invariants"). A
# tolerance, because without --bitwise each layout sums in its own order (the arithmetic differs);
# tests/bitwise.cmake holds --bitwise's bits over the same layouts. The baseline is a CTest fixture.
set(MPITRON_BASELINE_DIR ${CMAKE_BINARY_DIR}/e2e/equivalence_baseline)
add_test(NAME equivalence_baseline
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/baseline.sh $<TARGET_FILE:mpitron>
                 ${PROJECT_SOURCE_DIR} ${MPITRON_BASELINE_DIR})
set_tests_properties(equivalence_baseline PROPERTIES LABELS "equivalence;mpi" TIMEOUT 300
                     ENVIRONMENT "${MPITRON_MPI_ENV}" FIXTURES_SETUP equivalence_baseline)

# mpitron_layout_test(name ranks flags...)
function(mpitron_layout_test name ranks)
  add_test(NAME equivalence_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/layout.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/equivalence_${name}
                   ${MPITRON_BASELINE_DIR}/trace.h5 ${ranks} ${ARGN})
  set_tests_properties(equivalence_${name} PROPERTIES LABELS "equivalence;mpi" TIMEOUT 300
                       ENVIRONMENT "${MPITRON_MPI_ENV}" FIXTURES_REQUIRED equivalence_baseline)
endfunction()

mpitron_layout_test(dp2_allreduce 2 --dp 2 --dp-reduce allreduce)
mpitron_layout_test(dp2_ring 2 --dp 2 --dp-reduce ring)
mpitron_layout_test(dp2_gather_scatter 2 --dp 2 --dp-reduce gather-scatter)
mpitron_layout_test(dp4_allreduce 4 --dp 4 --dp-reduce allreduce)
mpitron_layout_test(dp4_ring 4 --dp 4 --dp-reduce ring)
mpitron_layout_test(dp4_gather_scatter 4 --dp 4 --dp-reduce gather-scatter)
mpitron_layout_test(dp3_allreduce 3 --dp 3)
mpitron_layout_test(dp3_ring_zero1 3 --dp 3 --dp-reduce ring --zero 1)
mpitron_layout_test(dp2_bucketed_allreduce 2 --dp 2 --bucket-mb 0.25)
mpitron_layout_test(dp4_bucketed_ring 4 --dp 4 --dp-reduce ring --bucket-mb 0.1)
mpitron_layout_test(dp2_bucketed_gather_scatter 2 --dp 2 --dp-reduce gather-scatter --bucket-mb 0.5)
mpitron_layout_test(dp1_micro2 1 --micro-batches 2)
mpitron_layout_test(dp1_micro4 1 --micro-batches 4)
mpitron_layout_test(dp2_micro2_bucketed 2 --dp 2 --micro-batches 2 --bucket-mb 0.25)
mpitron_layout_test(dp2_micro4 2 --dp 2 --micro-batches 4)
mpitron_layout_test(dp2_zero1 2 --dp 2 --zero 1)
mpitron_layout_test(dp4_zero1 4 --dp 4 --zero 1)
mpitron_layout_test(dp2_zero2 2 --dp 2 --zero 2)
mpitron_layout_test(dp4_zero2 4 --dp 4 --zero 2)
mpitron_layout_test(dp4_zero1_ring 4 --dp 4 --zero 1 --dp-reduce ring)
mpitron_layout_test(dp2_zero2_gather_scatter 2 --dp 2 --zero 2 --dp-reduce gather-scatter)
mpitron_layout_test(dp4_zero2_micro2 4 --dp 4 --zero 2 --micro-batches 2)
mpitron_layout_test(dp4_zero2_ring 4 --dp 4 --zero 2 --dp-reduce ring)
mpitron_layout_test(dp3_zero2_micro2 3 --dp 3 --zero 2 --micro-batches 2)

# Tensor parallelism (Megatron-style), dropout on, against the same baseline.
mpitron_layout_test(tp2 2 --tp 2)
mpitron_layout_test(tp4 4 --tp 4)
mpitron_layout_test(dp2_tp2 4 --dp 2 --tp 2)
mpitron_layout_test(dp2_tp2_zero1 4 --dp 2 --tp 2 --zero 1)
mpitron_layout_test(dp2_tp2_zero2 4 --dp 2 --tp 2 --zero 2)
mpitron_layout_test(dp2_tp2_zero2_ring 4 --dp 2 --tp 2 --zero 2 --dp-reduce ring)
mpitron_layout_test(dp2_tp2_zero1_gather_scatter 4 --dp 2 --tp 2 --zero 1 --dp-reduce gather-scatter)
mpitron_layout_test(dp2_tp2_bucketed 4 --dp 2 --tp 2 --bucket-mb 0.1)
mpitron_layout_test(tp2_micro2 2 --tp 2 --micro-batches 2)
# The chunked LM head (--lm-head-chunk, 50 of 24 x 64 rows at a time): the same losses, less memory.
mpitron_layout_test(tp2_pp2_lm_head_chunk 4 --tp 2 --pp 2 --micro-batches 2 --lm-head-chunk 50)

# Pipeline parallelism, against the same baseline (gpt-tiny: 4 blocks, global batch 24): GPipe and
# 1F1B at pp 2 and pp 4 with 1 (plain model parallelism), 2, 4 and 8 micro-batches; interleaved
# 1F1B with 2 model chunks per rank; unbalanced stages; pp with dp, ZeRO 1, a ring and tp.
foreach(pp 2 4)
  foreach(schedule gpipe 1f1b)
    foreach(m 1 2 4 8)
      mpitron_layout_test(pp${pp}_${schedule}_m${m} ${pp} --pp ${pp} --schedule ${schedule}
                          --micro-batches ${m})
    endforeach()
  endforeach()
endforeach()
mpitron_layout_test(pp2_interleaved_v2_m2 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 2)
mpitron_layout_test(pp2_interleaved_v2_m4 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 4)
mpitron_layout_test(pp2_stage_layers_1_3 2 --pp 2 --stage-layers 1,3 --micro-batches 4)
mpitron_layout_test(pp3_stage_layers_1_1_2 3 --pp 3 --stage-layers 1,1,2 --schedule gpipe --micro-batches 4)
mpitron_layout_test(pp3_1f1b_m3 3 --pp 3 --micro-batches 3)
mpitron_layout_test(dp2_pp2_zero1 4 --dp 2 --pp 2 --zero 1 --micro-batches 2)
mpitron_layout_test(dp2_pp2_ring 4 --dp 2 --pp 2 --dp-reduce ring --micro-batches 4)
mpitron_layout_test(tp2_pp2_gpipe 4 --tp 2 --pp 2 --schedule gpipe --micro-batches 2)
mpitron_layout_test(dp2_tp2_pp2_zero1 8 --dp 2 --tp 2 --pp 2 --schedule 1f1b --zero 1 --micro-batches 2)

# `make check` (label check): the baseline and one layout per parallel dimension, beside the units.
set_property(TEST equivalence_baseline equivalence_dp2_allreduce equivalence_tp2
             equivalence_pp2_1f1b_m4 APPEND PROPERTY LABELS check)

# The resume tests start from a layout test's run (the same flags: one run, not two), a fixture.
set_tests_properties(equivalence_tp2 PROPERTIES FIXTURES_SETUP equivalence_tp2_run)
set_tests_properties(equivalence_pp2_1f1b_m4 PROPERTIES FIXTURES_SETUP equivalence_pp2_1f1b_m4_run)
set_tests_properties(equivalence_dp4_zero1 PROPERTIES FIXTURES_SETUP equivalence_dp4_zero1_run)

add_test(NAME equivalence_resume_across_tp_layouts
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/resume_tp.sh $<TARGET_FILE:mpitron>
                 ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/resume_across_tp_layouts
                 ${MPITRON_BASELINE_DIR}/trace.h5 ${CMAKE_BINARY_DIR}/e2e/equivalence_tp2/run)
set_tests_properties(equivalence_resume_across_tp_layouts PROPERTIES LABELS "equivalence;mpi"
                     TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}"
                     FIXTURES_REQUIRED "equivalence_baseline;equivalence_tp2_run")

add_test(NAME equivalence_resume_across_pp_layouts
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/resume_pp.sh $<TARGET_FILE:mpitron>
                 ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/resume_across_pp_layouts
                 ${MPITRON_BASELINE_DIR}/trace.h5 ${CMAKE_BINARY_DIR}/e2e/equivalence_pp2_1f1b_m4/run)
set_tests_properties(equivalence_resume_across_pp_layouts PROPERTIES LABELS "equivalence;mpi"
                     TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}"
                     FIXTURES_REQUIRED "equivalence_baseline;equivalence_pp2_1f1b_m4_run")

# A vocabulary tp does not divide (257): padded to 258 at tp 2 and 260 at tp 4, never changing
# the loss, against its own 1x1x1 baseline.
set(MPITRON_ODD_VOCAB_BASELINE_DIR ${CMAKE_BINARY_DIR}/e2e/equivalence_odd_vocab_baseline)
add_test(NAME equivalence_odd_vocab_baseline
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/odd_vocab_baseline.sh $<TARGET_FILE:mpitron>
                 ${PROJECT_SOURCE_DIR} ${MPITRON_ODD_VOCAB_BASELINE_DIR})
set_tests_properties(equivalence_odd_vocab_baseline PROPERTIES LABELS "equivalence;mpi" TIMEOUT 300
                     ENVIRONMENT "${MPITRON_MPI_ENV}" FIXTURES_SETUP equivalence_odd_vocab_baseline)
foreach(row "tp2;2;--tp;2" "tp4;4;--tp;4")
  list(POP_FRONT row name ranks)
  add_test(NAME equivalence_odd_vocab_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/layout.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/equivalence_odd_vocab_${name}
                   ${MPITRON_ODD_VOCAB_BASELINE_DIR}/trace.h5 ${ranks} ${row})
  set_tests_properties(equivalence_odd_vocab_${name} PROPERTIES LABELS "equivalence;mpi"
                       TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}"
                       FIXTURES_REQUIRED equivalence_odd_vocab_baseline)
endforeach()

add_test(NAME equivalence_resume_across_layouts
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/resume_layout.sh $<TARGET_FILE:mpitron>
                 ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/resume_across_layouts
                 ${MPITRON_BASELINE_DIR}/trace.h5 ${CMAKE_BINARY_DIR}/e2e/equivalence_dp4_zero1/run)
set_tests_properties(equivalence_resume_across_layouts PROPERTIES LABELS "equivalence;mpi"
                     TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}"
                     FIXTURES_REQUIRED "equivalence_baseline;equivalence_dp4_zero1_run")

add_test(NAME bad_layout
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bad_layout.sh $<TARGET_FILE:mpitron>
                 ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/bad_layout)
# About 26 mpiexec runs of up to 8 ranks: 40 s in the Release build on 2 cores (75 s under
# ASan+UBSan, where make sanitize leaves it out).
set_tests_properties(bad_layout PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${MPITRON_MPI_ENV}")

add_test(NAME zero_memory_falls_with_dp
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/zero_memory.sh $<TARGET_FILE:mpitron>
                 ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/zero_memory)
set_tests_properties(zero_memory_falls_with_dp PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "${MPITRON_MPI_ENV}")

# The MLP family through the same trainer: dp 2 and dp 2 with ZeRO 2 reproduce its 1x1x1 baseline.
set(MPITRON_MLP_BASELINE_DIR ${CMAKE_BINARY_DIR}/e2e/equivalence_mlp_baseline)
add_test(NAME equivalence_mlp_baseline
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/mlp_baseline.sh $<TARGET_FILE:mpitron>
                 ${PROJECT_SOURCE_DIR} ${MPITRON_MLP_BASELINE_DIR})
set_tests_properties(equivalence_mlp_baseline PROPERTIES LABELS "equivalence;mpi" TIMEOUT 300
                     ENVIRONMENT "${MPITRON_MPI_ENV}" FIXTURES_SETUP equivalence_mlp_baseline
                     SKIP_RETURN_CODE 77)
foreach(row "dp2;2;--dp;2" "dp2_zero2;2;--dp;2;--zero;2" "dp2_zero1_ring;2;--dp;2;--zero;1;--dp-reduce;ring")
  list(POP_FRONT row name ranks)
  add_test(NAME equivalence_mlp_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/layout.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/equivalence_mlp_${name}
                   ${MPITRON_MLP_BASELINE_DIR}/trace.h5 ${ranks} ${row})
  set_tests_properties(equivalence_mlp_${name} PROPERTIES LABELS "equivalence;mpi" TIMEOUT 300
                       ENVIRONMENT "${MPITRON_MPI_ENV}" FIXTURES_REQUIRED equivalence_mlp_baseline)
endforeach()

# Activation recomputation (--recompute block) in the layouts that reuse its shared block
# activations most: tensor parallelism (the recomputed forward repeats the TP all-reduces), a
# 1F1B pipeline with micro-batches in flight, ZeRO 2's gradient window.
mpitron_layout_test(recompute 1 --recompute block)
mpitron_layout_test(tp2_recompute 2 --tp 2 --recompute block)
mpitron_layout_test(pp2_1f1b_recompute 2 --pp 2 --micro-batches 4 --recompute block)
mpitron_layout_test(dp2_zero2_recompute 2 --dp 2 --zero 2 --recompute block)
