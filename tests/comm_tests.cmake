# MPI tests of comm/: every Group collective, the hand-written ring and gather-scatter all-reduces, and
# the Grid communicators, at 1 to 4 ranks (oversubscribed on small machines).
add_executable(mpi_group_test ${CMAKE_CURRENT_SOURCE_DIR}/mpi_group_test.cpp)
target_link_libraries(mpi_group_test PRIVATE mpitron_train)
foreach(n 1 2 3 4)
  add_test(NAME mpi_group_test_np${n}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:mpi_group_test> ${MPIEXEC_POSTFLAGS})
  set_tests_properties(mpi_group_test_np${n} PROPERTIES LABELS mpi ENVIRONMENT "${MPITRON_MPI_ENV}"
                                                        TIMEOUT 120)
endforeach()

# Tensor-parallel layers (src/model/tensor_parallel) against the serial layers, tp = 1 to 4 ranks.
add_executable(mpi_tensor_parallel ${CMAKE_CURRENT_SOURCE_DIR}/mpi_tensor_parallel.cpp)
target_link_libraries(mpi_tensor_parallel PRIVATE mpitron_train)
foreach(n 1 2 3 4)
  add_test(NAME mpi_tensor_parallel_np${n}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:mpi_tensor_parallel> ${MPIEXEC_POSTFLAGS})
  set_tests_properties(mpi_tensor_parallel_np${n} PROPERTIES LABELS mpi
                                                             ENVIRONMENT "${MPITRON_MPI_ENV}"
                                                             TIMEOUT 120)
endforeach()

# The tensor-parallel GPT: TP traffic of a step against the formula, replicated tensors bitwise
# equal on every TP rank after training steps, losses equal to the unsharded model's.
add_executable(mpi_tp_gpt ${CMAKE_CURRENT_SOURCE_DIR}/mpi_tp_gpt.cpp)
target_link_libraries(mpi_tp_gpt PRIVATE mpitron_train)
foreach(n 1 2 4)
  add_test(NAME mpi_tp_gpt_np${n}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:mpi_tp_gpt> ${MPIEXEC_POSTFLAGS})
  set_tests_properties(mpi_tp_gpt_np${n} PROPERTIES LABELS mpi ENVIRONMENT "${MPITRON_MPI_ENV}"
                                                    TIMEOUT 120)
endforeach()

# The tensor-parallel encoder (BERT): an encoder block's regions against the per-layer reference
# (q, k and v share one input-gradient all-reduce) and the model's TP traffic of a step against the
# formula, forward and backward apart; losses equal to the unsharded model's.
add_executable(mpi_tp_bert ${CMAKE_CURRENT_SOURCE_DIR}/mpi_tp_bert.cpp)
target_link_libraries(mpi_tp_bert PRIVATE mpitron_train)
foreach(n 1 2 4)
  add_test(NAME mpi_tp_bert_np${n}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:mpi_tp_bert> ${MPIEXEC_POSTFLAGS})
  set_tests_properties(mpi_tp_bert_np${n} PROPERTIES LABELS mpi ENVIRONMENT "${MPITRON_MPI_ENV}"
                                                     TIMEOUT 120)
endforeach()
