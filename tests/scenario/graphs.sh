# CUDA graphs (torch.cuda.graph's pattern: warm-up forwards, one decode forward
# captured on a non-blocking stream in global mode, then replays; model --graph N):
# FlexTensor must never break the capture, whichever phase it is in when the capture
# begins (discovery, profiling, or streaming after the plan), with FT_SPILL on and off,
# at a budget of a third of the weights and with every weight fitting. The simulator
# enforces CUDA's capture rules (a synchronisation, a query, a captured event queried,
# an unsafe call all invalidate the capture, and the model then fails), and the
# replays' checksums must equal those of the run without the shim: after the plan, a
# graph that reads more streamed units than the slots hold is cut into segments and
# streamed between them (FT_GRAPH_CUT); without the cut, the units it reads are
# loaded before each of its launches.
. "$(dirname "$0")/lib.sh"
L=(--layers 12 --dim 1024 --quiet --graph 3)

# run NAME ARGS -- ENV...: lib.sh's compare_run; the capture holds and the graph
# replays three times (REPLAYS times, with --graph REPLAYS among ARGS).
run() {
    compare_run "$@"
    expect_no_grep 'simcuda: stream capture' "$WORK/$1.err" "$1"
    [ "$(grep -c '^graph replay' "$WORK/$1.shim")" = "${REPLAYS:-3}" ] || fail "$1: not ${REPLAYS:-3} replays"
}

# The default FT_DISCOVERY_ITERS and FT_PROFILING_ITERS: after 1 forward discovery is
# under way, after 4 profiling, after 12 the plan streams.
for spill in 1 0; do
    for budget in 16MiB 1GiB; do
        run disc-$spill-$budget --iters 1 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=$budget
        expect_grep 'stream capture [0-9]+ began during discovery' "$WORK/disc-$spill-$budget.err" "disc-$spill-$budget"
        # The replays are observed as the calls captured into the graph: discovery
        # ends at the second one, and the program ends during profiling.
        expect_grep 'verdict: no plan: the program ended during profiling, after 0 of 3 pass' \
            "$WORK/disc-$spill-$budget.err" "disc-$spill-$budget"
        run prof-$spill-$budget --iters 4 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=$budget
        expect_grep 'stream capture [0-9]+ began during profiling' "$WORK/prof-$spill-$budget.err" "prof-$spill-$budget"
        run plan-$spill-$budget --iters 12 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=$budget
    done
    # At a third of the weights the plan streams. The graph reads 11 streamed units,
    # more than the 2 slots: it is cut into a segment per unit (the graph itself was
    # destroyed once instantiated, as torch.cuda.graph does: the cut is made from a
    # clone), and each replay streams the units between the segments, within the
    # slots: no call reads more than they hold, and none misses.
    e=$WORK/plan-$spill-16MiB.err
    expect_grep 'verdict: offloaded' "$e" "plan-$spill-16MiB"
    expect_grep 'CUDA graphs: graph 0x[0-9a-f]+ reads 11 streamed unit\(s\), more than the 2 slot\(s\) hold: cut into 11 segment' \
        "$e" "plan-$spill-16MiB"
    expect_grep 'CUDA graphs: 1 graph\(s\) cut into segments; 3 launch\(es\) of them streamed, 33 segment launch' "$e" "plan-$spill-16MiB"
    expect_no_grep 'read more streamed units than the' "$e" "plan-$spill-16MiB"
    expect_grep 'at most 8.0 MiB of streamed units held at once' "$e" "plan-$spill-16MiB"
done
# A program whose work is graph replays from its first forward on (torch.compile's
# reduce-overhead, a serving engine that captures its decode at start-up): one eager
# forward, then the replays. Discovery and profiling see each replay as the calls
# captured into the graph (profiling launches it in parts cut where its units' times
# begin), and the plan streams the graph cut into segments.
for spill in 1 0; do
    REPLAYS=12 run replays-$spill --iters 1 --graph 12 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=16MiB FT_LOG_LEVEL=debug
    e=$WORK/replays-$spill.err
    expect_grep 'discovery: 1 iteration\(s\) of 36 launches, 12 units' "$e" replays-$spill
    expect_grep 'profiling: graph 0x[0-9a-f]+ launched in [0-9]+ part\(s\)' "$e" replays-$spill
    expect_grep 'profiling: done, 3 pass' "$e" replays-$spill
    expect_grep 'verdict: offloaded: 12 of 12 units stream' "$e" replays-$spill
    expect_grep 'CUDA graphs: 1 graph\(s\) cut into segments' "$e" replays-$spill
    expect_no_grep 'read more streamed units than the' "$e" replays-$spill
