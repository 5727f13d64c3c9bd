#!/bin/sh
# tests/runtime/test_train_resume_cnn.sh KILN_TRAIN - test_train_resume.sh's
# kill-and-resume with the CNN, whose convolutions take oneDNN's direct
# kernels where this CPU has them (ops/conv_dnnl.c): resumed parameters must
# have the reference run's SHA-256 on that path too. Smaller: the CNN step
# costs ~30x the MLP's.
N=6144; EPOCHS=1; KILLS=6
if [ "${KILN_TEST_SANITIZED:-0}" = 1 ]; then N=1536; KILLS=4; fi
RESUME_MODEL=cnn RESUME_N=$N RESUME_EPOCHS=$EPOCHS RESUME_KILLS=$KILLS \
    exec sh "$(dirname "$0")/test_train_resume.sh" "$@"
