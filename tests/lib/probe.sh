#!/bin/sh
# tests/lib/probe.sh - what this environment can do, probed once per test run.
#
# A test that needs something a build environment may not give (network
# namespaces, device nodes, podman, a Slurm daemon, a browser, a GPU, a Python
# package) says so with
#
#     . tests/lib/probe.sh
#     kiln_need netns torch        # exits 77 with the reason if one is missing
#
# and a C test with kiln_test_need("tensorboard") from tests/lib/probe.h. The
# skip line always reads
#
#     SKIP [PROBE]: what failed; to run it: what would make it run
#
# which scripts/test-summary collects at the end of `make check`, and which
# .ci/run refuses on the project's own machines (see --strict there).
#
# Results are cached in $KILN_PROBE_DIR (CTest sets it to BUILD/probes and
# fills it once per run through the `probes` fixture); without it each call
# probes afresh. Cached files: DIR/NAME with "ok" or "no" on line 1, the
# reason on line 2 and the remedy on line 3.
#
# As a command:
#     probe.sh all DIR         probe everything into DIR (the fixture), print a table
#     probe.sh check NAME...   exit 0 if all are present, else 77 with the skip line
#     probe.sh list            the probe names and classes
#
# Classes: "privileged" probes need root and a real root file system (not a
# chroot): the CI of this project runs on such machines and must never skip
# them. "hardware" probes (gpu) may legitimately be absent anywhere.
# "software" probes are satisfied by scripts/bootstrap.

KILN_PROBES="netns mknod tmpfs userns podman runas cgroup slurm slurmdbd chromium selenium promtool openssl gpu torch tensorboard tensorflow jupyterlab gcloud openmpi"

kiln_probe_class() {
    case $1 in
    netns | mknod | tmpfs | userns | podman | runas | cgroup | slurm) echo privileged ;;
    gpu) echo hardware ;;
    *) echo software ;;
    esac
}

# ---- the probes: each prints the reason and returns 1 when missing ----

_kp_tmp() { mktemp -d "${TMPDIR:-/tmp}/kiln-probe.XXXXXX"; }

# OpenMPI's compiler wrapper and launcher (the MPIJob tests build and run an
# MPI program with them)
probe_openmpi() {
    command -v mpicc >/dev/null 2>&1 || { echo "mpicc is not installed"; return 1; }
    command -v mpirun >/dev/null 2>&1 || { echo "mpirun is not installed"; return 1; }
    mpirun --version 2>/dev/null | grep -q 'Open MPI' || { echo "mpirun is not Open MPI's"; return 1; }
}
fix_openmpi() { echo "apt-get install openmpi-bin libopenmpi-dev (scripts/bootstrap)"; }

probe_netns() {
    [ "$(id -u)" = 0 ] || { echo "not root (uid $(id -u))"; return 1; }
    command -v ip >/dev/null 2>&1 || { echo "ip (iproute2) is not installed"; return 1; }
    command -v unshare >/dev/null 2>&1 || { echo "unshare (util-linux) is not installed"; return 1; }
    _ns=kiln-probe-$$
    # `ip netns add` can succeed where `ip netns exec` cannot (a chroot, where
    # / is no mount point: "mount --make-rslave /" fails), so do both, and a
    # veth pair, which is what the tests build
    if ! _e=$(ip netns add "$_ns" 2>&1); then
        echo "ip netns add failed: $_e"
        return 1
    fi
    _rc=0
    if ! _e=$(ip netns exec "$_ns" true 2>&1); then
        echo "ip netns exec failed: $_e"
        _rc=1
    elif ! _e=$(ip link add "${_ns#kiln-}a" type veth peer name "${_ns#kiln-}b" 2>&1); then
        echo "cannot create a veth pair: $_e"
        _rc=1
    fi
    ip link del "${_ns#kiln-}a" >/dev/null 2>&1
    ip netns del "$_ns" >/dev/null 2>&1
    return $_rc
}
fix_netns() { echo "run as root outside a chroot (a VM, or a container with --privileged)"; }