done
# A server's pattern: after each replay of the decode graph, an eager forward on the
# graph's stream (its prefill). The graph's segments and the eager launches stream
# through the same slots; every replay and every eager forward equal.
REPLAYS=12 run serve --iters 1 --graph 12 --graph-eager -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
e=$WORK/serve.err
[ "$(grep -c '^graph eager' "$WORK/serve.shim")" = 12 ] || fail "serve: not 12 eager forwards"
expect_grep 'verdict: offloaded: 12 of 12 units stream' "$e" serve
expect_grep 'CUDA graphs: 1 graph\(s\) cut into segments' "$e" serve
expect_no_grep 'read more streamed units than the' "$e" serve
# A word of one kernel in every layer holds garbage in the eager forward and layer 1's
# weight in the captured one (a GEMM's stack-filled parameter word in torch.compile's
# reduce-overhead graphs on the H100): discovery leaves it out (unsure), the cut may
# not (the guard never guesses a pointer stale), so layer 1's unit is read between
# every other layer's: it is kept on the device (resident units stream instead where
# the budget needs it; here it holds), and the graph is cut into one segment per
# streamed unit instead of twice as many.
REPLAYS=12 run stale-graph --iters 1 --graph 12 --stale-graph -- FT_SPILL=0 FT_GPU_MEM_LIMIT=17MiB
e=$WORK/stale-graph.err
expect_grep 'residency: unit.1: CUDA graph 0x[0-9a-f]+ reads it again after other units. segments 10 times: it stays on the device' "$e" stale-graph
expect_grep 'reads 10 streamed unit\(s\), more than the 2 slot\(s\) hold: cut into 10 segment' "$e" stale-graph
expect_grep 'verdict: offloaded: 10 of 12 units stream .*; 1 kept on the device after the plan' "$e" stale-graph
# Changed after its first replay (a node turned off and on): what the graph touches is
# no longer known, its later launches are not observed, and the verdict counts them.
run toggle-disc --iters 1 --graph-toggle -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'verdict: no plan: .*; 2 CUDA graph launch\(es\) before the plan, whose kernels discovery does not observe' \
    "$WORK/toggle-disc.err" toggle-disc
# FT_GRAPH_CUT=false: the graph's 11 units are loaded before each launch, over the
# slots (said once).
run nocut --iters 12 -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB FT_GRAPH_CUT=false
expect_grep 'graph 0x[0-9a-f]+ reads 11 streamed unit\(s\), 44.0 MiB, more than the 2 slot\(s\) hold: they are loaded over' \
    "$WORK/nocut.err" nocut
expect_no_grep 'cut into' "$WORK/nocut.err" nocut
# The program updates the executable graph from a second capture of the forward
# (cudaGraphExecUpdate) after the first replay: the update is taken as an
# instantiation from that graph, cut again, and the replays stay equal.
run update --iters 12 --graph-update -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'CUDA graphs: 2 graph\(s\) cut into segments; 3 launch\(es\) of them streamed' "$WORK/update.err" update
expect_no_grep 'read more streamed units than the' "$WORK/update.err" update
# The program turns a node of the executable graph off and on again after the first
# replay (cudaGraphNodeSetEnabled): what the graph touches is no longer known, so every
# streamed unit is loaded before the later replays (over the slots, said), never a
# segment that might now read another unit.
run toggle --iters 12 --graph-toggle -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'CUDA graphs: the program changed executable graph 0x[0-9a-f]+ after its instantiation: every streamed unit is loaded' \
    "$WORK/toggle.err" toggle
