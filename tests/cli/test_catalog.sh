#!/usr/bin/env bash
# `kiln catalog list runtime-versions`: the effective runtime-version map
# (docs/catalog.md, "Runtime versions") as a table and as JSON, built in and
# with a site catalog's own images, mirrors and removals; and the errors a
# bad site file or a bad command line gets.
. "$(dirname "$0")/lib.sh"
V=us-docker.pkg.dev/vertex-ai/training

# the built-in map: AI Platform's versions on Vertex AI's prebuilt images
run 0 "$KILN" catalog list runtime-versions
err_empty
head -1 "$OUT" >"$TMP/head"
if grep -qE '^VERSION +PYTHON +CPU_IMAGE +GPU_IMAGE +SOURCE$' "$TMP/head"; then ok; else fail "header: $(cat "$TMP/head")"; fi
out_has "2.11     3.7 (default)  $V/tf-cpu.2-11:latest"
out_has "$V/tf-gpu.2-11.py310:latest"
out_has "1.15     3.7 (default)  $V/tf-cpu.1-15:latest"
out_lacks "site"
n=$(grep -c '(default)' "$OUT")
[ "$n" = 12 ] && ok || fail "12 versions with a default Python, got $n"

run 0 "$KILN" catalog list runtime-versions --format json
"${PYTHON:-python3}" - "$OUT" <<'PY' && ok || fail "the JSON map"
import json, sys
rows = json.load(open(sys.argv[1]))
seed = [r for r in rows if r["runtimeVersion"] == "2.11" and r["pythonVersion"] == "3.7"]
assert len(seed) == 1 and seed[0]["default"] and seed[0]["source"] == "default", seed
assert seed[0]["gpuImage"].endswith("/tf-gpu.2-11:latest") and not seed[0]["mirrored"], seed
assert sorted({r["runtimeVersion"] for r in rows}, key=lambda v: [int(x) for x in v.split(".")]) == \
    ["1.15"] + ["2.%d" % i for i in range(1, 12)]
PY

# a site: its own image for one pair, a mirror for the rest, a pair dropped,
# a version added
cat >"$TMP/site.yaml" <<'EOF2'
runtimeVersions:
  - {version: "2.11", python: "3.7", cpu: localhost/tf:2.11-cpu, gpu: localhost/tf:2.11-gpu}
  - {version: "1.15", python: "3.7", remove: true}
  - {version: "2.12", python: "3.10", image: registry.local/tf:2.12}
runtimeMirrors:
  us-docker.pkg.dev: mirror.local:5000/gcp
EOF2
run 0 "$KILN" catalog list runtime-versions --catalog "$TMP/site.yaml"
out_has "2.11     3.7 (default)   localhost/tf:2.11-cpu"
out_has "localhost/tf:2.11-gpu"
out_has "mirror.local:5000/gcp/vertex-ai/training/tf-gpu.2-11.py310:latest"
out_has "mirror.local:5000/gcp/deeplearning-platform-release/gcr.io/tf2-cpu.2-10.py37:latest"
out_has "2.12     3.10 (default)  registry.local/tf:2.12"
out_lacks "1.15"
out_lacks "us-docker.pkg.dev"
grep -E '^2\.11 +3\.7 ' "$OUT" | grep -qE ' site$' && ok || fail "2.11/3.7 is the site's"
grep -E '^2\.9 +3\.7 ' "$OUT" | grep -qE ' default, mirrored$' && ok || fail "2.9/3.7 is mirrored"

# the same site with kiln validate: the job runs in the site's image
run 0 "$KILN" validate rt_1 --runtime-version 2.11 --python-version 3.7 --module-name t.task \
    --scale-tier custom --master-machine-type n1-standard-8 --worker-count 1 \
    --worker-machine-type n1-standard-8 --worker-accelerator count=1,type=nvidia-tesla-t4 \
    --region us-central1 --catalog "$TMP/site.yaml"
err_has "note: trainingInput.runtimeVersion: 2.11 (Python 3.7): the master runs in localhost/tf:2.11-cpu"
err_has "note: trainingInput.runtimeVersion: 2.11 (Python 3.7): the worker runs in localhost/tf:2.11-gpu"
run 2 "$KILN" validate rt_1 --runtime-version 1.15 --module-name t.task --region us-central1 \
    --catalog "$TMP/site.yaml"
err_has "trainingInput.runtimeVersion: unknown runtime version '1.15': this site maps 2.1, 2.2"

# a bad site file: exit 2, the entry named
printf 'runtimeVersions: ["2.12"]\n' >"$TMP/old.yaml"
run 2 "$KILN" catalog list runtime-versions --catalog "$TMP/old.yaml"
err_has "$TMP/old.yaml:runtimeVersions[0]: '2.12': a runtime version names its images now"
printf 'runtimeVersions:\n  - {version: "2.12", python: "3.7", cpu: a}\n' >"$TMP/half.yaml"
run 2 "$KILN" catalog list runtime-versions --catalog "$TMP/half.yaml"
err_has "$TMP/half.yaml:runtimeVersions[0].gpu: required"

# the command line
run 1 "$KILN" catalog list runtime-version
err_has "cannot list 'runtime-version' (machine-types, accelerators, regions or runtime-versions)"
run 0 "$KILN" catalog list --help
out_has "runtime versions"

# machine types: today's families, CPU ones taking no accelerator, GPU
# machines their own GPUs (docs/catalog.md)
run 0 "$KILN" catalog list machine-types
out_has "n2-highcpu-64         compute-engine  64     64         -"
out_has "c3-highmem-176        compute-engine  176    1408       -"
out_has "e2-standard-2         compute-engine  2      8          -"
out_has "n2d-standard-224      compute-engine  224    896        -"
out_has "c2-standard-60        compute-engine  60     240        -"
out_has "a3-highgpu-8g         compute-engine  208    1872       NVIDIA_H100_80GB:8"
out_has "a4-highgpu-8g         compute-engine  224    3968       NVIDIA_B200:8"
out_has "g2-standard-32        compute-engine  32     128        NVIDIA_L4:1"
out_has "a2-ultragpu-1g        compute-engine  12     170        NVIDIA_A100_80GB:1"
finish