probe_mknod() {
    [ "$(id -u)" = 0 ] || { echo "not root (uid $(id -u))"; return 1; }
    _d=$(_kp_tmp) || { echo "cannot make a temporary directory"; return 1; }
    _rc=0
    # a character device like the fake GPUs of the Slurm tests (1,3 is
    # /dev/null): it must be creatable and openable (nodev mounts refuse that)
    if ! _e=$(mknod "$_d/dev" c 1 3 2>&1); then
        echo "mknod failed: $_e"
        _rc=1
    elif ! (: <"$_d/dev") 2>/dev/null; then
        echo "a device node made in ${TMPDIR:-/tmp} cannot be opened (nodev mount?)"
        _rc=1
    fi
    rm -rf "$_d"
    return $_rc
}
# a small tmpfs mounted over a test's data dir (the full-disk test)
probe_tmpfs() {
    [ "$(id -u)" = 0 ] || { echo "not root (uid $(id -u))"; return 1; }
    _d=$(_kp_tmp) || { echo "cannot make a temporary directory"; return 1; }
    if ! _e=$(mount -t tmpfs -o size=1m tmpfs "$_d" 2>&1); then
        rmdir "$_d"
        echo "mount -t tmpfs failed: $_e"
        return 1
    fi
    umount "$_d"
    rmdir "$_d"
}
fix_tmpfs() { echo "run as root with CAP_SYS_ADMIN (mounts allowed)"; }

fix_mknod() { echo "run as root with CAP_MKNOD, with TMPDIR on a file system mounted without nodev"; }

probe_userns() {
    command -v unshare >/dev/null 2>&1 || { echo "unshare (util-linux) is not installed"; return 1; }
    if ! _e=$(unshare --user --map-root-user true 2>&1); then
        echo "unshare --user --map-root-user failed: $_e"
        return 1
    fi
}
fix_userns() { echo "a kernel that allows user namespaces (kernel.unprivileged_userns_clone=1)"; }

probe_podman() {
    command -v podman >/dev/null 2>&1 || { echo "podman is not installed"; return 1; }
    command -v runc >/dev/null 2>&1 || { echo "runc is not installed"; return 1; }
    # runc, as the executor uses it: crun refuses hybrid cgroups on these machines
    if ! _e=$(podman --runtime runc info 2>&1 >/dev/null); then
        echo "podman info failed: $(printf '%s' "$_e" | tail -1)"
        return 1
    fi
    # and a container really runs, as kilnd's executor starts one (an image
    # imported from a directory with busybox: nothing is pulled)
    _bb=$(command -v busybox 2>/dev/null)
    [ -n "$_bb" ] || { echo "busybox (busybox-static) is not installed"; return 1; }
    _d=$(_kp_tmp) || return 1
    mkdir -p "$_d/root/bin" && cp "$_bb" "$_d/root/bin/busybox" && ln -s busybox "$_d/root/bin/sh"
    _img=localhost/kiln-probe:$$
    _rc=0
    if ! _e=$(tar -C "$_d/root" -c . | podman import -q - "$_img" 2>&1); then
        echo "podman import failed: $(printf '%s' "$_e" | tail -1)"
        _rc=1
    else
        # exit codes must pass through: 7 in, 7 out
        _e=$(podman --runtime runc run --rm --init --ulimit nofile=4096:4096 \
            --ulimit nproc=4096:4096 --network host "$_img" sh -c 'exit 7' 2>&1)
        if [ $? -ne 7 ]; then
            echo "podman run of a local image failed: $(printf '%s' "$_e" | tail -1)"
            _rc=1
        fi
    fi
    podman rmi -f "$_img" >/dev/null 2>&1
    rm -rf "$_d"
    return $_rc
}
fix_podman() { echo "apt-get install podman runc catatonit busybox-static, as root outside a chroot"; }

