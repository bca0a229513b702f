# The Slurm path (jobs/, Makefile.slurm) under test. Label `slurm`: each test starts its own
# single-node Slurm cluster on this machine (tests/slurm/cluster.sh: munged, slurmctld, slurmd in a
# temporary folder, torn down after) and skips (77) with the reason where Slurm cannot start.
# One cluster at a time: a resource lock here (other tests run beside it), and a lock file across
# concurrent ctest runs.
# Label `unit`: shellcheck and the other static checks of the scripts.

# mpitron_slurm_test(name script [extra arguments...])
function(mpitron_slurm_test name script)
  add_test(NAME slurm_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/${script} $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/slurm/${name} ${ARGN})
  set_tests_properties(slurm_${name} PROPERTIES LABELS slurm TIMEOUT 300
                       ENVIRONMENT "${MPITRON_MPI_ENV}" SKIP_RETURN_CODE 77
                       RESOURCE_LOCK slurm_cluster)
endfunction()

mpitron_slurm_test(batch_jobs batch.sh)
mpitron_slurm_test(preempt_requeue preempt.sh)
mpitron_slurm_test(interactive interactive.sh)
mpitron_slurm_test(validate_job validate.sh ${CMAKE_BINARY_DIR})
mpitron_slurm_test(submit_checks submit_checks.sh)

add_test(NAME slurm_scripts_lint
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/lint.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(slurm_scripts_lint PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