expect_grep 'CUDA graphs: 1 graph\(s\) cut into segments; 1 launch\(es\) of them streamed' "$WORK/toggle.err" toggle
expect_grep 'reads 11 streamed unit\(s\), 44.0 MiB, more than the 2 slot\(s\) hold: they are loaded over' "$WORK/toggle.err" toggle
# The program asks the driver for cuGraphExecUpdate's CUDA 11 form (four arguments):
# handed out unwrapped, so an update by it would go unseen and a segment would run the
# graph as it was; no graph is cut from then on, and the units are loaded before each
# launch instead.
run oldupdate --iters 12 --graph-old-update -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'CUDA graphs: graph 0x[0-9a-f]+ is not cut into segments: the program asked for cuGraphExecUpdate.s CUDA 11 form' \
    "$WORK/oldupdate.err" oldupdate
expect_no_grep 'hold: cut into' "$WORK/oldupdate.err" oldupdate
# A graph built node by node, as XLA builds its command buffers (model --graph-nodes:
# cudaGraphCreate, memset and memcpy nodes, each layer a child graph traced into a
# graph of its own, the last layer's kernels added as kernel nodes of the driver and
# the runtime): each node is recorded as the call it stands for, so a program of its
# replays is discovered and streamed from them, the graph cut at its units as a
# captured one is; and one built after the plan is cut too.
L=(--layers 12 --dim 1024 --quiet)
# Before the plan FT_SPILL holds the workspace in host memory, and a memset node naming
# it is refused (as a captured one is): FT_SPILL stops when the graph is made.
for spill in 0 1; do
    REPLAYS=12 run nodes-$spill --iters 1 --graph-nodes 12 -- FT_SPILL=$spill FT_GPU_MEM_LIMIT=16MiB
    e=$WORK/nodes-$spill.err
    expect_grep 'discovery: 1 iteration\(s\) of 36 launches, 12 units' "$e" nodes-$spill
    expect_grep 'verdict: offloaded: 11 of 12 units stream' "$e" nodes-$spill
    expect_grep 'reads 11 streamed unit\(s\), more than the 2 slot\(s\) hold: cut into 11 segment' "$e" nodes-$spill
    expect_no_grep 'read more streamed units than the' "$e" nodes-$spill
done
expect_grep 'verdict: .*FT_SPILL stopped when a CUDA graph built node by node began before the plan' \
    "$WORK/nodes-1.err" nodes-1
run nodes-plan --iters 12 --graph-nodes 3 -- FT_SPILL=1 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'CUDA graphs: 1 graph\(s\) cut into segments; 3 launch\(es\) of them streamed, 33 segment launch' \
    "$WORK/nodes-plan.err" nodes-plan
# The executable graph changed node by node after its first replay, as XLA updates a
# command buffer when a buffer moves (memcpy and kernel nodes set, every layer's child
# graph traced again and set): the changes are followed, made again on the segments,
# which stream on; the replays stay equal.
run nodes-update --iters 12 --graph-nodes 3 --graph-nodes-update -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'CUDA graphs: 1 graph\(s\) cut into segments; 3 launch\(es\) of them streamed, 33 segment launch' \
    "$WORK/nodes-update.err" nodes-update
expect_no_grep 'every streamed unit is loaded|not cut|could not follow' "$WORK/nodes-update.err" nodes-update
# The gemv kernel node added through CUDA 12.3's generic cuGraphAddNode: recorded as
# through cuGraphAddKernelNode (unrecorded, it would leave the graph unknown: every unit
# loaded at each launch, no cut).
REPLAYS=12 run nodes-generic --iters 1 --graph-nodes 12 --graph-nodes-generic -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'cut into 11 segment' "$WORK/nodes-generic.err" nodes-generic
expect_grep 'cuGraphAddNode_v2 +1$' "$WORK/nodes-generic.err" nodes-generic
# The same node added through cuGraphAddNode's CUDA 12.2 form, which FlexTensor hands
# out unwrapped: the graph has a kernel node it did not see made, so it is unknown and
# every streamed unit is loaded before its launches. Taken as known (its other nodes'
# calls), it was cut, the unseen node ran in every segment, and read its unit unloaded:
# an illegal address.
run nodes-unseen --iters 12 --graph-nodes 3 --graph-nodes-generic-old -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'CUDA graphs: graph 0x[0-9a-f]+: 1 of its 17 node\(s\) were made by calls FlexTensor does not watch' \
    "$WORK/nodes-unseen.err" nodes-unseen
