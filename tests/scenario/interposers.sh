# Another interposer preloaded with FlexTensor (build/tests/libinterposer_getpid.so,
# tests/interposer_getpid.c), as users preload sanitizer runtimes, profilers or time
# fakers (ft-run puts FlexTensor in front of them): it wraps getpid and cudaMalloc
# through dlsym(RTLD_NEXT, ...), which must find the definition after the interposer,
# not after libflextensor.so, whose exported dlsym the interposer calls. Both preload
# orders, FlexTensor off and on; then the same library dlopened RTLD_LOCAL.
. "$(dirname "$0")/lib.sh"
INTERPOSER=$BUILD/tests/libinterposer_getpid.so
ARGS=(--layers 6 --dim 512 --iters 8 --quiet)
sim "$MODEL" "${ARGS[@]}" >"$WORK/plain" || fail "model without shim failed"

# run_with PRELOAD OUT ERR CMD...: CMD under LD_PRELOAD=PRELOAD on the simulated device.
run_with() {
    local pre=$1 out=$2 err=$3
    shift 3
    # (a sanitizer build's runtime comes first, ahead of both)
    env LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="${SAN_PRELOAD:+$SAN_PRELOAD }$pre" "$@" >"$out" 2>"$err" \
        || { local rc=$?; sed 's/^/    | /' "$err" >&2; fail "$tag: $* exited with $rc"; }
}

for en in 0 1; do
    for order in after before; do
        if [ $order = after ]; then pre="$SHIM $INTERPOSER"; else pre="$INTERPOSER $SHIM"; fi
        tag="FT_ENABLED=$en, interposer $order FlexTensor"
        # A program that calls getpid (bash: at start-up) and ends through exit().
        # Before the fix the interposer got its own getpid back (status 97).
        FT_ENABLED=$en FT_LOG_LEVEL=warn run_with "$pre" "$WORK/pid" "$WORK/pid.err" bash -c 'echo $$'
        expect_grep '^interposer: getpid -> libc\.so\.6, dlerror clear$' "$WORK/pid.err" "$tag: getpid's next"
        expect_grep '^[0-9]+$' "$WORK/pid" "$tag: bash's pid"

        FT_ENABLED=$en FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB \
            run_with "$pre" "$WORK/m.out" "$WORK/m.err" "$MODEL" "${ARGS[@]}"
        cmp -s "$WORK/plain" "$WORK/m.out" || fail "$tag: output differs"
        # cudaMalloc's next: the runtime's after FlexTensor, FlexTensor's before it.
        if [ $order = after ]; then next='libcudart\.so\.13'; else next='libflextensor\.so'; fi
        expect_grep "^interposer: cudaMalloc -> $next, dlerror clear$" "$WORK/m.err" "$tag: cudaMalloc's next"
        expect_grep '^interposer: forwarded [0-9]+ getpid, [1-9][0-9]* cudaMalloc$' "$WORK/m.err" "$tag: calls forwarded"
        # A driver function: the runtime loads libcuda RTLD_LOCAL, outside the global
        # scope, so glibc finds none after the interposer; FlexTensor, active, hands out
        # its wrapper (and keeps the driver's function behind it).
        if [ $order = after ] && [ $en = 0 ]; then
            expect_grep '^interposer: cuMemAlloc_v2 -> NULL \(.*libinterposer_getpid\.so: undefined symbol: cuMemAlloc_v2\), dlerror set$' \
                "$WORK/m.err" "$tag: cuMemAlloc_v2"
        else
            expect_grep '^interposer: cuMemAlloc_v2 -> libflextensor\.so, dlerror clear$' "$WORK/m.err" "$tag: cuMemAlloc_v2"
        fi
        # Names defined nowhere: NULL, and dlerror() says which.
        expect_grep '^interposer: ft_no_such_function -> NULL \(.*libinterposer_getpid\.so: undefined symbol: ft_no_such_function\), dlerror set$' \
            "$WORK/m.err" "$tag: a missing name"
        expect_grep '^interposer: cuFtNoSuchFunction -> NULL \(.*: undefined symbol: cuFtNoSuchFunction\), dlerror set$' \
            "$WORK/m.err" "$tag: a missing cu name"
        if [ $en = 1 ]; then
            expect_grep 'residency: 6 unit\(s\), 6\.0 MiB, moved to pinned host memory' "$WORK/m.err" "$tag: offloaded"
        fi
        pass "$tag: getpid reaches libc, cudaMalloc ${next//\\/}; same output"
    done
done

# The interposer dlopened RTLD_LOCAL (Python's ctypes) while FlexTensor is preloaded:
# glibc searches the objects that library depends on, libc among them, loaded before
# it. cuserid is a "cu" name FlexTensor looks up itself when active.
for en in 0 1; do
    tag="FT_ENABLED=$en, interposer dlopened"
    FT_ENABLED=$en FT_LOG_LEVEL=warn noleaks run_with "$SHIM" "$WORK/d.out" "$WORK/d.err" python3 -c '
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.interposer_next.restype = ctypes.c_char_p
lib.interposer_next.argtypes = [ctypes.c_char_p]
for name in sys.argv[2:]:
    print(lib.interposer_next(name.encode()).decode())' "$INTERPOSER" getpid cuserid cuFtNoSuchFunction
    expect_grep '^getpid -> libc\.so\.6, dlerror clear$' "$WORK/d.out" "$tag: getpid"
    expect_grep '^cuserid -> libc\.so\.6, dlerror clear$' "$WORK/d.out" "$tag: cuserid"
    expect_grep '^cuFtNoSuchFunction -> NULL \(.*: undefined symbol: cuFtNoSuchFunction\), dlerror set$' \
        "$WORK/d.out" "$tag: a missing cu name"
    pass "$tag: its next getpid and cuserid are libc's"
done
