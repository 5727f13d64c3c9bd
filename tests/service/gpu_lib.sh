# tests/service/gpu_lib.sh - shared by the GPU integration tests that run
# kilnd on the stand-in NVML (tests/nvml/fake_nvml.c: it_gpu_*.sh). Sourced
# after lib.sh. The stand-in reads $T/state at every call; its lines are
# described at the top of fake_nvml.c.
LIB=$BUILD/lib/libkiln-fake-nvml.so
export KILN_FAKE_NVML_STATE=$T/state
# the UUIDs the tests give GPUs 0 and 1
U0=GPU-11111111-0000-4000-8000-000000000000
U1=GPU-22222222-0000-4000-8000-000000000000
NODE=$(hostname) # kilnd's one node: this machine

# add_state < LINES: LINES appended to the state file, renamed over it so
# that no NVML call reads half of it
add_state() { cat "$T/state" - >"$T/state.new" && mv "$T/state.new" "$T/state"; }

# gjob ID COUNT TYPE CMD [POLICY [MASTER_TYPE]]: a Job whose master asks for
# COUNT GPUs of TYPE ("": any model) and runs `sh -c CMD`, with restartPolicy
# POLICY (none given: kiln's default, Never) on MASTER_TYPE (n1-standard-4)
gjob() {
    local cmd
    cmd=$(printf '%s' "$4" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))')
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"%s","masterConfig":{"acceleratorConfig":{"count":"%s"%s}%s,"containerCommand":["sh","-c",%s]}}}' \
        "$1" "${6:-n1-standard-4}" "$2" "${3:+,\"type\":\"$3\"}" "${5:+,\"restartPolicy\":\"$5\"}" "$cmd"
}

# wait_device DEVICE HEALTH [TRIES]: polls this node every 0.1 s, at most
# TRIES times (100), until its device DEVICE's health is HEALTH; N is the
# node's JSON then (its last answer, whatever the health)
wait_device() {
    local _
    for _ in $(seq 1 "${3:-100}"); do
        api GET "/v1/nodes/$NODE"
        [ "$(printf '%s' "$BODY" | jget "devices.$1.health")" = "$2" ] && break
        sleep 0.1
    done
    N=$BODY
}

# j PATH: a field of the node's JSON N
j() { printf '%s' "$N" | jget "$1"; }