expect_grep 'CUDA graphs: 1 instantiation\(s\) of graphs with a node FlexTensor did not see made' "$WORK/nodes-unseen.err" nodes-unseen
expect_no_grep 'cut into' "$WORK/nodes-unseen.err" nodes-unseen
# The update also points the last layer's gemv kernel node at another layer's weight:
# the segment holding the node loads that unit too (without it, an illegal address).
run nodes-swap --iters 12 --graph-nodes 3 --graph-nodes-update --graph-nodes-swap -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'CUDA graphs: 1 graph\(s\) cut into segments; 3 launch\(es\) of them streamed' "$WORK/nodes-swap.err" nodes-swap
# Updated in discovery (the first replay is a discovery pass): profiling's parts and
# the segments get the changes too (a child graph set is kept and set on each segment
# made after it), so the program is planned and streamed from its replays.
REPLAYS=12 run nodes-update-disc --iters 1 --graph-nodes 12 --graph-nodes-update -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/nodes-update-disc.err" nodes-update-disc
expect_grep 'cut into 11 segment' "$WORK/nodes-update-disc.err" nodes-update-disc
expect_no_grep 'read more streamed units than the' "$WORK/nodes-update-disc.err" nodes-update-disc
# Layer 0's kernels added as kernel nodes, then the other layers captured into the same
# graph (cudaStreamBeginCaptureToGraph): the capture adds to the graph's recorded calls
# rather than standing for the whole graph. Taken for the whole graph, its launches
# loaded only the captured layers' units, and layer 0's kernel read its streamed unit
# unloaded: an illegal address.
for it in 1 12; do
    REPLAYS=3 run nodes-into-$it --iters $it --graph-nodes 3 --graph-nodes-into -- FT_SPILL=0 FT_GPU_MEM_LIMIT=16MiB
done
expect_grep 'verdict: offloaded: 11 of 12 units stream' "$WORK/nodes-into-12.err" nodes-into-12
expect_grep 'reads 11 streamed unit\(s\), more than the 2 slot\(s\) hold: cut into 11 segment' "$WORK/nodes-into-12.err" nodes-into-12
# Stood down (here at FT_OBSERVE_MAX_LAUNCHES, before the graph is built): graphs are no
# longer recorded, and their node calls and changes pass through (on the H200, XLA
# changed some 30 kernel nodes before each launch; followed after standing down, its
# decode ran 12-30% slower).
run nodes-quiet --iters 12 --graph-nodes 3 --graph-nodes-update -- FT_OBSERVE_MAX_LAUNCHES=10 FT_DISCOVERY_ITERS=100
expect_grep 'verdict: stood down: discovery did not find' "$WORK/nodes-quiet.err" nodes-quiet
expect_no_grep 'built node by node' "$WORK/nodes-quiet.err" nodes-quiet
L=(--layers 12 --dim 1024 --quiet --graph 3)
# Before the plan, FT_SPILL holds allocations in host memory, the captured forward's
# workspace among them (the model allocates it before its forwards and clears it first
# in the capture, as cuBLAS does): a captured memset of it cannot become a node (the
# simulator, like the H200, fails the call). FT_SPILL brings everything back before the
# capture begins and stops; the verdict says so.
for c in disc prof; do
    expect_grep 'FT_SPILL: a stream capture begins .* brought back to the device, over the budget' \
        "$WORK/$c-1-16MiB.err" "$c-1-16MiB"
    expect_grep 'verdict: .*FT_SPILL stopped when a stream capture began before the plan' "$WORK/$c-1-16MiB.err" "$c-1-16MiB"
done
pass "CUDA graph capture during discovery, profiling and streaming; a program of graph replays from its first forward discovered, profiled and streamed from them; FT_SPILL on and off, at 1/3 of the weights and all fitting: the capture holds, same replays, one verdict; at 1/3 after the plan the graph is cut and streams within the slots, also after cudaGraphExecUpdate; a graph built node by node (XLA's pattern) recorded, discovered, cut, and followed through node updates; a node changed, or cuGraphExecUpdate's CUDA 11 form handed out: every unit loaded"