# run-as-user tests: root, and a user they can create and remove (as
# it_runas does: the tools being there is not enough where /etc/passwd
# cannot be written)
probe_runas() {
    [ "$(id -u)" = 0 ] || { echo "not root (uid $(id -u))"; return 1; }
    for _t in useradd userdel; do
        command -v "$_t" >/dev/null 2>&1 || { echo "$_t (passwd) is not installed"; return 1; }
    done
    _u=kilnprobe$$
    if ! _e=$(useradd -r -M -s /usr/sbin/nologin "$_u" 2>&1); then
        echo "useradd failed: $(printf '%s' "$_e" | tail -1)"
        return 1
    fi
    if ! _e=$(userdel "$_u" 2>&1); then
        echo "userdel failed: $(printf '%s' "$_e" | tail -1)"
        return 1
    fi
}
fix_runas() { echo "run as root with passwd (useradd) installed and /etc/passwd writable"; }

# kiln_munge_start DIR: munged with a key of its own (never the machine's)
# and its socket, pid file, log and seed, all in DIR (made, mode 700): the
# Slurm test cluster (tests/service/slurm_cluster.sh) and the slurm probe
# start it the same way. The socket is DIR/munge.socket. Returns 1 with the
# reason on stdout when munged did not come up.
kiln_munge_start() {
    _md=$1
    if ! mkdir -p "$_md" || ! chmod 700 "$_md"; then
        echo "cannot make the munge directory $_md"
        return 1
    fi
    if [ ! -s "$_md/munge.key" ] && ! mungekey -c -k "$_md/munge.key" 2>/dev/null &&
        ! dd if=/dev/urandom of="$_md/munge.key" bs=1024 count=1 status=none; then
        echo "cannot make a munge key in $_md"
        return 1
    fi
    chmod 600 "$_md/munge.key"
    if ! _e=$(munged -f --socket="$_md/munge.socket" --key-file="$_md/munge.key" \
        --pid-file="$_md/munged.pid" --log-file="$_md/munged.log" \
        --seed-file="$_md/munged.seed" 2>&1); then
        echo "munged did not start: $(printf '%s' "$_e" | tail -1)"
        return 1
    fi
    for _i in $(seq 1 50); do
        [ -S "$_md/munge.socket" ] && return 0
        sleep 0.1
    done
    echo "munged made no socket in 5 s: $(tail -1 "$_md/munged.log" 2>/dev/null)"
    return 1
}

# kiln_munge_stop DIR: stops the munged of kiln_munge_start DIR (bounded)
kiln_munge_stop() {
    [ -s "$1/munged.pid" ] || return 0
    _mp=$(cat "$1/munged.pid")
    kill -TERM "$_mp" 2>/dev/null
    for _i in $(seq 1 50); do
        kill -0 "$_mp" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$_mp" 2>/dev/null
    rm -f "$1/munged.pid"
}

