#!/usr/bin/env bash
# it_tuning_tb.sh - a tuning job whose trials report only through
# TensorBoard: the trial program writes scalars with torch's SummaryWriter
# (old style: simple_value, and new style: a float tensor) into a directory
# under its working directory, and kilnd reads the scalars tagged with
# hyperparameterMetricTag from the event files (src/tune/tfevents.c): every
# trial gets its finalMetric and allMetrics from them, and other tags are
# not read. Needs torch and tensorboard (Debian's /usr/bin/python3 has both).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need torch tensorboard
TPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}

cat >"$T/trial_tb.py" <<'PYEOF'
import sys
from torch.utils.tensorboard import SummaryWriter
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
x, new = float(args["x"]), args["style"] == "new"
w = SummaryWriter(log_dir="tb/run1")
for step in (1, 2, 3):
    w.add_scalar("val_loss", (x - 0.3) ** 2 + 1.0 / step, step, new_style=new)
    w.add_scalar("val_accuracy", 0.5, step)  # another tag: not the metric
w.close()
PYEOF

start_kilnd "$T/data"
cmd="exec '$TPY' '$T/trial_tb.py' \"\$0\" \"\$@\""
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"val_loss","algorithm":"RANDOM_SEARCH","maxTrials":4,"maxParallelTrials":2,"params":[{"parameterName":"x","type":"DOUBLE","minValue":0,"maxValue":1},{"parameterName":"style","type":"CATEGORICAL","categoricalValues":["old","new"]}]}'
api POST /v1/projects/p1/jobs "$(job_json tb1 "$cmd" "$hp")"
check_eq "create" "$STATUS" 200
check "the study succeeds" wait_state tb1 SUCCEEDED 90
api GET /v1/projects/p1/jobs/tb1
out=$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
o = json.load(sys.stdin)["trainingOutput"]
t = o["trials"]
ok = []
for x in t:
    v = float(x["hyperparameters"]["x"])
    fm = x.get("finalMetric", {})
    want = (v - 0.3) ** 2 + 1.0 / 3
    ok.append(fm.get("trainingStep") == "3" and abs(fm.get("objectiveValue", 1e9) - want) < 1e-5
              and [m["trainingStep"] for m in x.get("allMetrics", [])] == ["1", "2", "3"])
vals = [x["finalMetric"]["objectiveValue"] for x in t if "finalMetric" in x]
print(o["completedTrialCount"], len(t), all(ok), vals == sorted(vals))')
check_eq "4 trials, each with its finalMetric from the event files, best first" "$out" "4 4 True True"
check "the trials wrote event files in their directories" \
    bash -c "ls '$T/data/jobs/p1/tb1/'*/tb/run1/events.out.tfevents.* >/dev/null"
finish
