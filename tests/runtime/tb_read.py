#!/usr/bin/env python3
"""Reads kiln's TensorBoard event files with the real `tensorboard` package.

usage: tb_read.py LOGDIR TAG:STEP:VALUE...

Loads LOGDIR with tensorboard's EventAccumulator (which checks the TFRecord
framing and CRCs and parses the Event protobufs) and checks that every given
scalar is there with that value (float32 precision) and that the file declares
version brain.Event:2. Exit status: 0 ok, 1 mismatch, 77 tensorboard is not
importable (the caller reports the test as skipped).
"""
import math
import os
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator, event_file_loader
except Exception as e:  # ImportError, or a broken install
    print(f"SKIP: tensorboard not importable with {sys.executable}: {e}")
    sys.exit(77)


def main():
    logdir, expected = sys.argv[1], sys.argv[2:]
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={"scalars": 0})
    acc.Reload()
    ok = True
    # The accumulator keeps only the parsed number; check the raw string with
    # tensorboard's own record reader (which also verifies the masked CRCs).
    files = sorted(f for f in os.listdir(logdir) if "tfevents" in f)
    if not files:
        print(f"FAIL: no event file in {logdir}")
        return 1
    for f in files:
        first = next(iter(event_file_loader.EventFileLoader(os.path.join(logdir, f)).Load()), None)
        if first is None or first.file_version != "brain.Event:2" or first.step != 0:
            print(f"FAIL: {f}: first event is not file_version brain.Event:2 at step 0: {first}")
            ok = False
    tags = acc.Tags().get("scalars", [])
    for spec in expected:
        tag, step, value = spec.rsplit(":", 2)
        step, value = int(step), float(value)
        if tag not in tags:
            print(f"FAIL: tag {tag!r} missing; have {tags}")
            ok = False
            continue
        got = [e for e in acc.Scalars(tag) if e.step == step]
        if not got or not math.isclose(got[0].value, value, rel_tol=1e-6, abs_tol=1e-12):
            print(f"FAIL: {tag} at step {step}: want {value}, got {[e.value for e in got]}")
            ok = False
    print(f"tensorboard read {logdir}: tags {sorted(tags)}: {'ok' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