# svc_test_cgroup reads this process's own cgroup as the autoscaler reads a
# container's (src/exec/cgroup.c): a cgroup file system mounted where
# /proc/self/mountinfo says, holding this process's cgroup (/proc/self/cgroup)
# with CPU time and memory use readable, cgroup v2 (cpu.stat, memory.current)
# or v1 (cpuacct.usage, memory.usage_in_bytes). A debootstrap'd chroot with
# /sys bind-mounted (not rbind) has none: /sys/fs/cgroup is an empty sysfs
# directory there.
probe_cgroup() {
    [ -r /proc/self/cgroup ] || { echo "no /proc/self/cgroup (is /proc mounted?)"; return 1; }
    [ -r /proc/self/mountinfo ] || { echo "no /proc/self/mountinfo"; return 1; }
    if ! awk '{ for (i = 1; i <= NF && $i != "-"; i++) ; if ($(i + 1) ~ /^cgroup2?$/) f = 1 } END { exit !f }' \
        /proc/self/mountinfo; then
        echo "no cgroup file system is mounted (/proc/self/mountinfo lists no cgroup or cgroup2; $(stat -f -c 'a %T' /sys/fs/cgroup 2>/dev/null || echo no) directory at /sys/fs/cgroup)"
        return 1
    fi
    # kiln__cg FILE CTRL: the directory of this shell's cgroup holding FILE
    # under the mount of v1 controller CTRL ("" for v2), or nothing
    kiln__cg() {
        awk -v want="$2" -v file="$1" '
            FILENAME == "/proc/self/cgroup" {
                split($0, f, ":")
                p = substr($0, length(f[1]) + length(f[2]) + 3)
                if (want == "" && f[1] == "0" && f[2] == "") path = p
                n = split(f[2], c, ",")
                for (i = 1; i <= n; i++) if (want != "" && c[i] == want) path = p
                next
            }
            {
                for (i = 1; i <= NF && $i != "-"; i++) ;
                type = $(i + 1); opts = $(i + 3)
                ok = 0
                if (want == "" && type == "cgroup2") ok = 1
                if (want != "" && type == "cgroup") {
                    n = split(opts, c, ",")
                    for (j = 1; j <= n; j++) if (c[j] == want) ok = 1
                }
                if (ok && mp == "") { mp = $5; root = $4 }
            }
            END {
                if (mp == "" || path == "") exit
                if (root != "/" && index(path, root) == 1) path = substr(path, length(root) + 1)
                print mp path "/" file
            }' /proc/self/cgroup /proc/self/mountinfo
    }
    _cpu=$(kiln__cg cpu.stat "")
    [ -n "$_cpu" ] && [ -r "$_cpu" ] || _cpu=$(kiln__cg cpuacct.usage cpuacct)
    _mem=$(kiln__cg memory.current "")
    [ -n "$_mem" ] && [ -r "$_mem" ] || _mem=$(kiln__cg memory.usage_in_bytes memory)
    [ -n "$_cpu" ] && [ -r "$_cpu" ] || { echo "this process's cgroup has no readable CPU time (cpu.stat or cpuacct.usage) under the mounted cgroup file systems"; return 1; }
    [ -n "$_mem" ] && [ -r "$_mem" ] || { echo "this process's cgroup has no readable memory use (memory.current or memory.usage_in_bytes) under the mounted cgroup file systems"; return 1; }
}
fix_cgroup() { echo "run outside a chroot, or mount the cgroup file systems in it (mount --rbind /sys, not --bind)"; }

# _kp_cluster_sh: the test cluster's script (tests/service/slurm_cluster.sh),
# found from KILN_SOURCE_DIR, from probe.sh run as a command (tests/lib), or
# from the test that sourced this file (tests/service or a sibling folder)
_kp_cluster_sh() {
    for _c in ${KILN_SOURCE_DIR:+"$KILN_SOURCE_DIR/tests/service/slurm_cluster.sh"} \
        "$(dirname "$0")/../service/slurm_cluster.sh" "$(dirname "$0")/slurm_cluster.sh"; do
        [ -f "$_c" ] && { echo "$_c"; return 0; }
    done
    return 1
}

# The Slurm tests need root (slurmd), the daemons, a munge credential that
# round-trips with the test cluster's own munge setup, and then what they
# really use: the test cluster itself starting (slurmctld, both slurmd
# registered idle: slurmd's cgroup plugin, mknod's fake GPUs and munge's
# authentication between the daemons all count) and running a two-node
# step. Packages that are installed but cannot do that (a chroot that
# refuses munged, a key it will not read) must skip the tests with the
# reason, never fail them. The cluster starts on 3 free ports in
# 16900-16992, its own, under a temporary directory, and is stopped.
probe_slurm() {
    for _t in munged munge unmunge slurmctld slurmd sbatch; do
        command -v "$_t" >/dev/null 2>&1 || { echo "$_t is not installed"; return 1; }
    done
    [ "$(id -u)" = 0 ] || { echo "not root: slurmd must run as root (uid $(id -u))"; return 1; }
    _d=$(_kp_tmp) || { echo "cannot make a temporary directory"; return 1; }
    _rc=0
    if ! _e=$(kiln_munge_start "$_d/munge"); then
        echo "$_e"
        _rc=1
    elif ! _e=$({ munge -n -S "$_d/munge/munge.socket" |
        unmunge -S "$_d/munge/munge.socket" >/dev/null; } 2>&1); then
        echo "a munge credential does not round-trip (munge -n | unmunge): $(printf '%s' "$_e" | tail -1)"
        _rc=1
    fi
    kiln_munge_stop "$_d/munge"
    [ $_rc = 0 ] && ! _kp_slurm_cluster "$_d/cluster" && _rc=1
    rm -rf "$_d"
    return $_rc
}

