# Multi-node Slurm on one machine (label `cluster`): a virtual cluster of 3 nodes, each a network +
# UTS namespace with its own hostname and address on a private bridge and its own slurmd
# (tests/cluster/vcluster.sh), brought up once by the fixture test cluster_up and taken down by
# cluster_down, which runs also after a failure and checks that no process, link, mount or
# shared-memory file is left. Needs root (namespaces, links) and Slurm's daemons; skips (77) saying
# why where they are missing. One test at a time, never beside the single-node `slurm` tests.
# The cluster lives in a short fixed folder: munge's and PMIx's socket paths have a length limit.
set(MPITRON_VCLUSTER_DIR /tmp/mpitron-vcluster)

add_test(NAME cluster_up COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/fixture.sh up
                                 ${MPITRON_VCLUSTER_DIR} 3)
add_test(NAME cluster_down COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/fixture.sh down
                                   ${MPITRON_VCLUSTER_DIR})
set_tests_properties(cluster_up PROPERTIES LABELS cluster TIMEOUT 300 SKIP_RETURN_CODE 77
                     FIXTURES_SETUP vcluster RESOURCE_LOCK slurm_cluster)
set_tests_properties(cluster_down PROPERTIES LABELS cluster TIMEOUT 60 FIXTURES_CLEANUP vcluster
                     RESOURCE_LOCK slurm_cluster)

# mpitron_cluster_test(name script fixtures [extra arguments...])
function(mpitron_cluster_test name script fixtures)
  add_test(NAME cluster_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/${script} $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/cluster/${name} ${MPITRON_VCLUSTER_DIR}
                   ${ARGN})
  # RUN_SERIAL: nothing else beside a job on the virtual nodes (all share the machine's 2 cores,
  # /tmp and /dev/shm; under a loaded -j2 run Open MPI's start-up there was seen to race).
  set_tests_properties(cluster_${name} PROPERTIES LABELS cluster TIMEOUT 180
                       ENVIRONMENT "${MPITRON_MPI_ENV}" SKIP_RETURN_CODE 77
                       FIXTURES_REQUIRED "${fixtures}" RESOURCE_LOCK slurm_cluster RUN_SERIAL TRUE)
endfunction()

mpitron_cluster_test(mpi mpi.sh vcluster)
mpitron_cluster_test(generic_job generic_job.sh "vcluster;equivalence_baseline" ${MPITRON_BASELINE_DIR})
mpitron_cluster_test(rm_job rm_job.sh "vcluster;equivalence_baseline" ${MPITRON_BASELINE_DIR})
mpitron_cluster_test(interactive interactive.sh "vcluster;equivalence_baseline" ${MPITRON_BASELINE_DIR})
mpitron_cluster_test(placement placement.sh "vcluster;equivalence_baseline" ${MPITRON_BASELINE_DIR})
mpitron_cluster_test(presets presets.sh vcluster)
# Last: it kills a node (and brings it back).
mpitron_cluster_test(node_loss node_loss.sh vcluster)
set_tests_properties(cluster_node_loss PROPERTIES
                     DEPENDS "cluster_mpi;cluster_generic_job;cluster_rm_job;cluster_interactive;cluster_placement;cluster_presets")
