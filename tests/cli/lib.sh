# tests/cli/lib.sh - a tiny harness for CLI tests (sourced).
#   run RC CMD...            runs CMD, expects exit status RC; keeps $OUT/$ERR files
#   out_has TEXT / err_has TEXT / out_lacks TEXT / err_empty / out_empty
# Failures are counted with the command and its output; `finish` sets the exit code.
KILN=${1:?usage: $0 PATH/TO/kiln SOURCE_DIR}
SRC=${2:?usage: $0 PATH/TO/kiln SOURCE_DIR}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kiln-cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/stdout
ERR=$TMP/stderr
passed=0
failed=0
last=""

fail() {
    failed=$((failed + 1))
    echo "FAIL: $*" >&2
    echo "  command: $last" >&2
    echo "  --- stdout:" >&2; sed 's/^/  | /' "$OUT" | head -40 >&2
    echo "  --- stderr:" >&2; sed 's/^/  | /' "$ERR" | head -40 >&2
}
ok() { passed=$((passed + 1)); }

run() {
    local want=$1
    shift
    last="$*"
    "$@" >"$OUT" 2>"$ERR" </dev/null
    local rc=$?
    if [ "$rc" -eq "$want" ]; then ok; else fail "exit status $rc, wanted $want"; fi
}

# like run, with stdin from a file
run_in() {
    local want=$1 input=$2
    shift 2
    last="$* < $input"
    "$@" >"$OUT" 2>"$ERR" <"$input"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then ok; else fail "exit status $rc, wanted $want"; fi
}

out_has() { if grep -qF -- "$1" "$OUT"; then ok; else fail "stdout lacks '$1'"; fi; }
err_has() { if grep -qF -- "$1" "$ERR"; then ok; else fail "stderr lacks '$1'"; fi; }
out_lacks() { if grep -qF -- "$1" "$OUT"; then fail "stdout has '$1'"; else ok; fi; }
out_empty() { if [ -s "$OUT" ]; then fail "stdout is not empty"; else ok; fi; }
err_empty() { if [ -s "$ERR" ]; then fail "stderr is not empty"; else ok; fi; }

finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
