# The service (issue 5): store, scheduler, executor, devices, REST API and
# kilnd, plus the client half of the `kiln` command (jobs, nodes).
# Included from the top-level CMakeLists.txt after the core modules.
pkg_check_modules(SQLITE3 REQUIRED IMPORTED_TARGET sqlite3)
pkg_check_modules(MHD     REQUIRED IMPORTED_TARGET libmicrohttpd)
pkg_check_modules(CURL    REQUIRED IMPORTED_TARGET libcurl)
pkg_check_modules(CRYPTO  REQUIRED IMPORTED_TARGET libcrypto)
# kilnd's HTTPS: libmicrohttpd's GnuTLS, whose certificate callback kilnd
# fills (src/api/api.c) so that SIGHUP can swap the pair
pkg_check_modules(GNUTLS  REQUIRED IMPORTED_TARGET gnutls)

file(GLOB KILN_STORE_SRC   CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/store/*.c)
file(GLOB KILN_DEVICES_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/devices/*.c)
file(GLOB KILN_SCHED_SRC   CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/sched/*.c)
# the executor: src/exec/*.c above a backend table, one folder per backend
# (the supervisor above it, src/exec/supervisor, is kilnd's thread: in kilnd)
file(GLOB KILN_EXEC_SRC    CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/exec/*.c
     ${CMAKE_SOURCE_DIR}/src/exec/local/*.c ${CMAKE_SOURCE_DIR}/src/exec/container/*.c)
file(GLOB KILN_API_SRC     CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/api/*.c)
file(GLOB KILN_DAEMON_SRC  CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/daemon/*.c
     ${CMAKE_SOURCE_DIR}/src/jobfiles/*.c ${CMAKE_SOURCE_DIR}/src/notebooks/*.c
     ${CMAKE_SOURCE_DIR}/src/exec/trials/*.c
     ${CMAKE_SOURCE_DIR}/src/exec/supervisor/*.c ${CMAKE_SOURCE_DIR}/src/exec/slurm/*.c)
file(GLOB KILN_CLIENT_SRC  CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/cli/cli_client.c
     ${CMAKE_SOURCE_DIR}/src/cli/client_out.c)
file(GLOB KILN_OBJECTS_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/objects/*.c)
file(GLOB KILN_QUEUES_SRC  CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/queues/*.c)
file(GLOB KILN_AUTH_SRC    CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/auth/*.c)

# Tokens (hashed), project users and the audit log (kiln/auth.h): kilnd's
# main builds them, the API and the supervisor use them.
# libcrypto: the tokens' SHA-256 and constant-time compare
add_library(kiln_auth STATIC ${KILN_AUTH_SRC})
target_link_libraries(kiln_auth PUBLIC kiln_util PkgConfig::CRYPTO PkgConfig::JANSSON
                      Threads::Threads)

# Kueue's admission (kilnd --queues): its YAML, routing and quota (docs/queues.md).
add_library(kiln_queues STATIC ${KILN_QUEUES_SRC})
target_link_libraries(kiln_queues PUBLIC kiln_spec kiln_util PkgConfig::JANSSON m)

add_library(kiln_store STATIC ${KILN_STORE_SRC})
# libcrypto: the HMAC that signs page tokens (src/store/token.c)
target_link_libraries(kiln_store PUBLIC kiln_spec kiln_util PkgConfig::SQLITE3 PkgConfig::CRYPTO
                      Threads::Threads)

# The staging store behind the Storage subset (gs:// URIs kilnd holds).
add_library(kiln_objects STATIC ${KILN_OBJECTS_SRC})
target_link_libraries(kiln_objects PUBLIC kiln_util PkgConfig::JANSSON PkgConfig::CRYPTO
                      Threads::Threads)

add_library(kiln_devices STATIC ${KILN_DEVICES_SRC})
target_link_libraries(kiln_devices PUBLIC kiln_spec kiln_util PkgConfig::JANSSON ${CMAKE_DL_LIBS}
                      Threads::Threads)

# The tests' stand-in for libnvidia-ml.so.1 (tests/nvml/fake_nvml.c): kilnd
# loads it through KILN_NVML_LIBRARY, so GPU discovery, health and telemetry
# are tested on machines without a GPU (docs/gpu.md).
add_library(kiln_fake_nvml SHARED ${CMAKE_SOURCE_DIR}/tests/nvml/fake_nvml.c)
set_target_properties(kiln_fake_nvml PROPERTIES OUTPUT_NAME kiln-fake-nvml)
# What an NVML library answers to each call kilnd makes (scripts/gpu/kilnd-gpu-check
# runs it against the real driver on a lent GPU machine).
add_executable(kiln-nvml-facts ${CMAKE_SOURCE_DIR}/tests/nvml/nvml_facts.c)
target_link_libraries(kiln-nvml-facts PRIVATE kiln_devices)
# The GPU check before work (kilnd --gpu-check; docs/gpu.md): a GEMM and a
# memory pattern through the CUDA runtime and cuBLAS, dlopen'd.
add_executable(kiln-gpu-check ${CMAKE_SOURCE_DIR}/src/devices/tool/kiln_gpu_check.c)
target_link_libraries(kiln-gpu-check PRIVATE ${CMAKE_DL_LIBS} m)

add_library(kiln_sched STATIC ${KILN_SCHED_SRC})
target_link_libraries(kiln_sched PUBLIC kiln_devices kiln_catalog)

add_library(kiln_exec STATIC ${KILN_EXEC_SRC})
target_link_libraries(kiln_exec PUBLIC kiln_store kiln_spec kiln_util PkgConfig::JANSSON)

# The per-replica monitor (src/exec/monitor): kilnd finds it next to itself.
add_executable(kiln-monitor ${CMAKE_SOURCE_DIR}/src/exec/monitor/kiln-monitor.c
                            ${CMAKE_SOURCE_DIR}/src/exec/monitor/execsrv.c)
target_link_libraries(kiln-monitor PRIVATE kiln_exec)
# A container step's GPUs under Slurm (src/exec/slurm/task): srun runs it.
# an MPIJob launcher's remote-start agent (OMPI_MCA_plm_rsh_agent; docs/job-model.md)
add_executable(kiln-mpi-agent ${CMAKE_SOURCE_DIR}/src/exec/mpi/kiln-mpi-agent.c
                              ${CMAKE_SOURCE_DIR}/src/exec/monitor/execsrv.c)
# static: an MPIJob's launcher container runs this very file (mounted from
# the host), whatever C library its image has; it uses nothing of NSS.
# (ASan cannot link statically: the sanitized build's is dynamic.)
if(NOT KILN_SANITIZE AND NOT KILN_FUZZ)
  target_link_options(kiln-mpi-agent PRIVATE -static)
endif()
add_executable(kiln-slurm-task ${CMAKE_SOURCE_DIR}/src/exec/slurm/task/kiln-slurm-task.c)
target_link_libraries(kiln-slurm-task PRIVATE kiln_exec)

# The dashboard's static files (src/api/web/), embedded into kilnd at build
# time like the catalog: no build step beyond CMake, nothing fetched.
file(GLOB KILN_WEB_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/api/web/*)
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/gen/web_data.c
  COMMAND ${CMAKE_COMMAND} -DOUT=${CMAKE_BINARY_DIR}/gen/web_data.c
          -DDIR=${CMAKE_SOURCE_DIR}/src/api/web -DPATTERNS=*
          -DSYMBOL=kiln__web_files -P ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
  DEPENDS ${KILN_WEB_FILES} ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
  COMMENT "Embedding src/api/web" VERBATIM)

# kilnd: the API (libmicrohttpd) and the daemon (supervisor) are one program.
if(KILN_DAEMON_SRC)
  add_executable(kilnd ${KILN_API_SRC} ${KILN_DAEMON_SRC} ${CMAKE_BINARY_DIR}/gen/web_data.c)
  add_dependencies(kilnd kiln-monitor kiln-mpi-agent kiln-slurm-task kiln_fake_nvml kiln-nvml-facts kiln-gpu-check)
  # libcurl: http(s):// packageUris, fetched when a job starts
  # (src/exec/supervisor/fetch.c; libcrypto gives their SHA-256)
  target_link_libraries(kilnd PRIVATE kiln_auth kiln_queues kiln_objects kiln_exec kiln_sched kiln_store kiln_devices kiln_catalog
                        kiln_spec kiln_util PkgConfig::MHD PkgConfig::GNUTLS PkgConfig::CRYPTO PkgConfig::CURL
                        PkgConfig::JANSSON Threads::Threads)
endif()

# The HTTP client of the `kiln` command (libcurl).
if(KILN_CLIENT_SRC)
  add_library(kiln_client STATIC ${KILN_CLIENT_SRC})
  target_link_libraries(kiln_client PUBLIC kiln_util PkgConfig::CURL PkgConfig::JANSSON)
endif()
if(TARGET kiln AND TARGET kiln_client)
  # kiln_store: `kiln admin backup` copies the store itself (src/cli/admin.c)
  target_link_libraries(kiln PRIVATE kiln_client kiln_store kiln_catalog PkgConfig::CRYPTO)
endif()

# ---- tests: tests/service/test_*.c are unit tests of the modules; the
#      shell tests start a real kilnd on a free loopback port ----
file(GLOB KILN_SVC_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/service/test_*.c)
foreach(src ${KILN_SVC_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(svc_${name} ${src})
  target_include_directories(svc_${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
  target_link_libraries(svc_${name} PRIVATE kiln_auth kiln_queues kiln_objects kiln_exec kiln_sched kiln_store kiln_devices
                        kiln_catalog kiln_spec kiln_util)
  target_compile_definitions(svc_${name} PRIVATE KILN_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  add_test(NAME svc_${name} COMMAND svc_${name})
  set_tests_properties(svc_${name} PROPERTIES LABELS service TIMEOUT 60)
endforeach()
# the monitor's exec service is built into kiln-monitor, not kiln_exec
target_sources(svc_test_execsrv PRIVATE ${CMAKE_SOURCE_DIR}/src/exec/monitor/execsrv.c)
# src/queues' decisions (pure functions over the model): every
# tests/queues/test_*.c is one CTest test
file(GLOB KILN_QUEUES_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/queues/test_*.c)
foreach(src ${KILN_QUEUES_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
  target_link_libraries(${name} PRIVATE kiln_queues)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT 30)
endforeach()
# svc_test_cgroup reads this process's own cgroup (needs the cgroup probe);
# its parts that need no cgroup file system run everywhere as _files
if(TARGET svc_test_cgroup)
  add_test(NAME svc_test_cgroup_files COMMAND svc_test_cgroup files)
  set_tests_properties(svc_test_cgroup_files PROPERTIES LABELS service TIMEOUT 60)
  kiln_test_needs(svc_test_cgroup cgroup)
endif()
# the metrics protocol parser lives in kilnd itself (src/daemon): its test
# compiles that one file in
if(TARGET svc_test_trainmetrics)
  target_sources(svc_test_trainmetrics PRIVATE ${CMAKE_SOURCE_DIR}/src/exec/supervisor/trainmetrics.c)
  target_link_libraries(svc_test_trainmetrics PRIVATE PkgConfig::JANSSON m)
endif()
# a job's files, events and TTL (src/jobfiles) through their handle, no kilnd
if(TARGET svc_test_jobfiles)
  target_sources(svc_test_jobfiles PRIVATE ${CMAKE_SOURCE_DIR}/src/jobfiles/jobdir.c
                 ${CMAKE_SOURCE_DIR}/src/jobfiles/ttl.c)
  target_include_directories(svc_test_jobfiles PRIVATE ${CMAKE_SOURCE_DIR}/src)
endif()
# the trial decisions of both executors (src/exec/trials) likewise
if(TARGET svc_test_trialbook)
  target_sources(svc_test_trialbook PRIVATE ${CMAKE_SOURCE_DIR}/src/exec/trials/trialbook.c)
  target_link_libraries(svc_test_trialbook PRIVATE kiln_tune PkgConfig::JANSSON m)
endif()
# the Slurm placement backend's plumbing (src/exec/slurm/alloc.c), against
# a stand-in for Slurm's commands that the test defines
if(TARGET svc_test_slurm_alloc)
  target_sources(svc_test_slurm_alloc PRIVATE ${CMAKE_SOURCE_DIR}/src/exec/slurm/alloc.c)
endif()
# and the queues side of its accounting (src/exec/slurm/accounts.c) likewise
if(TARGET svc_test_slurm_accounts)
  target_sources(svc_test_slurm_accounts PRIVATE ${CMAKE_SOURCE_DIR}/src/exec/slurm/accounts.c)
endif()
# and its create-time checks (src/exec/slurm/slurm.c's kiln_slurm_check_job)
if(TARGET svc_test_slurm_check_job)
  target_sources(svc_test_slurm_check_job PRIVATE ${CMAKE_SOURCE_DIR}/src/exec/slurm/slurm.c
                                                  ${CMAKE_SOURCE_DIR}/src/exec/slurm/alloc.c)
endif()
file(GLOB KILN_SVC_SH CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/service/it_*.sh)
foreach(sh ${KILN_SVC_SH})
  get_filename_component(name ${sh} NAME_WE)
  add_test(NAME svc_${name} COMMAND bash ${sh} ${CMAKE_BINARY_DIR})
  set_tests_properties(svc_${name} PROPERTIES LABELS "service;integration" TIMEOUT 180
                       SKIP_RETURN_CODE 77)
endforeach()
# TensorFlow (from scripts/bootstrap's venv) is slow to start on a small box:
# the MWMS job waits up to 240 s, so the test gets more than the default 180
# it_storage runs the real gcloud a few times (each start takes seconds)
if(TEST svc_it_storage)
  set_tests_properties(svc_it_storage PROPERTIES TIMEOUT 420)
endif()
if(TEST svc_it_tf_mwms)
  set_tests_properties(svc_it_tf_mwms PROPERTIES TIMEOUT 300)
endif()
# it_kueue runs four kilnd lifetimes (quota, preemption, a kill -9), about 45 s here
if(TEST svc_it_kueue)
  set_tests_properties(svc_it_kueue PROPERTIES TIMEOUT 420)
endif()
# it_vertex runs the real gcloud some thirty times and a dozen container jobs;
# it_vertex_sdk starts the Vertex SDK (slow imports) for each of its steps
if(TEST svc_it_vertex)
  set_tests_properties(svc_it_vertex PROPERTIES TIMEOUT 420)
endif()
# it_notebooks drives the real gcloud through a dozen waits on JupyterLab
# (about 110 s here alone); it_pytorchjob (and it_trainjob) run torchrun in containers (about
# 130 s alone): a loaded 2-core box took both past 180 s. The Slurm tests
# start a two-node cluster each, as it_slurm does
foreach(t svc_it_notebooks svc_it_pytorchjob svc_it_trainjob svc_it_slurm_tuning svc_it_slurm_container
          svc_it_slurm_parity svc_it_slurm_queues svc_it_slurm_elastic svc_it_slurm_steps_queues)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES TIMEOUT 480)
  endif()
endforeach()
if(TEST svc_it_vertex_sdk)
  set_tests_properties(svc_it_vertex_sdk PROPERTIES TIMEOUT 300)
endif()
# client-compat: the tests whose time goes to real Python clients (gcloud,
# Google's Vertex SDK) rather than to kiln's C: `make asan` leaves them out
# (CI's time, docs/service.md "Tests"); the API handlers they call run under
# ASan in it_api, it_vertex and the other curl-driven tests
foreach(t svc_it_gcloud svc_it_vertex_sdk)
  if(TEST ${t})
    set_property(TEST ${t} APPEND PROPERTY LABELS client-compat)
  endif()
endforeach()
if(TEST svc_it_tf_mwms)
  kiln_test_needs(svc_it_tf_mwms tensorflow)
endif()
if(TEST svc_it_tuning_tb)
  kiln_test_needs(svc_it_tuning_tb torch tensorboard)
endif()
if(TEST svc_it_metrics)
  kiln_test_needs(svc_it_metrics promtool)
endif()
if(TEST svc_it_gpu_nvml)
  kiln_test_needs(svc_it_gpu_nvml promtool)
endif()
if(TEST svc_it_trust)
  kiln_test_needs(svc_it_trust openssl)
endif()
if(TEST svc_it_fulldisk)
  kiln_test_needs(svc_it_fulldisk tmpfs)
endif()
if(TEST svc_it_mpijob) # seven MPIJobs, one after the other
  set_tests_properties(svc_it_mpijob PROPERTIES TIMEOUT 400)
endif()
if(TEST svc_it_dashboard)
  kiln_test_needs(svc_it_dashboard chromium selenium)
  set_tests_properties(svc_it_dashboard PROPERTIES TIMEOUT 300)
  # its render-time bounds are the release build's: under ASan + UBSan
  # kilnd answers the queue's ten pages some 2-3x slower, so they scale
  if(KILN_SANITIZE)
    set_property(TEST svc_it_dashboard APPEND PROPERTY ENVIRONMENT "KILN_TIME_SCALE=3")
  endif()
endif()
if(TEST svc_it_container)
  kiln_test_needs(svc_it_container podman)
endif()
if(TEST svc_it_slurm_steps)
  kiln_test_needs(svc_it_slurm_steps slurm mknod)
  # about 2 minutes alone here, the Slurm matrix of the one supervisor
  set_tests_properties(svc_it_slurm_steps PROPERTIES TIMEOUT 600)
endif()
if(TEST svc_it_slurm_steps_queues)
  kiln_test_needs(svc_it_slurm_steps_queues slurm mknod)
endif()
if(TEST svc_it_slurm_steps_spread)
  kiln_test_needs(svc_it_slurm_steps_spread slurm mknod)
endif()
# the test cluster of separate hosts (slurm_cluster.sh --netns)
if(TEST svc_it_slurm_hosts)
  kiln_test_needs(svc_it_slurm_hosts slurm mknod netns)
  set_tests_properties(svc_it_slurm_hosts PROPERTIES TIMEOUT 420)
endif()
if(TEST svc_it_slurm)
  kiln_test_needs(svc_it_slurm slurm mknod)
  set_tests_properties(svc_it_slurm PROPERTIES TIMEOUT 420)
endif()
# each Slurm ending of a replica, made on the test cluster
if(TEST svc_it_slurm_endings)
  kiln_test_needs(svc_it_slurm_endings slurm mknod)
  set_tests_properties(svc_it_slurm_endings PROPERTIES TIMEOUT 420)
endif()
# slurmctld stopped while a job runs, then started again from its state
if(TEST svc_it_slurm_faults)
  kiln_test_needs(svc_it_slurm_faults slurm mknod)
  set_tests_properties(svc_it_slurm_faults PROPERTIES TIMEOUT 420)
endif()
if(TEST svc_it_runas)
  kiln_test_needs(svc_it_runas runas)
endif()
if(TEST svc_it_users_dirs)
  kiln_test_needs(svc_it_users_dirs runas)
endif()
if(TEST svc_it_slurm_queues)
  kiln_test_needs(svc_it_slurm_queues slurm mknod slurmdbd runas)
endif()
foreach(t svc_it_ddp svc_it_pytorchjob svc_it_trainjob)
  if(TEST ${t})
    kiln_test_needs(${t} torch)
  endif()
endforeach()
# gcloud's log streaming polls every 5 s and stops after two empty polls:
# the test streams five times (about 100 s, more under ASan)
if(TEST svc_it_gcloud)
  set_tests_properties(svc_it_gcloud PROPERTIES TIMEOUT 600)
  kiln_test_needs(svc_it_gcloud gcloud podman openssl)
endif()

# The service verbs without src/cli/cli_main.c's dispatcher (used by the tests).
if(TARGET kiln_client)
  add_executable(kiln-svc-cli ${CMAKE_SOURCE_DIR}/tests/service/cli_driver.c
                 ${CMAKE_SOURCE_DIR}/src/cli/cli_jobs.c ${CMAKE_SOURCE_DIR}/src/cli/cli_nodes.c
                 ${CMAKE_SOURCE_DIR}/src/cli/cli_queues.c
                 ${CMAKE_SOURCE_DIR}/src/cli/cli_notebooks.c)
  target_link_libraries(kiln-svc-cli PRIVATE kiln_client kiln_catalog kiln_spec kiln_util)
endif()

# Benchmark helpers of bench/service_scale.sh (not tests): the store's bulk
# fill, group commit and queue timings, and a scheduling pass on a simulated
# cluster, driven through the libraries directly.
add_executable(kiln-store-bench ${CMAKE_SOURCE_DIR}/bench/store_bench.c)
target_link_libraries(kiln-store-bench PRIVATE kiln_store kiln_spec kiln_util)
add_executable(kiln-sched-bench ${CMAKE_SOURCE_DIR}/bench/sched_bench.c)
target_link_libraries(kiln-sched-bench PRIVATE kiln_sched kiln_devices kiln_catalog kiln_spec
                      kiln_util)
