#!/bin/bash
# tests/service/it_kfkinds.sh - a JAXJob, an XGBoostJob and a PaddleJob file
# run on a real kilnd: each kind's program (kfkinds/group.py, unmodified for
# every replica) forms its group from nothing but the environment that kind's
# operator sets (rank 0 listens where the variables say, the others connect,
# all sum their rank + 1), and the job SUCCEEDS. The JAXJob's containers
# start in their workingDir, carry requests below their limits, and mount
# emptyDir volumes (a 64Mi tmpfs at /dev/shm, a scratch volume on disk); the
# XGBoostJob is named by metadata.generateName, and its Master's CPU limit
# is above the node's CPUs while its request fits (placed, as Kubernetes
# would); persistentVolumeClaim
# volumes mount the directories of the node config's claim table
# (ReadOnlyMany read-only), and a claim it lacks is refused at submit. JAX, XGBoost and Paddle
# themselves are not installed on this machine (nor installed here): the
# program stands in for their start-up, with the same variables.
# Replicas run in containers (podman) of an image built here from the
# merged-/usr links, with the host's /usr and /etc mounted read-only.
# Skipped (77) where podman cannot run.
PORT_RANGE=${PORT_RANGE:-14000-14999}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need podman
HERE=$(cd "$(dirname "$0")" && pwd)
IMG=localhost/kiln-examples/kfkinds:0.1
host_image "$IMG" || {
    fail "cannot build the image $IMG"
    finish
}
mkdir -p "$T/claims/data" "$T/claims/ckpt"
echo "from the claim" >"$T/claims/data/input.txt"
printf '{"nodes": [{"name": "vm", "address": "127.0.0.1"}], %s, "persistentVolumeClaims": {"mnist-data": {"path": "%s", "accessMode": "ReadOnlyMany"}, "ckpt": {"path": "%s", "accessMode": "ReadWriteOnce"}}}\n' \
    "$(host_runtime_config "$HERE")" "$T/claims/data" "$T/claims/ckpt" >"$T/host.json"
start_kilnd "$T/d" --node-config "$T/host.json"
GROUP=$HERE/kfkinds/group.py

# ---- JAXJob: 3 Workers, worker 0 the coordinator ----
cat >"$T/jax.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: JAXJob
metadata:
  name: jax-group
  creationTimestamp: null
spec:
  runPolicy: {backoffLimit: 0}
  jaxReplicaSpecs:
    Worker:
      replicas: 3
      template:
        spec:
          schedulerName: default-scheduler
          volumes:
          - {name: shm, emptyDir: {medium: Memory, sizeLimit: 64Mi}}
          - {name: scratch, emptyDir: {}}
          containers:
          - name: jax
            image: $IMG
            workingDir: /tmp
            command: [/bin/sh, -c, 'df -k /dev/shm | tail -n 1 | sed "s/^/shm: /"; touch /scratch/mine && ls /scratch | sed "s/^/scratch: /"; exec /usr/bin/python3 $GROUP jax']
            volumeMounts:
            - {name: shm, mountPath: /dev/shm}
            - {name: scratch, mountPath: /scratch}
            ports: [{name: jaxjob-port, containerPort: 6666}]
            resources:
              requests: {cpu: 100m, memory: 64Mi}
              limits: {cpu: '1', memory: 512Mi}
YAML
vols_before=$(podman volume ls -q | wc -l)
"$KILN" jobs submit training --kubeflow-job "$T/jax.yaml" >"$T/jax.out" 2>&1
check_eq "JAXJob submitted" "$?" 0
check "JAXJob SUCCEEDED" wait_state jax_group SUCCEEDED 120
"$KILN" jobs stream-logs jax_group >"$T/jax.logs" 2>&1
for r in 0 1 2; do
    check "JAX process $r summed over 3, started in its workingDir" \
        grep -q "jax rank $r of 3: sum 6 cwd /tmp" "$T/jax.logs"
done
check "emptyDir medium Memory: a tmpfs of sizeLimit (64Mi) at /dev/shm" \
    grep -q "shm: tmpfs *65536 " "$T/jax.logs"
check "emptyDir on disk: each replica's own, empty at start (3 replicas, 3 lone files)" \
    test "$(grep -c '^.*scratch: mine$' "$T/jax.logs")" = 3
check "no emptyDir outlives its replica (podman volumes as before)" \
    test "$(podman volume ls -q | wc -l)" = "$vols_before"
"$KILN" jobs describe jax_group >"$T/jax.describe" 2>&1
check "the requests are kept apart from the limits" grep -q 'cpuRequest: "100m"' "$T/jax.describe"
check "the job says its kind" grep -A1 -q 'kubeflowJob:' "$T/jax.describe"
check "and the kind is JAXJob" grep -q 'kind: JAXJob' "$T/jax.describe"