# _kp_slurm_cluster DIR: the test cluster starts under DIR and runs a step
# on both nodes; prints why not and returns 1 otherwise. Stops it either way.
_kp_slurm_cluster() {
    _cs=$(_kp_cluster_sh) || { echo "tests/service/slurm_cluster.sh not found"; return 1; }
    command -v srun >/dev/null 2>&1 || { echo "srun is not installed"; return 1; }
    _port=
    for _b in $(seq 16900 3 16990); do
        [ "$(ss -Htan "( sport >= :$_b and sport <= :$((_b + 2)) )" 2>/dev/null | wc -l)" = 0 ] &&
            { _port=$_b; break; }
    done
    [ -n "$_port" ] || { echo "no 3 free ports in 16900-16992 for the probe's test cluster"; return 1; }
    _crc=0
    if ! _e=$(KILN_SLURM_NODES=2 timeout 120 bash "$_cs" start "$1" "$_port" 2>&1); then
        # its logs go with the probe's directory: slurmd's errors say why
        echo "the Slurm test cluster (tests/service/slurm_cluster.sh) does not start: $(
            { printf '%s\n' "$_e" | grep -v 'start failed; logs in'; grep -h 'error' "$1"/log/slurmd-*.log 2>/dev/null; } |
                tail -3 | tr '\n' ' ' | cut -c1-400)"
        _crc=1
    elif ! _e=$(SLURM_CONF=$1/slurm.conf timeout 60 srun -N2 -n2 -t 1 echo kiln-step-ran 2>&1) ||
        [ "$(printf '%s\n' "$_e" | grep -c '^kiln-step-ran$')" != 2 ]; then
        # srun exits 0 when a task never started ("srun: error: task 0
        # launch failed: Slurmd could not connect IO"): its tasks' output is
        # what says that they ran
        echo "the Slurm test cluster starts but a two-node step does not run (srun -N2 -n2 echo): $(printf '%s' "$_e" | grep -v '^kiln-step-ran$' | tail -1 | cut -c1-300)"
        _crc=1
    fi
    bash "$_cs" stop "$1" >/dev/null 2>&1
    return $_crc
}
fix_slurm() {
    echo "apt-get install slurm-wlm munge, as root, where munged starts, a credential round-trips (munge -n | unmunge) and tests/service/slurm_cluster.sh starts (its logs say why not)"
}

probe_chromium() {
    command -v chromium >/dev/null 2>&1 || { echo "chromium is not installed"; return 1; }
    _d=$(_kp_tmp) || return 1
    _out=$(timeout 60 chromium --headless=new --no-sandbox --disable-gpu \
        --user-data-dir="$_d" --dump-dom 'data:text/html,<p>kiln-probe-ok</p>' 2>"$_d/err")
    _rc=0
    case $_out in
    *kiln-probe-ok*) ;;
    *)
        echo "headless chromium did not render a page: $(tail -1 "$_d/err")"
        _rc=1
        ;;
    esac
    rm -rf "$_d"
    return $_rc
}
fix_chromium() { echo "apt-get install chromium chromium-driver"; }

# the dashboard test drives chromium through Debian's selenium and
# chromedriver: a session is started and loads a page, as the test does
probe_selenium() {
    command -v chromedriver >/dev/null 2>&1 || { echo "chromedriver (chromium-driver) is not installed"; return 1; }
    _kp_py /usr/bin/python3 'import selenium.webdriver' || return 1
    _kp_py /usr/bin/python3 '
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
o = webdriver.ChromeOptions()
o.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
    o.add_argument(a)
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
try:
    d.get("data:text/html,<p id=k>kiln-probe-ok</p>")
    assert d.find_element("id", "k").text == "kiln-probe-ok", "the page did not render"
finally:
    d.quit()'
}
fix_selenium() { echo "apt-get install chromium-driver python3-selenium"; }

