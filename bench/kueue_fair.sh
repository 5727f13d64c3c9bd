#!/bin/bash
# bench/kueue_fair.sh - the issue's fair-sharing figure (docs/queues.md):
# three teams with no quota of their own borrow a pool of 4 simulated GPUs,
# fairSharing weights 1:1:2, each with a backlog of 1-second 1-GPU jobs,
# against a real kilnd --queues; prints the measured GPU-time shares over
# WINDOW seconds (default 600, the issue's 10 minutes). The test suite runs
# the same script with a 20 s window (tests/service/it_kueue_fair.sh).
# usage: bench/kueue_fair.sh BUILD_DIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
WINDOW=${WINDOW:-600} exec bash "$here/../tests/service/it_kueue_fair.sh" "${1:?usage: $0 BUILD_DIR}"
