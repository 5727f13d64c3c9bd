#!/bin/bash
# tests/service/it_version.sh - `kiln --version`, `kilnd --version`, the
# API's Kiln-Version header and GET /version name one release and one commit:
# VERSION's first line and the checkout's git HEAD (cmake/version.cmake).
# Outside git the commit comes from VERSION's second line, which
# `git archive` fills in (.gitattributes export-subst): checked on an
# exported tree and on a tree whose VERSION was never filled in.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

release=$(head -n 1 "$SRC/VERSION")
kiln_v=$("$BUILD/bin/kiln" --version)
kilnd_v=$("$KILND" --version)
check "kilnd --version exits 0" "$KILND" --version
check_eq "kiln --version is kiln + kilnd's words" "${kiln_v#kiln }" "${kilnd_v#kilnd }"
case $kilnd_v in
"kilnd $release (commit "*")") ok ;;
*) fail "kilnd --version '$kilnd_v' does not name release $release" ;;
esac
commit=${kilnd_v#*(commit }
commit=${commit%)}
if git -C "$SRC" rev-parse HEAD >/dev/null 2>&1; then
    head=$(git -C "$SRC" rev-parse HEAD)
    # a build from a modified tree says so (the test runs on the tree built)
    case $commit in
    "$head" | "$head-dirty") ok ;;
    *) fail "kilnd --version commit '$commit', the checkout is at $head" ;;
    esac
else
    echo "note: $SRC is not a git checkout; the commit is '$commit'"
fi

start_kilnd "$T/d"
hdr=$(curl -s -m 10 -D - -o /dev/null "$URL/healthz" | tr -d '\r' | sed -n 's/^[Kk]iln-[Vv]ersion: //p')
check_eq "Kiln-Version header of /healthz" "$hdr" "${kilnd_v#kilnd }"
# an error answer carries it too (every answer goes through one function)
hdr=$(curl -s -m 10 -D - -o /dev/null "$URL/v1/nothing-here" | tr -d '\r' |
    sed -n 's/^[Kk]iln-[Vv]ersion: //p')
check_eq "Kiln-Version header of a 404" "$hdr" "${kilnd_v#kilnd }"
api GET /version
check_eq "GET /version status" "$STATUS" 200
check_eq "GET /version release" "$(jget release <<<"$BODY")" "$release"
check_eq "GET /version commit" "$(jget commit <<<"$BODY")" "$commit"

# the fallback, on cmake/version.cmake itself: an exported tree (git
# archive fills VERSION's second line), then one never filled in
gen() { # gen DIR -> the commit the header names
    cmake -DSRC="$1" -DOUT="$1/v.h" -P "$SRC/cmake/version.cmake" &&
        sed -n 's/^#define KILN_COMMIT "\(.*\)"$/\1/p' "$1/v.h"
}
if git -C "$SRC" rev-parse HEAD >/dev/null 2>&1 && command -v cmake >/dev/null; then
    mkdir -p "$T/export"
    git -C "$SRC" archive HEAD VERSION cmake/version.cmake | tar -x -C "$T/export"
    check_eq "commit of a git-archive tree" "$(gen "$T/export")" "$(git -C "$SRC" rev-parse HEAD)"
    mkdir -p "$T/plain"
    printf '%s\ncommit $Format:%%H$\n' "$release" >"$T/plain/VERSION"
    check_eq "commit of a tree never exported" "$(gen "$T/plain")" unknown
    before=$(stat -c %y "$T/plain/v.h")
    sleep 0.1
    gen "$T/plain" >/dev/null
    check_eq "the header is not rewritten when nothing changed" "$(stat -c %y "$T/plain/v.h")" "$before"
else
    echo "note: no git checkout or cmake here: the VERSION fallback is not checked"
fi
finish
