#!/usr/bin/env bash
# bench/shim_instructions.sh (make bench-instructions): the host instructions FlexTensor
# adds to each kernel launch, counted by valgrind's callgrind on the simulated device,
# for each of its per-launch states. Instructions do not depend on the host's load,
# which makes step times on the lent machine swing by more than the effect (issue 5's
# overhead target, bench/overhead.sh); they are a count, not a time.
#
# build/bench/launch_cost-sim launches over 256 weights in rounds; two runs of each
# configuration with different launch counts give, by difference, the instructions of
# the extra launches alone (set-up, discovery's passes and the plan cancel out):
#   none      no shim (none-rep: the same with --repeat, plan's baseline)
#   off       shim preloaded, FT_ENABLED=0: every wrapper a plain forward
#   plan      --repeat, FT_ENABLED=1 with a budget above the weights: the plan streams
#             nothing, and the launches timed come after it (issue 5's overhead case)
#   discovery FT_ENABLED=1, FT_CUPTI=off, launches in an order with no period: every
#             launch is scanned and recorded (issue 3's discovery budget)
# Prints instructions per launch for each and the difference to none.
#
#   bash bench/shim_instructions.sh [LAUNCHES_A=2000] [LAUNCHES_B=6000]
set -uo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "shim_instructions.sh: valgrind is needed" >&2; exit 1; }
make -s build/libflextensor.so build/bench/launch_cost-sim || exit 1
A=${LAUNCHES_A:-2000}
B=${LAUNCHES_B:-6000}
SHIM=$PWD/build/libflextensor.so
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

count() { # config launches: total instructions of the run
    local cfg=$1 n=$2 args=(--launches "$2")
    local -a envs=(LD_LIBRARY_PATH=build/sim)
    case $cfg in
    none) ;;
    none-rep) args+=(--repeat) ;;
    off) envs+=(FT_ENABLED=0 LD_PRELOAD="$SHIM") ;;
    plan) envs+=(FT_ENABLED=1 FT_LOG_LEVEL=warn FT_DISCOVERY_ITERS=2 FT_PROFILING_ITERS=3
                 FT_GPU_MEM_LIMIT=120GiB LD_PRELOAD="$SHIM")
          args+=(--repeat) ;;
    discovery) envs+=(FT_ENABLED=1 FT_LOG_LEVEL=warn FT_CUPTI=off FT_DISCOVERY_ITERS=1000
                      LD_PRELOAD="$SHIM") ;;
    esac
    env "${envs[@]}" valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.$cfg.$n" \
        build/bench/launch_cost-sim "${args[@]}" >"$TMP/out.$cfg.$n" 2>"$TMP/err.$cfg.$n" ||
        { echo "shim_instructions.sh: $cfg with $n launches failed" >&2; tail -5 "$TMP/err.$cfg.$n" >&2; return 1; }
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$TMP/err.$cfg.$n"
}
rounds=$(grep -c 'round++' bench/launch_cost.c) # launch_cost runs its launch count once a round
per_round=$(sed -n 's/.*for (int round = 0; round < \([0-9]*\);.*/\1/p' bench/launch_cost.c)
[ "$rounds" = 1 ] && [ -n "$per_round" ] || { echo "shim_instructions.sh: cannot read launch_cost.c's rounds" >&2; exit 1; }
extra=$(((B - A) * per_round))
declare -A PER
printf '%-10s %16s %16s %12s %10s\n' config "Ir ($A)" "Ir ($B)" "per launch" "vs none"
for cfg in none off discovery none-rep plan; do
    a=$(count "$cfg" "$A") && b=$(count "$cfg" "$B") || exit 1
    PER[$cfg]=$(((b - a) / extra))
    base=${PER[none]}
    [ "$cfg" = plan ] && base=${PER[none-rep]}
    printf '%-10s %16s %16s %12s %+10d\n' "$cfg" "$a" "$b" "${PER[$cfg]}" "$((PER[$cfg] - base))"
done
echo "(instructions per launch: the difference of two runs of launch_cost-sim, $A and $B launches a round,"
echo " $per_round rounds, over $extra launches; the simulated runtime's own work is in every row;"
echo " plan: the launches after a plan that streams nothing, in the order of the weights (--repeat),"
echo " against none-rep; the others against none)"
