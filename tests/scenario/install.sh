# make install PREFIX=... DESTDIR=... gives a working tree: ft-run finds the library
# and the simulated device beside it.
. "$(dirname "$0")/lib.sh"
make -s install PREFIX=/opt/ft DESTDIR="$WORK/root" BUILD="$BUILD" >"$WORK/log" 2>&1 || { cat "$WORK/log"; fail "make install failed"; }
for f in bin/ft-run bin/ft-trace lib/libflextensor.so lib/libflextensor-nvtx.so include/flextensor.h lib/flextensor/sim/libcudart.so.13; do
    [ -e "$WORK/root/opt/ft/$f" ] || fail "make install did not install $f"
done
FT_LOG_LEVEL=info ftrun "$WORK/root/opt/ft/bin/ft-run" --sim -- "$MODEL" --layers 1 --dim 16 --iters 1 >"$WORK/out" 2>"$WORK/err" \
    || { cat "$WORK/err"; fail "installed ft-run --sim failed"; }
expect_grep 'flextensor: .*enabled' "$WORK/err" "installed shim loaded"
expect_grep '^checksum' "$WORK/out" "program ran"
pass "installed ft-run --sim runs the model with the installed library"