probe_promtool() {
    command -v promtool >/dev/null 2>&1 || { echo "promtool (prometheus) is not installed"; return 1; }
    if ! _e=$(printf '# HELP kiln_probe x\n# TYPE kiln_probe gauge\nkiln_probe 1\n' | promtool check metrics 2>&1); then
        echo "promtool check metrics failed: $(printf '%s' "$_e" | tail -1)"
        return 1
    fi
}
fix_promtool() { echo "apt-get install prometheus"; }

# Slurm's accounting for a test cluster of its own (slurm_cluster.sh
# --accounting): slurmdbd, and MariaDB's server and tools to give it a
# database under the cluster's directory
probe_slurmdbd() {
    for _c in slurmdbd sacctmgr mariadbd mariadb-install-db mariadb-admin; do
        command -v "$_c" >/dev/null 2>&1 || { echo "$_c is not installed"; return 1; }
    done
    # mariadbd runs (Slurm's daemons and clients want a configuration even
    # for -V: the test cluster's start is their check, and a broken install
    # fails the test)
    _e=$(mariadbd --no-defaults --version 2>&1) || { echo "mariadbd --version failed: $_e"; return 1; }
}
fix_slurmdbd() { echo "scripts/bootstrap (apt-get install slurmdbd mariadb-server)"; }

# the TLS tests make their certificates with the openssl command
probe_openssl() {
    command -v openssl >/dev/null 2>&1 || { echo "openssl is not installed"; return 1; }
    _d=$(_kp_tmp)
    if ! _e=$(openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$_d/k" -out "$_d/c" -days 1 -subj /CN=probe 2>&1); then
        rm -rf "$_d"
        echo "openssl cannot make a certificate: $(printf '%s' "$_e" | tail -1)"
        return 1
    fi
    rm -rf "$_d"
}
fix_openssl() { echo "apt-get install openssl"; }

probe_gpu() {
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
        return 0
    fi
    echo "no NVIDIA GPU visible (nvidia-smi -L lists none)"
    return 1
}
fix_gpu() { echo "a machine with an NVIDIA GPU and its driver"; }

_kp_py() {
    _py=$1
    shift
    command -v "$_py" >/dev/null 2>&1 || { echo "$_py is not installed"; return 1; }
    if ! _e=$("$_py" -c "$@" 2>&1); then
        echo "$_py: $(printf '%s' "$_e" | tail -1)"
        return 1
    fi
}
# the DDP tests run torch.distributed's gloo backend (an import alone
# succeeds in a torch built without it)
probe_torch() {
    _kp_py "${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}" 'import torch.distributed as d
assert d.is_available() and d.is_gloo_available(), "torch.distributed without gloo"'
}
fix_torch() { echo "apt-get install python3-torch"; }
# the interpreters test_summary_tb tries, in its order (a pyenv python3 on
# PATH may lack what Debian's /usr/bin/python3 has)
probe_tensorboard() {
    for _py in ${KILN_PYTHON:-} python3 /usr/bin/python3; do
        _kp_py "$_py" 'import tensorboard' >/dev/null && return 0
    done
    _kp_py "${KILN_PYTHON:-/usr/bin/python3}" 'import tensorboard'
}
fix_tensorboard() { echo "pip install tensorboard (scripts/bootstrap does)"; }
probe_tensorflow() {
    _kp_py "${KILN_TEST_TF_PYTHON:-${KILN_PYENV:-$HOME/.cache/kiln/tf-venv}/bin/python}" \
        'import tensorflow'
}
fix_tensorflow() { echo "scripts/bootstrap makes the venv with tensorflow-cpu"; }
# notebook instances: JupyterLab and websocket-client in the notebook venv
probe_jupyterlab() {
    _kp_py "${KILN_NOTEBOOK_PYTHON:-${KILN_NOTEBOOK_VENV:-$HOME/.cache/kiln/notebook-venv}/bin/python}" \
        'import jupyterlab, websocket'
}
fix_jupyterlab() { echo "scripts/bootstrap makes the notebook venv with jupyterlab"; }
probe_gcloud() {
    command -v gcloud >/dev/null 2>&1 || { echo "gcloud (google-cloud-cli) is not installed"; return 1; }
    if ! _e=$(gcloud --version 2>&1 >/dev/null); then
        echo "gcloud --version failed: $(printf '%s' "$_e" | tail -1)"
        return 1
    fi
}
fix_gcloud() { echo "install Google's google-cloud-cli package"; }

# ---- the cache and the public functions ----

# kiln_probe NAME: prints nothing; returns 0 if present. Sets KILN_PROBE_WHY
# and KILN_PROBE_FIX otherwise.
kiln_probe() {
    KILN_PROBE_WHY= KILN_PROBE_FIX=
    case " $KILN_PROBES " in
    *" $1 "*) ;;
    *)
        KILN_PROBE_WHY="unknown probe '$1' (known: $KILN_PROBES)"
        return 2
        ;;
    esac
    _f=${KILN_PROBE_DIR:+$KILN_PROBE_DIR/$1}
    if [ -z "$_f" ] || [ ! -f "$_f" ]; then
        _why=$("probe_$1" 2>&1)
        _st=$?
        if [ $_st = 0 ]; then _res=ok; else _res=no; fi
        _fix=$("fix_$1")
        if [ -n "$_f" ] && mkdir -p "$KILN_PROBE_DIR" 2>/dev/null; then
            # atomic: a parallel test reads the whole file or none
            printf '%s\n%s\n%s\n' "$_res" "$(printf '%s' "$_why" | tr '\n' ' ')" "$_fix" \
                >"$_f.$$" && mv -f "$_f.$$" "$_f"
        fi
    else
        _res=$(sed -n 1p "$_f")
        _why=$(sed -n 2p "$_f")
        _fix=$(sed -n 3p "$_f")
    fi
    [ "$_res" = ok ] && return 0
    KILN_PROBE_WHY=$(printf '%s' "$_why" | tr '\n' ' ')
    KILN_PROBE_FIX=$_fix
    return 1
}

