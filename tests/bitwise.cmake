# --bitwise: every dp, tp and pp layout trains one process's bits (ARCHITECTURE.md, "Invariants"),
# checked with `mpitron compare --bitwise` on the trace and the final checkpoint. Each test trains
# its own 1-rank reference (a few seconds), so none needs a fixture.
# bitwise_layouts_<family>: the family's small model at 3-14 layouts (tests/e2e/bitwise_layouts.sh).
foreach(family gpt gpt_staged bert_mlm bert_testament mlp alexnet alexnet_staged resnet)
  add_test(NAME bitwise_layouts_${family}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bitwise_layouts.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/bitwise_layouts_${family} ${family})
  set_tests_properties(bitwise_layouts_${family} PROPERTIES LABELS "equivalence;mpi" TIMEOUT 300
                       ENVIRONMENT "${MPITRON_MPI_ENV}" SKIP_RETURN_CODE 77)
endforeach()

# bitwise_long_<family>: 200-600 steps at the preset's learning rate, at two layouts, where
# without --bitwise the layouts drift from one process (tests/e2e/bitwise_long.sh). Label
# equivalence like the matrix: `make test` runs them, `make sanitize` (-LE equivalence) does not.
foreach(family mlp alexnet resnet gpt)
  add_test(NAME bitwise_long_${family}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bitwise_long.sh $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/bitwise_long_${family} ${family})
  set_tests_properties(bitwise_long_${family} PROPERTIES LABELS "equivalence;mpi" TIMEOUT 600
                       ENVIRONMENT "${MPITRON_MPI_ENV}" SKIP_RETURN_CODE 77)
endforeach()

# Label mpi only: `make sanitize` runs these two, so the --bitwise reduction (dp 4 / ZeRO 1,
# dp 2 x pp 2, one rank), its checkpoints and its refusals also run under ASan+UBSan.
mpitron_e2e_test(bitwise_resume bitwise_resume.sh mpi 300)
mpitron_e2e_test(bitwise_bad_input bitwise_bad_input.sh mpi 120)
