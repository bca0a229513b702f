# MPI test of io/ checkpoints: collective and gathered writes of hyperslab blocks, read back on a
# different split, at 1 to 4 ranks (oversubscribed on small machines).
add_executable(mpi_checkpoint_roundtrip ${CMAKE_CURRENT_SOURCE_DIR}/mpi_checkpoint_roundtrip.cpp)
target_link_libraries(mpi_checkpoint_roundtrip PRIVATE mpitron_train)
foreach(n 1 2 3 4)
  add_test(NAME mpi_checkpoint_roundtrip_np${n}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:mpi_checkpoint_roundtrip> ${MPIEXEC_POSTFLAGS}
                   ${CMAKE_CURRENT_BINARY_DIR}/mpi_checkpoint_roundtrip_work)
  set_tests_properties(mpi_checkpoint_roundtrip_np${n} PROPERTIES LABELS mpi
                       ENVIRONMENT "${MPITRON_MPI_ENV}" TIMEOUT 120)
endforeach()

# MPI test of checkpoints of TP shards (strided, column-split, replicated, padded vocabulary):
# written at one TP degree (with DP replicas writing nothing), read back at another.
add_executable(mpi_tp_checkpoint ${CMAKE_CURRENT_SOURCE_DIR}/mpi_tp_checkpoint.cpp)
target_link_libraries(mpi_tp_checkpoint PRIVATE mpitron_train)
foreach(n 2 4)
  add_test(NAME mpi_tp_checkpoint_np${n}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:mpi_tp_checkpoint> ${MPIEXEC_POSTFLAGS}
                   ${CMAKE_CURRENT_BINARY_DIR}/mpi_tp_checkpoint_work)
  set_tests_properties(mpi_tp_checkpoint_np${n} PROPERTIES LABELS mpi
                       ENVIRONMENT "${MPITRON_MPI_ENV}" TIMEOUT 120)
endforeach()