# ---- XGBoostJob: Master + 2 Workers, named by generateName ----
cat >"$T/xgb.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: XGBoostJob
metadata:
  generateName: xgb-
spec:
  runPolicy: {backoffLimit: 0}
  xgbReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: xgboost
            image: $IMG
            command: [/usr/bin/python3, $GROUP, xgboost]
            # a limit above any node, a request that fits: placed, and capped at the node
            resources: {requests: {cpu: 100m}, limits: {cpu: '512'}}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: xgboost
            image: $IMG
            command: [/usr/bin/python3, $GROUP, xgboost]
YAML
"$KILN" jobs submit training --kubeflow-job "$T/xgb.yaml" >"$T/xgb.out" 2>&1
check_eq "XGBoostJob submitted" "$?" 0
check "the generated name is said" grep -q "note: metadata.generateName: the XGBoostJob is named 'xgb-[bcdfghjklmnpqrstvwxz2456789]\{5\}'" "$T/xgb.out"
XJ=$(sed -n "s/.*is named 'xgb-\([a-z0-9]*\)'.*/xgb_\1/p" "$T/xgb.out")
check "XGBoostJob SUCCEEDED" wait_state "$XJ" SUCCEEDED 120
"$KILN" jobs stream-logs "$XJ" >"$T/xgb.logs" 2>&1
for r in 0 1 2; do
    check "XGBoost rank $r summed over 3" grep -q "xgboost rank $r of 3: sum 6" "$T/xgb.logs"
done

# ---- PaddleJob, collective: 2 Workers, worker 0 the rendezvous ----
cat >"$T/paddle.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: PaddleJob
metadata:
  name: paddle-group
spec:
  runPolicy: {backoffLimit: 0}
  paddleReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: paddle
            image: $IMG
            command: [/usr/bin/python3, $GROUP, paddle]
            ports: [{name: master, containerPort: 36543}]
YAML
"$KILN" jobs submit training --kubeflow-job "$T/paddle.yaml" >"$T/paddle.out" 2>&1
check_eq "PaddleJob submitted" "$?" 0
check "PaddleJob SUCCEEDED" wait_state paddle_group SUCCEEDED 120
"$KILN" jobs stream-logs paddle_group >"$T/paddle.logs" 2>&1
for r in 0 1; do
    check "Paddle rank $r summed over 2" grep -q "paddle rank $r of 2: sum 3" "$T/paddle.logs"
done
# ---- persistentVolumeClaim: through the node config's claim table ----
cat >"$T/pvc.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: JAXJob
metadata:
  name: jax-pvc
spec:
  runPolicy: {backoffLimit: 0}
  jaxReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          volumes:
          - {name: data, persistentVolumeClaim: {claimName: mnist-data}}
          - {name: ckpt, persistentVolumeClaim: {claimName: ckpt}}
          containers:
          - name: jax
            image: $IMG
            command: [/bin/sh, -c, 'cat /data/input.txt; cp /data/input.txt /ckpt/out.txt; if touch /data/w 2>/dev/null; then echo data-writable; else echo data-read-only; fi']
            volumeMounts:
            - {name: data, mountPath: /data}
            - {name: ckpt, mountPath: /ckpt}
YAML
"$KILN" jobs submit training --kubeflow-job "$T/pvc.yaml" >"$T/pvc.out" 2>&1
check_eq "the job with claims submitted" "$?" 0
check "the job with claims SUCCEEDED" wait_state jax_pvc SUCCEEDED 120
"$KILN" jobs stream-logs jax_pvc >"$T/pvc.logs" 2>&1
check "the claim's directory is mounted" grep -q "from the claim" "$T/pvc.logs"
check "a ReadOnlyMany claim is read-only" grep -q "data-read-only" "$T/pvc.logs"
check "a ReadWriteOnce claim is written, into the table's directory" \
    grep -q "from the claim" "$T/claims/ckpt/out.txt"
sed 's/claimName: ckpt/claimName: scratch/; s/name: jax-pvc/name: jax-nopvc/' "$T/pvc.yaml" >"$T/nopvc.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/nopvc.yaml" >"$T/nopvc.out" 2>&1
check_eq "a claim the site does not define is refused (exit 2: invalid job)" "$?" 2
check "naming the claim and the table" grep -q "claim 'scratch' is not defined in the node config's persistentVolumeClaims (this kilnd's: mnist-data, ckpt)" "$T/nopvc.out"
finish
