#!/usr/bin/env bash
# Every file under examples/ is checked by something, so an example cannot
# rot unseen (as gpu-v100-cluster.yaml did when runtimeVersion became a
# refusal: `make demo` broke and no test said so):
#  - a job file (examples/configs/*.yaml and examples/ai-platform/*.yaml: a
#    Job or an AI Platform config.yaml; examples/tfjob/*.yaml: a Kubeflow
#    job) validates: `kiln validate` exits 0. Unless
#    tests/cli/examples.near-misses lists it as an intentional near miss:
#    then it exits 2 with exactly the stderr listed there;
#  - a program (examples/custom_model, strategy, tf_mwms) is built or run,
#    or a queues file (examples/queues) loaded, by the CTest tests named below, which must exist in this build;
#  - any other file fails this test: a new kind of example needs its check
#    here. So does a near-miss entry whose file is gone.
# A file without a top-level jobId (AI Platform's config.yaml holds only
# trainingInput: gcloud takes the job's name on its command line) is
# validated as `kiln validate example_job --config FILE`.
. "$(dirname "$0")/lib.sh"
BUILD=$(cd "$(dirname "$KILN")/.." && pwd)
cd "$SRC" || exit 1
LIST=tests/cli/examples.near-misses

# the programs, and the tests that build or run them
declare -A program_tests=(
    [examples/custom_model/]="example_strategy_install" # built against the installed kiln there
    [examples/strategy/]="example_strategy example_strategy_install"
    [examples/tf_mwms/]="svc_it_tf_mwms"
    [examples/queues/]="svc_test_queues svc_it_kueue" # Kueue files kilnd --queues loads
)

# the near misses: "== FILE" starts an entry, the lines up to the next one
# are its stderr (comments and blank lines are not: stderr has neither)
mkdir -p "$TMP/want"
awk -v dir="$TMP/want" '
    /^== / { n++; f = dir "/" n; print substr($0, 4) > (dir "/" n ".name"); next }
    /^#/ || /^$/ { next }
    n { print > f }
' "$LIST"
declare -A want=()
for nf in "$TMP"/want/*.name; do
    [ -e "$nf" ] || continue
    name=$(cat "$nf")
    want[$name]=${nf%.name}
    [ -f "$name" ] && ok || fail "$LIST lists '$name', which is not a file"
done

# what is there: tracked and untracked files (not ignored ones), or every
# file when this is no git work tree
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git -C "$SRC" ls-files -co --exclude-standard examples | sort -u)
else
    files=$(find examples -type f | sort)
fi
(cd "$BUILD" && ctest -N) >"$TMP/ctest" 2>&1

n_jobs=0 n_programs=0
for f in $files; do
    [ -f "$f" ] || continue # deleted, not yet committed
    case $f in
    examples/configs/*.yaml | examples/ai-platform/*.yaml) kind=--config ;;
    examples/tfjob/*.yaml) kind=--kubeflow-job ;;
    *)
        covered=""
        for dir in "${!program_tests[@]}"; do
            [ "${f#"$dir"}" != "$f" ] && covered=${program_tests[$dir]}
        done
        if [ -z "$covered" ]; then
            last="(classifying $f)"
            : >"$OUT" >"$ERR"
            fail "$f: no check knows this file; add it to tests/cli/test_examples.sh"
            continue
        fi
        for t in $covered; do
            if grep -qE "Test +#[0-9]+: $t\$" "$TMP/ctest"; then ok; else
                last="ctest -N (in $BUILD)"
                cp "$TMP/ctest" "$OUT"
                fail "$f: the test $t that checks it is not in this build"
            fi
        done
        n_programs=$((n_programs + 1))
        continue
        ;;
    esac
    args=("$kind" "$f")
    [ "$kind" = --config ] && ! grep -q '^jobId:' "$f" && args=(example_job "${args[@]}")
    last="$KILN validate ${args[*]}"
    "$KILN" validate "${args[@]}" >"$OUT" 2>"$ERR" </dev/null
    rc=$?
    n_jobs=$((n_jobs + 1))
    if [ -n "${want[$f]:-}" ]; then
        if [ "$rc" = 2 ] && cmp -s "${want[$f]}" "$ERR"; then ok; else
            fail "$f is a listed near miss: wanted exit 2 and this stderr (got exit $rc):
$(diff "${want[$f]}" "$ERR" | sed 's/^/    /')"
        fi
    elif [ "$rc" = 0 ]; then
        ok
    else
        fail "$f does not validate (exit $rc); fix it, or list it in $LIST with kiln's answer"
    fi
done
echo "$n_jobs job files validated, $n_programs program files covered"
[ "$n_jobs" -ge 10 ] && ok || fail "only $n_jobs job files found under examples/"
finish
