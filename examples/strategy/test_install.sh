#!/bin/sh
# examples/strategy built the way a user builds it: against an installed kiln
# (cmake --install into a temp prefix) with pkg-config, then run like test.sh;
# examples/custom_model is built the same way.
#   sh test_install.sh BUILD_DIR SOURCE_DIR CC [EXTRA_FLAGS]
# EXTRA_FLAGS: what a sanitized build's libraries need at link time
# (-fsanitize=address,undefined), empty otherwise.
BUILD=$1 SRC=$2 CC=${3:-cc} EXTRA=${4:-}
command -v pkg-config > /dev/null || { echo "skip: no pkg-config"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/p" > "$TMP/install.log" 2>&1 ||
    { cat "$TMP/install.log"; echo "FAIL: cmake --install"; exit 1; }
LIBDIR=$(dirname "$(find "$TMP/p" -name kiln.pc | head -1)")
export PKG_CONFIG_PATH="$LIBDIR${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046
# shellcheck disable=SC2086
"$CC" -O2 -Wall -Wextra -Werror $EXTRA "$SRC/main.c" $(pkg-config --cflags --libs kiln) \
    -o "$TMP/strategy" || { echo "FAIL: building against the installed kiln"; exit 1; }
# examples/custom_model the same way (built only: training it takes minutes)
# shellcheck disable=SC2046
# shellcheck disable=SC2086
"$CC" -O2 -Wall -Wextra -Werror $EXTRA "$SRC/../custom_model/main.c" \
    $(pkg-config --cflags --libs kiln) -o "$TMP/custom_model" ||
    { echo "FAIL: building examples/custom_model against the installed kiln"; exit 1; }
sh "$SRC/test.sh" "$TMP/strategy"
