#!/bin/bash
# tests/install/test_install.sh BUILD - `cmake --install` (what `make
# install` runs) into a DESTDIR under another prefix, then the installed
# programs run from there: each names the build's version, the installed
# kilnd finds its helpers beside itself and runs a job, the installed kiln
# and kiln-train answer, kilnd.service names the installed paths; then the
# uninstall script (`make uninstall`) leaves nothing of kiln behind.
# The build's own install_manifest.txt (a real `make install`'s, which
# `make uninstall` reads) is kept aside and put back.
. "$(dirname "$0")/../service/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PREFIX=/opt/kiln-test
ROOT=$T/root
P=$ROOT$PREFIX

manifest=$BUILD/install_manifest.txt
[ -e "$manifest" ] && cp -p "$manifest" "$T/manifest.saved"
restore_manifest() {
    if [ -e "$T/manifest.saved" ]; then cp -p "$T/manifest.saved" "$manifest"; else rm -f "$manifest"; fi
}
AT_EXIT="restore_manifest"

check "cmake --install into DESTDIR" \
    env DESTDIR="$ROOT" cmake --install "$BUILD" --prefix "$PREFIX" >"$T/install.log" 2>&1 ||
    cat "$T/install.log" >&2
cp "$manifest" "$T/manifest"
restore_manifest
check "every file installed under the prefix" bash -c "! grep -v '^$PREFIX/' '$T/manifest'"
check "and under DESTDIR" bash -c "while read -r f; do test -e '$ROOT'\$f || exit 1; done <'$T/manifest'"

for f in bin/kiln bin/kilnd bin/kiln-monitor bin/kiln-slurm-task bin/kiln-train; do
    check "installed $f" test -x "$P/$f"
done
n_yaml=$(ls "$SRC"/data/catalog/*.yaml | wc -l)
check_eq "catalog files in share/kiln/catalog" "$(ls "$P"/share/kiln/catalog/*.yaml | wc -l)" "$n_yaml"
for f in README.md changelog.md service.md install.md openapi.yaml; do
    check "doc $f" test -s "$P/share/doc/kiln/$f"
done
if command -v help2man >/dev/null; then
    for m in man1/kiln.1 man8/kilnd.8 man1/kiln-train.1; do
        check "man page $m" test -s "$P/share/man/$m"
    done
    # made from --help: the page carries the program's own option list
    check "kilnd(8) lists --data-dir" grep -q 'data\\-dir' "$P/share/man/man8/kilnd.8"
    check "kilnd(8) has its FILES section" grep -q '^.SH FILES' "$P/share/man/man8/kilnd.8"
else
    echo "note: no help2man here: the man pages are not made, not checked"
fi
if grep -q '^KILN_CUDA_ENABLED:.*=ON' "$BUILD/CMakeCache.txt" 2>/dev/null ||
    [ -e "$BUILD/bin/libkiln_cuda_backend.so" ]; then
    check "CUDA plugin in lib/kiln" test -e "$P/lib/kiln/libkiln_cuda_backend.so"
else
    check "no CUDA plugin where none was built" test ! -e "$P/lib/kiln"
fi
unit=$P/lib/systemd/system/kilnd.service
check "kilnd.service installed" test -s "$unit"
check "kilnd.service runs the installed kilnd" grep -q "^ExecStart=$PREFIX/bin/kilnd " "$unit"
check "kilnd.service checks its config first" grep -q "^ExecStartPre=$PREFIX/bin/kilnd --check-config \$KILND_OPTS" "$unit"
check "kilnd.service has no @ left" bash -c "! grep -q '@[A-Z_]*@' '$unit'"
# verify: the unit's syntax, its ExecStart executable and its
# Documentation= man page (man, through MANPATH). The installed programs are
# under DESTDIR, not at the prefix, so a copy names them there
if command -v systemd-analyze >/dev/null && command -v man >/dev/null && command -v help2man >/dev/null; then
    sed "s|$PREFIX/|$P/|g" "$unit" >"$T/kilnd.service"
    check "systemd-analyze verify kilnd.service" \
        env MANPATH="$P/share/man" systemd-analyze verify "$T/kilnd.service"
else
    echo "note: no systemd-analyze, man or help2man here: kilnd.service is not verified"
fi

# the installed programs, not the build's
check_eq "installed kiln --version" "$("$P/bin/kiln" --version)" "$("$BUILD/bin/kiln" --version)"
check_eq "installed kilnd --version" "$("$P/bin/kilnd" --version)" "$("$BUILD/bin/kilnd" --version)"
check "installed kiln-train --help" bash -c "'$P/bin/kiln-train' --help >/dev/null 2>&1"
KILND=$P/bin/kilnd
start_kilnd "$T/d"
# it finds kiln-monitor beside itself (src/daemon/main.c) or does not start:
# the job below ran under the installed monitor
check "the kilnd running is the installed one" \
    bash -c "tr '\\0' ' ' </proc/$KPID/cmdline | grep -q '^$P/bin/kilnd'"
api POST /v1/projects/p1/jobs "$(job_json inst_1 'echo installed-ok')"
check_eq "create through the installed kilnd" "$STATUS" 200
check "the job SUCCEEDED" wait_state inst_1 SUCCEEDED 20
out=$(KILN_ENDPOINT=$URL KILN_PROJECT=p1 "$P/bin/kiln" jobs describe inst_1 --format json)
check_eq "installed kiln describes it" "$(jget state <<<"$out")" SUCCEEDED
check "the job's log through the installed kiln" \
    bash -c "KILN_ENDPOINT=$URL KILN_PROJECT=p1 '$P/bin/kiln' jobs stream-logs inst_1 | grep -q installed-ok"
stop_kilnd

check "uninstall" env DESTDIR="$ROOT" cmake -DMANIFEST="$T/manifest" -P "$SRC/cmake/uninstall.cmake" >"$T/uninstall.log"
left=$(find "$ROOT" -type f | sed "s|^$ROOT||")
check_eq "no file left after uninstall" "$left" ""
check "share/kiln and share/doc/kiln removed" \
    bash -c "[ ! -e '$P/share/kiln' ] && [ ! -e '$P/share/doc/kiln' ]"
finish