# kiln_need NAME...: returns if all are present; else prints the skip line
# of the first missing one and exits 77 (CTest's skip). A name that is no
# probe is a bug in the test: exit 1, never a skip.
kiln_need() {
    for _n in "$@"; do
        kiln_probe "$_n"
        case $? in
        0) ;;
        1)
            echo "SKIP [$_n]: $KILN_PROBE_WHY; to run it: $KILN_PROBE_FIX"
            exit 77
            ;;
        *)
            echo "FAIL: $KILN_PROBE_WHY"
            exit 1
            ;;
        esac
    done
}

_kp_main() {
    case ${1:-} in
    all)
        [ -n "${2:-}" ] || { echo "usage: probe.sh all DIR" >&2; return 2; }
        KILN_PROBE_DIR=$2
        rm -rf "$KILN_PROBE_DIR"
        mkdir -p "$KILN_PROBE_DIR" || return 1
        for _p in $KILN_PROBES; do
            if kiln_probe "$_p"; then
                printf '%-12s %-10s yes\n' "$_p" "$(kiln_probe_class "$_p")"
            else
                printf '%-12s %-10s no: %s\n' "$_p" "$(kiln_probe_class "$_p")" "$KILN_PROBE_WHY"
            fi
        done
        ;;
    check)
        shift
        (kiln_need "$@")
        ;;
    list)
        for _p in $KILN_PROBES; do echo "$_p $(kiln_probe_class "$_p")"; done
        ;;
    *)
        echo "usage: probe.sh all DIR | check NAME... | list" >&2
        return 2
        ;;
    esac
}

# run as a command (not sourced)
case ${0##*/} in
probe.sh) _kp_main "$@" ;;
esac
