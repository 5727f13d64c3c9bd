#!/usr/bin/env bash
# --help and -h everywhere: every command and sub-command of `kiln`, and
# kilnd, prints its usage on stdout and exits 0, with nothing on stderr.
# The commands are not listed here: the walk starts at `kiln --help`'s
# command list and follows each usage's lines ("kiln jobs describe JOB"
# makes "jobs describe" a sub-command of "jobs"), so a new command or
# sub-command is walked without this file knowing it. Help must not need
# kilnd: KILN_ENDPOINT points at a port where nothing listens.
. "$(dirname "$0")/lib.sh"
KILND=$(dirname "$KILN")/kilnd
export KILN_ENDPOINT=http://127.0.0.1:1
unset KILN_TOKEN KILN_CA_FILE

declare -A seen=()
walked=0

# walk WORD...: `kiln WORD... --help` and `-h`, then the sub-commands its
# usage names
walk() {
    local path="$*" h children c
    [ -n "${seen[$path]:-}" ] && return
    seen[$path]=1
    walked=$((walked + 1))
    for h in --help -h; do
        run 0 "$KILN" "$@" "$h"
        out_has "usage: kiln $path"
        err_empty
    done
    [ $# -ge 3 ] && return # no command nests deeper
    # "kiln PATH CHILD ...": CHILD a plain lower-case word (not JOB, not
    # [FLAGS], not machine-types|accelerators|regions)
    children=$(grep -oE "kiln $path [a-z][a-z-]*([[:space:]]|\$)" "$OUT" |
        awk '{ print $NF }' | sort -u)
    for c in $children; do walk "$@" "$c"; done
}

run 0 "$KILN" --help
commands=$(awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }' "$OUT")
[ -n "$commands" ] && ok || fail "kiln --help lists no commands"
run 0 "$KILN" -h
out_has "usage: kiln COMMAND"
for c in $commands; do walk "$c"; done
echo "walked $walked commands and sub-commands: ${!seen[*]}"
# the walk reached the sub-commands (not only the top): a usage whose lines
# lost their "kiln CMD SUB" shape would end it early
for want in "jobs submit" "jobs submit training" "jobs stream-logs" "nodes drain" \
    "catalog list" "tokens new" "local train"; do
    [ -n "${seen[$want]:-}" ] && ok || fail "the walk did not reach 'kiln $want'"
done

# help wins wherever it stands before a bare `--`, also after a flag that
# would be refused, and after a sub-command's own arguments
run 0 "$KILN" jobs submit training j1 --region us-central1 --scale-tier basic --help
out_has "usage: kiln jobs submit training"
run 0 "$KILN" jobs list --filter 'state:FAILED' -h
out_has "usage: kiln jobs list"
run 0 "$KILN" catalog list --bogus --help
out_has "usage: kiln catalog list"
run 0 "$KILN" jobs describe some_job --help
out_has "usage: kiln jobs describe JOB"
# after `--` it is the program's argument: this submit is real, and finds
# no kilnd (exit 1), which shows it was not taken for help
run 1 "$KILN" jobs submit training j1 --region us-central1 --scale-tier basic \
    --module-name m -- --help
err_has "cannot reach kilnd"
# an unknown sub-command is still an error, with the usage on stderr
run 1 "$KILN" jobs frobnicate
err_has "unknown command 'frobnicate'"
err_has "usage: kiln jobs"
run 1 "$KILN" nodes frobnicate
err_has "unknown command 'frobnicate'"

# kilnd: its usage for --help and -h, before anything is made or bound
if [ -x "$KILND" ]; then
    for h in --help -h; do
        run 0 "$KILND" "$h"
        out_has "usage: kilnd"
        out_has "--allow-root-replicas"
        err_empty
    done
    run 0 "$KILND" --data-dir "$TMP/never" --listen 127.0.0.1:0 --help
    out_has "usage: kilnd"
    [ ! -e "$TMP/never" ] && ok || fail "kilnd --help made its data dir"
else
    last="test -x $KILND"
    fail "kilnd is not built next to kiln ($KILND)"
fi
finish
