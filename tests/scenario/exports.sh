# libflextensor.so exports exactly what shim/shim.def lists: the interposed CUDA entry
# points and the ft_* control API.
. "$(dirname "$0")/lib.sh"
nm -D --defined-only "$SHIM" | awk '{print $3}' | sed 's/@.*//' | sort -u >"$WORK/have"
gcc -E -P -I. -x c shim/exports.c | tr -d ' ;' | grep -Ev '^(\{|\}|global:|local:\*|)$' | sort -u >"$WORK/want"
diff -u "$WORK/want" "$WORK/have" >"$WORK/diff" || { cat "$WORK/diff" >&2; fail "exported symbols differ from shim.def"; }
pass "$(wc -l <"$WORK/want") exports, exactly shim.def's list"
NVTX_LIB=$BUILD/libflextensor-nvtx.so
[ "$(nm -D --defined-only "$NVTX_LIB" | awk '{print $3}' | sed 's/@.*//' | sort -u)" = InitializeInjectionNvtx2 ] \
    || fail "libflextensor-nvtx.so exports more than InitializeInjectionNvtx2"
pass "libflextensor-nvtx.so exports InitializeInjectionNvtx2 alone"
! nm -D --undefined-only "$SHIM" | grep -Eq ' (cuda|cu)[A-Z]' || fail "the shim links CUDA symbols directly"
! readelf -d "$SHIM" | grep -Eq 'NEEDED.*(cudart|libcuda)' || fail "the shim has a NEEDED entry on CUDA"
pass "no direct link to libcudart or libcuda"
# Thread-locals are read on every launch: with the initial-exec model they are a
# %fs-relative load, not a __tls_get_addr call (shim/shim.mk).
! nm -D --undefined-only "$SHIM" | grep -q '__tls_get_addr' || fail "the shim calls __tls_get_addr (thread-locals not initial-exec)"
pass "thread-locals without __tls_get_addr"
