#!/bin/sh
# tests/runtime/test_train_resnet50_data.sh KILN_TRAIN - kiln-train resnet50
# on real data (--data_dir): TFRecord files written by TensorFlow's own
# TFRecordWriter and JPEG encoder (make_imagenet_records.py: tf.Example
# records with build_imagenet_data.py's features, 1-based labels, some
# greyscale), read by kiln's reader, trained on the CPU at width 4 and
# 32x32: the loss falls (the classes are colours; one decoding thread, so
# the batches, and the losses, are the same every run: with several, the
# order of the images varies run to run, and so does how fast 60 steps
# learn; test_imagenet runs the threads); the
# start says where the data came from; each step line has the reader's own
# rate beside the step's, and the end its rate over the run; ImageNet's 1-based labels against
# --num_classes=4 stop the run naming the file, the record and the flag to
# use; --synthetic with --data_dir, neither of them, --data_threads
# without --data_dir and an empty or damaged directory are refused.
# Skips (77) without the TensorFlow venv scripts/bootstrap makes.
set -u
KT=${1:?usage: test_train_resnet50_data.sh path/to/kiln-train}
HERE=$(dirname "$0")
. "$HERE/../lib/probe.sh"
kiln_need tensorflow
PY=${KILN_TEST_TF_PYTHON:-${KILN_PYENV:-$HOME/.cache/kiln/tf-venv}/bin/python}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 failc=0
ok() { if eval "$2"; then pass=$((pass + 1)); else failc=$((failc + 1)); echo "FAIL: $1"; fi; }

"$PY" "$HERE/make_imagenet_records.py" "$TMP/data" 3 60 4 > "$TMP/make.log" 2>&1 ||
    { echo "FAIL: making the records: $(tail -3 "$TMP/make.log")"; exit 1; }
STEPS=60
R="--width=4 --image_size=32 --batch_size=16 --num_warmup_batches=0 --device=/cpu:0 --threads=1"
# shellcheck disable=SC2086
"$KT" resnet50 --data_dir="$TMP/data" --num_classes=5 $R --num_batches=$STEPS \
    --data_threads=1 > "$TMP/train.log" 2>&1
rc=$?
ok "trains on the records (exit $rc): $(tail -2 "$TMP/train.log")" '[ $rc = 0 ]'
ok "each step line has the reader's rate beside the step's" \
    '[ "$(grep -c "images/sec: [0-9.]* +/- .*(reader: [0-9.]*)	" "$TMP/train.log")" -eq $STEPS ]'
ok "the reader's rate over the run" \
    'grep -q "^reader images/sec: [0-9.]* ([0-9]* images decoded on 1 thread; [0-9.]*x the step" "$TMP/train.log"'
ok "the start names the data" 'grep -q "^Data: *$TMP/data (3 files, 1 decoding thread)" "$TMP/train.log"'
# the loss: the first 10 steps' mean against the last 10's
awk -F'\t' -v n=$STEPS '$1 ~ /^[0-9]+$/ && /images\/sec/ { split($1, s, " "); st = s[1] + 0; l = $NF + 0;
        if (st <= 10) { a += l; na++ } if (st > n - 10) { b += l; nb++ } }
     END { printf "loss: first 10 steps %.3f, last 10 %.3f\n", a / na, b / nb;
           exit !(na == 10 && nb == 10 && b / nb < 0.7 * a / na) }' "$TMP/train.log"
rc=$?
ok "the loss falls" '[ $rc = 0 ]'
# shellcheck disable=SC2086
"$KT" resnet50 --data_dir="$TMP/data" --num_classes=4 $R --num_batches=3 > "$TMP/labels.log" 2>&1
rc=$?
ok "1-based labels against --num_classes=4 stop the run (exit $rc)" \
    '[ $rc = 1 ] && grep -q "train-0000[0-2]-of-00003: record [0-9]*: label 4 is not in \[0, 4).*--num_classes=1001" "$TMP/labels.log"'
"$KT" resnet50 --synthetic --data_dir="$TMP/data" > "$TMP/both.log" 2>&1
rc=$?
ok "--synthetic and --data_dir refused" '[ $rc = 2 ] && grep -q "give one of them" "$TMP/both.log"'
"$KT" resnet50 --batch_size=2 > "$TMP/none.log" 2>&1
rc=$?
ok "neither refused" '[ $rc = 2 ] && grep -q -- "--synthetic (random images) or --data_dir" "$TMP/none.log"'
"$KT" resnet50 --synthetic --data_threads=4 > "$TMP/thr.log" 2>&1
rc=$?
ok "--data_threads without --data_dir refused" '[ $rc = 2 ] && grep -q -- "--data_threads" "$TMP/thr.log"'
mkdir "$TMP/empty"
# shellcheck disable=SC2086
"$KT" resnet50 --data_dir="$TMP/empty" $R --num_classes=5 --num_batches=1 > "$TMP/empty.log" 2>&1
rc=$?
ok "a directory without train-* files refused" '[ $rc = 1 ] && grep -q "no files named train-\*" "$TMP/empty.log"'
mkdir "$TMP/bad"
head -c 5000 "$TMP/data/train-00000-of-00003" > "$TMP/bad/train-00000-of-00001"
printf 'XXXX' | dd of="$TMP/bad/train-00000-of-00001" bs=1 seek=3000 conv=notrunc 2> /dev/null
# shellcheck disable=SC2086
"$KT" resnet50 --data_dir="$TMP/bad" $R --num_classes=5 --num_batches=20 > "$TMP/bad.log" 2>&1
rc=$?
ok "a damaged file stops the run naming it" \
    '[ $rc = 1 ] && grep -q "bad/train-00000-of-00001: record [0-9]*: .*\(CRC\|truncated\)" "$TMP/bad.log"'
echo "$pass passed, $failc failed"
[ $failc = 0 ]
