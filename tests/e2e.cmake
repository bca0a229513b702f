# End-to-end tests of the mpitron binary: shell scripts in tests/e2e taking (binary, repo, work dir).
function(mpitron_e2e_test name script labels timeout)
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/e2e/${script} $<TARGET_FILE:mpitron>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/${name})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${timeout}
                       ENVIRONMENT "${MPITRON_MPI_ENV}" SKIP_RETURN_CODE 77)
endfunction()

mpitron_e2e_test(train_determinism determinism.sh unit 300)
mpitron_e2e_test(recompute recompute.sh mpi 300)
mpitron_e2e_test(train_resume resume.sh unit 300)
mpitron_e2e_test(bad_input bad_input.sh unit 300)
mpitron_e2e_test(train_converges converge.sh unit 900)
mpitron_e2e_test(mlp_fashion_mnist mlp.sh unit 300)
mpitron_e2e_test(gpu_devices gpu_devices.sh gpu 60)
mpitron_e2e_test(gpu_train gpu_train.sh gpu 600)
mpitron_e2e_test(staged_device staged_device.sh mpi 600)
mpitron_e2e_test(staged_device_reductions staged_device_reductions.sh mpi 300)
mpitron_e2e_test(loss_scale loss_scale.sh mpi 300)
mpitron_e2e_test(precision precision.sh mpi 600)
mpitron_e2e_test(schedule_cli schedule_cli.sh unit 120)
mpitron_e2e_test(pipeline_memory pipeline_memory.sh mpi 300)
mpitron_e2e_test(pipeline_stage_failure stage_failure.sh mpi 300)
mpitron_e2e_test(everyday_use everyday.sh unit 300)
mpitron_e2e_test(info_summary info.sh unit 120)
mpitron_e2e_test(checkpoint_files checkpoint_files.sh unit 120)
mpitron_e2e_test(hang_watchdog hang_watchdog.sh mpi 300)
mpitron_e2e_test(bleu_vs_nltk bleu.sh unit 120)
mpitron_e2e_test(translation translation.sh mpi 300)
mpitron_e2e_test(knowledge_qa knowledge_qa.sh mpi 300)
mpitron_e2e_test(knowledge_qa_layouts knowledge_qa_layouts.sh mpi 300)
mpitron_e2e_test(parallel_bible parallel_bible.sh unit 120)
mpitron_e2e_test(checkpoint_disk_fills disk_full.sh unit 120)
mpitron_e2e_test(memory_plan memory_plan.sh unit 120)
# 8-bit AdamW: the loss against fp32 AdamW over 200 steps (about 25 s); ZeRO shards, checkpoints
# and resume bit for bit, refusals (about 20 s).
mpitron_e2e_test(adamw8bit_converges adamw8bit_converges.sh unit 300)
mpitron_e2e_test(adamw8bit_layouts adamw8bit_layouts.sh mpi 300)
