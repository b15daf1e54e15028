# libflextensor.so exports exactly what shim/shim.def lists: the interposed CUDA entry
# points and the ft_* control API; and its folders' objects call only downwards.
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
# Dependencies point one way (docs/architecture.md): no object of a folder refers to a
# symbol that a folder above it defines. Read from the objects, so that a call through
# a name some system header declares counts too: inside the library, cupti/'s dlsym
# bound to the shim's exported one (the shim now hands its lookup to ft_cupti_init).
defined() { nm --defined-only "$@" | awk 'NF == 3 && $2 ~ /[A-Z]/ {print $3}' | sort -u; }
upward() { # FOLDER ABOVE...: the symbols FOLDER's objects use that ABOVE's define
    local d=$1 a
    shift
    for a; do defined "$BUILD/$a"/*.o; done | sort -u >"$WORK/above"
    nm --undefined-only "$BUILD/$d"/*.o | awk 'NF == 2 {print $2}' | sort -u | comm -12 - "$WORK/above"
}
for layer in "cupti shim config tools" "config shim cupti tools" "core shim cupti config tools" \
             "tools shim cupti"; do
    # shellcheck disable=SC2086 # the words are the folders
    up=$(upward $layer)
    [ -z "$up" ] || fail "${layer%% *}/ uses symbols that one of ${layer#* } defines: $(echo $up)"
done
pass "no object of cupti/, config/, core/ or tools/ refers to a symbol of a folder above it"
# The control API: every function flextensor.h declares is exported (a new ft_* call
# left out of shim.def would be missing from the library, and both lists above agree).
sed -nE 's/^[a-z_ ]+[ *](ft_[a-z_0-9]+)\(.*/\1/p' shim/flextensor.h | sort -u >"$WORK/api"
[ "$(wc -l <"$WORK/api")" -ge 11 ] || fail "flextensor.h: too few functions found ($(wc -l <"$WORK/api"))"
missing=$(comm -23 "$WORK/api" "$WORK/have")
[ -z "$missing" ] || fail "flextensor.h declares what the library does not export: $(echo $missing)"
pass "every function of flextensor.h exported ($(wc -l <"$WORK/api"))"
