/* model.c - a small "model" written against the CUDA runtime API, for trying and
 * testing FlexTensor: L layers of weights loaded with cudaMalloc + cudaMemcpy, then
 * iterations (forwards) of several kernels per layer, through every launch path a
 * real framework uses:
 *
 *   gemv   __cudaLaunchKernel        (what nvcc-compiled PyTorch kernels call)
 *   mix    cudaLaunchKernelExC       (PyTorch's launches with attributes)
 *   scale  cuLaunchKernelEx + extra  (through minblas, as cuBLAS does)
 *   the input goes in by cudaLaunchKernel-free cudaMemcpyAsync, the output comes
 *   back by cudaMemcpyAsync; both are checksummed.
 *
 * The arithmetic is 32-bit unsigned, so a GPU and the simulated device print the
 * same checksum. Exit status 0 when every iteration of every thread agrees.
 *
 *   model [--layers L] [--dim N] [--iters I] [--threads T] [--ptr-arrays] [--stale]
 *         [--mark] [--nvtx] [--pause N] [--poke N] [--time] [--usage] [--quiet]
 *
 *   --ptr-arrays  one more weight per layer, reached through a device table of
 *                 pointers (mixp, launched with cudaLaunchKernel), as grouped GEMMs do
 *   --static-rt   with --ptr-arrays: mixp is launched as cuBLAS launches, by a runtime
 *                 call the interposer does not see (simulator only:
 *                 simcudaStaticLaunchKernel), which calls the driver's cuLaunchKernel
 *   --device N    run on device N (cudaSetDevice in every thread)
 *   --side-device N  every forward begins with a kernel on device N (on a buffer of its
 *                 own there), the thread switching to N and back: the process's first
 *                 launch is on another device than its weights; then, on N's stream, a
 *                 copy of the start of layer 0's weight into that buffer (a peer copy)
 *   --per-thread-stream  every worker thread runs on cudaStreamPerThread (one handle,
 *                 a stream per thread) instead of a stream of its own
 *   --side-from K with --side-device: from forward K on only (its buffer is made at
 *                 the start all the same, unless --side-late: at its first use; one
 *                 thread)
 *   --big-tables  with --ptr-arrays: the weights behind the pointer table are as large
 *                 as a layer's (backed by virtual memory, so they could be offloaded)
 *   --swap-acts N from forward N on, the forward runs on a second pair of activation
 *                 buffers (allocated with the first, before any launch): the first
 *                 launch touches other regions than in discovery (on the GPU, the
 *                 input moved to another caching-allocator segment)
 *   --alternate-acts  odd forwards run on that second pair, even ones on the first: a
 *                 pass's pointers repeat only every two forwards (on the GPU, PyTorch's
 *                 small activations when the last output stays alive through the next
 *                 forward)
 *   --cross-from N  from forward N on, each layer runs one more gemv that reads its own
 *                 weight and, as its input vector, a far layer's: a launch touching two
 *                 units, one of them not predicted (data-dependent code after discovery)
 *   --bypass-from N  from forward N on, the mix kernels are launched through the
 *                 driver reached without its exported symbol (simulator only): calls an
 *                 interposer does not see, as a library with a private driver path
 *                 makes; CUPTI reports them
 *   --skip-last-from N  from forward N on, the last layer is skipped: passes shorter
 *                 than the one discovery recorded (profiling then plans from the passes
 *                 it timed before)
 *   --big-last K  the last layer's weight is allocated K times as large as it is used
 *                 (zeroed): one unit K times a layer, as a language model's head or its
 *                 tensor-parallel shard's replicated embeddings are
 *   --race-alloc N  each thread, after a barrier that starts them together, allocates
 *                 N buffers of 1 MiB (kept until it ends, never touched): allocations
 *                 from several threads at once, as a framework's threads make them
 *   --early-end N  with --threads: the last thread runs N forwards only, and frees its
 *                 --race-alloc buffers 60 ms after its others, while the other threads
 *                 go on (frees that fall in the middle of FlexTensor's work for them)
 *   --lockstep    with --threads: every forward of every thread starts after a barrier
 *                 (the threads go on together, so the number of forwards each has run
 *                 when FlexTensor plans does not depend on how the host schedules them)
 *   --pad-odd     odd layers' weights are allocated 2 MiB larger than they are used
 *                 (zeroed): units of two sizes, whose physical memory a load cannot
 *                 reuse from the unit unloaded before
 *   --stale       one more kernel per layer (bump, cudaLaunchKernel) whose by-value
 *                 struct has a tail it never reads, left holding, as a framework's
 *                 stack would, the address of another layer's weight or of host memory
 *   --ptr-query   before each layer's first launch, its weight's pointer attributes
 *                 are asked, as Triton's launchers and PyTorch Inductor's do for every
 *                 pointer argument: cuPointerGetAttribute(DEVICE_POINTER) must give the
 *                 pointer back, cuPointerGetAttributes and cudaPointerGetAttributes
 *                 must say device memory on this device (exit 1 otherwise)
 *   --stale-rope  three more bump kernels in a row per layer, on the layer's output,
 *                 a buffer of their own, then the output again, each tail holding the
 *                 same address 3 bytes past the middle of layer 1's weight (PyTorch's
 *                 RoPE multiplies on the H200: a stale word, off any tensor's alignment,
 *                 in every layer; once the activations are known to vary, it is the
 *                 only region in the three launches' keys)
 *   --stale-graph  one more bump kernel per layer whose tail holds a small integer
 *                 in the eager forwards and, in the forward captured by --graph, the
 *                 address of layer 1's weight: garbage to discovery, a pointer in every
 *                 layer of the graph (as a GEMM's stack-filled parameter word seen in
 *                 torch.compile's reduce-overhead graphs on the H100)
 *   --stale-from N  one more bump kernel per layer whose tail holds, from forward N on,
 *                 another layer's weight, in a word that held NULL before (even
 *                 layers; PyTorch's cat metadata did this on the GPU) or the
 *                 activation's address (odd layers): garbage that looks like a pointer
 *   --stale-new N  from forward N on, one more bump kernel per layer, a kernel discovery
 *                 never saw, whose tail holds the same layer's weight in every layer
 *                 (PyTorch's prefill cat kernels on the GPU did this)
 *   --stale-off KIB  that address KIB KiB into the weight (an nvjet GEMM's word 2 MiB
 *                 into a 22 MiB region of one layer, on the H100)
 *   --gather-from N  from forward N on, each forward ends with one gather kernel (a cat
 *                 of many inputs, as PyTorch's CatArrayBatchedCopy) whose by-value
 *                 argument holds every layer's bias, then its scale vector, then its
 *                 weight (at most 128 pointers; 33 layers and more put every weight
 *                 past the 64th region of the launch): one launch reading most units
 *   --gather-until M  with --gather-from N, forward M is the last that ends with the
 *                 gather (forwards N..M have it; the later ones read their own layers
 *                 only)
 *   --far-new N   from forward N on, after layer 0's first kernel, one bump kernel (a
 *                 kernel discovery never saw) whose tail holds the weight of the layer
 *                 two thirds in: a stale address far from where the pass is
 *   --segments N  the weights are carved, in order, out of allocations of N MiB, as a
 *                 caching allocator's segments hold neighbouring layers' tensors
 *   --shared      every layer's scale reads one more weight, a table as large as a
 *                 layer's (as every layer reads a framework's rotary tables, or a
 *                 caching-allocator segment holding all the norm weights)
 *   --vary N      from forward N on, every other forward launches one more kernel per
 *                 layer (bump, touching only activations): passes of two lengths, as a
 *                 server alternating prefill and decode steps
 *   --func-wide   with --prefill-every or --graph-nodes-second: the prefill forwards
 *                 launch gemv_wide through its CUfunction (cuKernelGetFunction) and the
 *                 driver's cuLaunchKernel, and the second graph's gemv node names that
 *                 function, as XLA launches its kernels and builds its command buffers
 *   --prefill-every N  every Nth forward is a prefill's: each layer's GEMM another
 *                 kernel (gemv_wide, the same arithmetic) and half the --act-kernels, so
 *                 that its launches follow no recorded pass and no pass begins there
 *   --prefill-gemv with --prefill-every: the prefill forwards keep the decode's gemv
 *                 (only their activation kernels are fewer), as a prefill's GEMM that is
 *                 the same kernel as the decode's: its weight puts the pass forward past
 *                 the launches the prefill left out
 *   --act-twin N  from forward N on, each layer's first --act-kernels launch is mix's
 *                 twin (mix_alt, the same arithmetic): a kernel chosen by shape, as the
 *                 attention kernel cuDNN picks once a decode's KV cache has grown, so
 *                 that passes leave the record there and their next weight puts them back
 *   --act-kernels N  every layer ends with N more kernels touching activations only:
 *                 the k-th adds the layer's output to element k of a 2 MiB buffer
 *                 allocated before the weights (mix): N launches whose pointers differ
 *                 from each other but repeat layer after layer, the first region they
 *                 touch older than every weight, as the activation kernels of a decode
 *                 step in PyTorch's small pool (transformers' Mixtral on the H200), which
 *                 holds the layers' input and output too; no host synchronisation inside
 *                 the forward; one thread
 *   --autotune N  after the weights are loaded and before the first forward, the first
 *                 layer's matrix product N times on its weight into a scratch buffer (a
 *                 compiler benchmarking a kernel, Inductor's or XLA's autotuner): N
 *                 launches of one kernel on one weight, a period of one launch
 *   --autotune N,2  the same with gemv and gemv_wide in turn (a benchmarked template
 *                 and its epilogue): a period of two launches on one weight
 *   --autotune N,3  the same two kernels on a matrix, input and output carved from one
 *                 scratch allocation made for the timing, its input set anew for each
 *                 pair (XLA's autotuner on buffers of its arena): a period of two
 *                 launches that touches no weight
 *   --prologue    before the weights exist, a 2 MiB buffer (a caching allocator's small
 *                 segment) gets a few kernels (a framework's warm-up, an NCCL
 *                 communicator's first all-reduce), and every layer of every forward
 *                 adds its input to it (mix: small activations reusing the segment),
 *                 each thread to a slice of its own (larger than 2 MiB when the
 *                 threads' slices need more)
 *   --small-weights  every layer's two vectors (each far below FT_VMM_MIN_SIZE) packed,
 *                 512-byte aligned, in 2 MiB segments (PyTorch's small pool holding a
 *                 model's norm weights and biases); the matrices as usual
 *   --grow-cache  decode steps with a KV cache, as transformers' DynamicCache under
 *                 PyTorch's caching allocator (one thread): device memory other than the
 *                 layers' matrices comes from a pool of 2 MiB segments (cudaMalloc'd when
 *                 no free block fits, kept to the end; best fit, freed blocks merged).
 *                 Before the first launch the pool holds every layer's two vectors and
 *                 the inputs of all the forwards, as the small pool holds norm weights
 *                 and token ids; forward t reads input t (a pointer that moves into the
 *                 segment every forward, as input_ids=toks[t:t+1]). Each kernel's output
 *                 is a new block, the input's freed after it. Forward 0 (the prompt)
 *                 makes each layer's K and V of 8 rows of 16 KiB (cat, from
 *                 nothing); forward t >= 1 re-makes both one row longer (cat: the old
 *                 rows copied, one row added; the old block freed) and attends over
 *                 them (attend: the row count is a scalar argument that grows). Blocks
 *                 move inside the segments from one forward to the next, and a new
 *                 segment is allocated every few forwards. Each forward's output
 *                 depends on the cache, so no two forwards agree; each one's checksum
 *                 is printed
 *   --init-kernel the weights are allocated one by one, each written right after its
 *                 allocation by a kernel on the device (fill, as PyTorch's uniform_ under
 *                 `with torch.device("cuda")`): the program's first launch is layer 0's
 *                 weight's, every later weight is allocated after it, and the init
 *                 launches repeat per tensor on new memory each time
 *   --own-vmm     the layers' tensors and the activations in device memory the
 *                 program maps itself (cuMemAddressReserve, cuMemCreate, cuMemMap,
 *                 cuMemSetAccess), as PyTorch with
 *                 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
 *   --own-vmm-export  as --own-vmm, each handle made exportable (a POSIX file
 *                 descriptor) and exported before it is mapped, as NCCL's buffers
 *                 shared with other processes
 *   --own-vmm-export-late  as --own-vmm-export, each handle exported once the weights
 *                 are written, after it is mapped (NCCL maps its buffers, then exports
 *                 them for its peers' processes): the bytes must stay as they were
 *   --own-vmm-pool N  as --own-vmm, the way XLA's allocator grows its pool: one address
 *                 range reserved, chunks of N MiB (or the tensor's size, if larger) mapped
 *                 one after another as the pool needs them, each tensor carved after the
 *                 last at 256-byte alignment; each chunk's handle is released as soon
 *                 as it is mapped; nothing is given back until the end, where one
 *                 cuMemUnmap covers every chunk
 *   --pool-weights-only  with --own-vmm-pool: the activations from cudaMalloc, so
 *                 that the pool holds the weights and, after the last one, room no
 *                 buffer has used (XLA's last chunk on the H100: 2 GiB, the weights'
 *                 end, then room)
 *   --pool-late N with --own-vmm-pool: from forward N on, each forward carves a fresh 2 MiB
 *                 buffer from the pool half-way through its layers (the pool never gives
 *                 one back: new room each time, as a pool's allocator reaches memory no
 *                 buffer used before), clears it and mixes the activation through it
 *   --init-twice  with --init-kernel: after all the weights, layer 0's weight (the one
 *                 region alive at the first launch) is written again by the same fill
 *                 kernel, with a host synchronisation between (transformers initialising
 *                 a GPU-built model's embedding twice on the H200): its content moves
 *                 twice, so discovery takes it for an activation, and no weight is left
 *                 among the regions alive at the first launch
 *   --room-from N with --segments, one thread: from forward N on, every layer mixes
 *                 its activation into the free room past the weights of the segment
 *                 holding its weight (at the next 2 MiB boundary), and back (a caching allocator placing prefill's
 *                 activations beside the weights, in the room a segment has left, as
 *                 on the H200); the output depends on that room's content
 *   --room-first  with --room-from: in the first forward too (generate's prefill, before
 *                 the decode steps)
 *   --seg-down    with --segments: each segment filled from its end down (a tensor's
 *                 copy ends in the piece where the next-placed layer's tensors start);
 *                 with --room-from, the room is a block of the free room below the
 *                 weights, across the start of the granule where the lowest weight
 *                 starts (a temporary a caching allocator carves from the free block
 *                 it keeps at a segment's start, running on into that granule)
 *   --segment-kib N  as --segments, in KiB
 *   --room-low N  with --room-from: the room starts 2 MiB higher, and from forward N
 *                 on it is the 2 MiB below (what a caching allocator handed out first
 *                 lies above what it hands out later: tied's split regions on the H100)
 *   --room-pair   with --room-from: first, each layer mixes the room of the layer
 *                 half the model away into a second room just past it, and back, by
 *                 launches that reach that segment at two pointers, both past its
 *                 weights, while its unit is not in use (an elementwise kernel whose
 *                 input and output both lie in room a far layer's segment left)
 *   --start-room N  with --pad-odd: from forward N on, the pass's first launch (layer
 *                 0's gemv) writes its product into the zeroed room past the weight of
 *                 the odd layer at or after the middle, then it is copied to b (an
 *                 embedding's output that a caching allocator placed past a layer's
 *                 weights, in their segment's room, as prefill's on the H100)
 *   --init-refill with --init-kernel: after all the weights, every layer's weight is
 *                 written once more by the fill kernel, from another seed (a program
 *                 filling a GPU-built model's parameters with its own seeded init after
 *                 the constructor's, as the conformance cases do on the H200)
 *   --init-other  with --init-kernel: after all the weights, layer 0's weight is
 *                 written once more, by another kernel (bump), as transformers zeroes
 *                 an embedding's padding row after normal_: it varies, and no kernel
 *                 repeats on it before the forwards
 *   --load-after-launch  before the weights exist, unrelated kernels run once each on
 *                 buffers freed afterwards (a framework's probes and warm-up), then the
 *                 weights are allocated and copied in (cudaMemcpy)
 *   --tail-layers K  the last K layers launch one kernel more each (on the activation):
 *                 the pass is two runs of layers that differ, as two models run in turn
 *                 (or a model whose decoder blocks are of two kinds)
 *   --hf-warmup M before the weights, as transformers' caching_allocator_warmup at
 *                 from_pretrained(device_map=...): the free memory cudaMemGetInfo reports
 *                 less M MiB, without a floor, is the size of a buffer allocated and freed;
 *                 a negative size fails the program ("negative dimension"), as it does there
 *   --mark        call ft_iteration_mark() (when FlexTensor is loaded) at each forward
 *   --nvtx        emit NVTX ranges: "forward", "layers.N" around each layer, and inside
 *                 each layer a range whose message is a registered string (as NCCL's:
 *                 it has no readable name)
 *   --time        print each forward's device time (CUDA events), "step_us"
 *   --poke N      after forward N, write one word into layer 0's weight (cudaMemcpy):
 *                 later forwards differ; the checksum printed is the last forward's.
 *                 With --threads, this and the writes of --rewrite, --peek and --zero
 *                 are worker 0's, made while every thread waits between two forwards
 *   --refill N    with --segments: after forward N, read back and write again (the same
 *                 bytes, one cudaMemcpy each way) the range from the middle of the middle
 *                 layer's weight to the middle of the next layer's: copies that run on
 *                 across tensors, as a segment's neighbours lie
 *   --rewrite N   from forward N on, after every forward, write one word (a new value
 *                 each time) into layer 0's weight: a weight that keeps changing
 *   --peek N      after forward N, read the middle layer's first weight row back
 *                 (cudaMemcpy) and print its hash ("peek ..."), then write one word of
 *                 that row (later forwards differ)
 *   --scratch     each forward allocates a 2 MiB scratch buffer half-way through its
 *                 layers (cleared with cudaMemsetAsync) and frees it at the end
 *   --scratch-from N   the same from forward N on only (memory the plan never saw)
 *   --demote-after-plan N  from forward N on, each forward allocates half-way through
 *                 its layers an activation as large as half the weights, and a layer's
 *                 weight larger in each forward after N (memory the plan never saw,
 *                 more than a budget of a third of the weights holds even with every
 *                 layer streamed: a prefill after decode steps); it is set with
 *                 cudaMemsetAsync, its last row added into the pass (mix), and freed
 *                 at the forward's end. The output depends on it only through that
 *                 row, which is the same in every forward
 *   --outside-from N  at forward N, 4 MiB of device memory the shim does not see
 *                 (cuMemCreate and cuMemMap, resolved by dlsym on libcuda, as NCCL
 *                 allocates its buffers), kept to the end
 *   --drv-alloc   every layer's tensors from the driver's cuMemAlloc_v2 and freed with
 *                 cuMemFree_v2 (resolved by dlsym on libcuda), as XLA's allocator and
 *                 programs on the driver API allocate
 *   --drv-workspace N  half-way through the first forward, N MiB from the driver's
 *                 cuMemAlloc (resolved by dlsym on libcuda), kept and cleared in every
 *                 forward of the thread that made it: a library's lazily made
 *                 workspace (cuBLAS's handle)
 *   --pause N     ft_profiling_suspend() before the first forward, resume after the
 *                 N-th (no resume if N >= iterations): warm-up passes not profiled
 *   --zero N      after forward N, clear the middle layer's first weight row with the driver's
 *                 cuMemsetD32 (resolved by dlsym on libcuda, as a library would)
 *   --drop N      after forward N, cudaFree the last layer (its weight, vectors) and run
 *                 the later forwards without it (one thread only)
 *   --reload N    after forward N, cudaFree every layer's weights (matrix, vectors,
 *                 experts), then allocate and upload a model of the same shape drawn
 *                 from another seed (--seed's, changed) and run the later forwards on
 *                 it: a program that frees one model and loads another (del A,
 *                 empty_cache, then B). With --threads, between every thread's
 *                 forwards N and N + 1. Not with --ptr-arrays, --shared, --segments,
 *                 --grow-cache, --drop or --graph
 *   --graph N     after the --iters forwards, capture one more forward into a CUDA graph
 *                 (cudaStreamBeginCapture, global mode, on a non-blocking stream of its
 *                 own, as torch.cuda.graph does) and replay it N times, printing "graph
 *                 replay R checksum C"; its input comes from pinned memory, and it
 *                 first clears a 2 MiB workspace allocated before the forwards
 *                 (cuBLAS's workspace memset) and a 2 MiB buffer it allocates during
 *                 the capture in relaxed mode (PyTorch's graph pool). One thread.
 *                 The graph is destroyed once instantiated, as torch.cuda.graph does.
 *   --alt-odd     odd layers launch their mix kernel through a second handle of the
 *                 same code: the pass repeats every two layers (torch.compile's
 *                 Inductor kernels alternate so, with its buffers, on the H100)
 *   --graph-eager  with --graph: after each replay, one eager forward on the graph's
 *                 stream, printing "graph eager R checksum ..." (a server's eager prefill
 *                 between its decode graph's replays)
 *   --graph-update  with --graph: after the first replay, capture the forward again and
 *                 update the executable graph from it (cudaGraphExecUpdate)
 *   --graph-toggle  with --graph: after the first replay, turn the graph's last node off
 *                 and on again in the executable graph (cudaGraphNodeSetEnabled)
 *   --graph-old-update  with --graph: before the capture, ask the driver for
 *                 cuGraphExecUpdate in its CUDA 11 form (cuGetProcAddress, version 11000)
 *   --graph-nodes N  as --graph N (the same replays, printing the same "graph replay R
 *                 checksum C" lines), but the graph is built node by node, as XLA builds
 *                 a command buffer: cudaGraphCreate, a memset node clearing the
 *                 workspace, a memcpy node for the input, then each layer a child graph
 *                 (cudaGraphCreate, cudaStreamBeginCaptureToGraph in thread-local mode,
 *                 the layer's launches, cudaStreamEndCapture, cudaGraphAddChildGraphNode,
 *                 the child destroyed), except the last layer: its gemv a kernel node of
 *                 the driver's (cuGraphAddKernelNode, asked of the driver with
 *                 cudaGetDriverEntryPointByVersion), its mix one of the runtime's
 *                 (cudaGraphAddKernelNode), the rest of it a child graph; then a memcpy
 *                 node for the output. Each node depends on the one
 *                 before. One thread, two layers run at least; not with --graph, nor
 *                 --cross-from or --moe (they launch between a layer's gemv and mix)
 *   --graph-nodes-update  with --graph-nodes: after the first replay, the input moves
 *                 (its pinned host copy and the device activation it is copied into,
 *                 each to a new allocation, the old ones overwritten) and the executable
 *                 graph is updated node by node, as XLA updates a command buffer: the
 *                 memcpy and kernel nodes' parameters set
 *                 (cudaGraphExecMemcpyNodeSetParams1D, the driver's
 *                 cuGraphExecKernelNodeSetParams for the gemv,
 *                 cudaGraphExecKernelNodeSetParams for the mix), each layer traced again
 *                 and its child graph node set (cudaGraphExecChildGraphNodeSetParams); the
 *                 later replays print the same checksums
 *   --graph-nodes-swap  with --graph-nodes-update: the update also points the last
 *                 layer's gemv kernel node at the weight of the layer halfway (a node
 *                 that now reads another unit than the one it read when built)
 *   --graph-nodes-generic  with --graph-nodes: the last layer's gemv kernel node
 *                 (--graph-nodes-into: the first layer's) is added with the
 *                 generic cuGraphAddNode (its CUDA 12.3 form, cuGraphAddNode_v2, asked of
 *                 the driver with cudaGetDriverEntryPointByVersion, version 12030) and
 *                 CU_GRAPH_NODE_TYPE_KERNEL parameters instead of cuGraphAddKernelNode;
 *                 the same checksums. --graph-nodes-update still sets that node with
 *                 cuGraphExecKernelNodeSetParams
 *   --graph-nodes-generic-old  as --graph-nodes-generic, with cuGraphAddNode's CUDA 12.2
 *                 form (version 12020, no edge data)
 *   --graph-nodes-second N  with --graph-nodes: after its replays, a second graph built
 *                 the same way over two activations of 4 MiB carved anew (from the pool
 *                 with --own-vmm-pool), its GEMMs gemv_wide's (the same arithmetic),
 *                 replayed N times, printing "graph2 replay R checksum C" (XLA's
 *                 prefill: an executable compiled after the decode's replays, its
 *                 command buffer built node by node then, its buffers taken from the
 *                 pool's room, its kernels others than decode's)
 *   --second-far MiB  with --graph-nodes-second and --own-vmm-pool: the second graph's
 *                 activations are carved past MiB of the pool that no buffer uses (XLA's
 *                 prefill temporaries, far past what the decode used: in the pool's room)
 *   --second-reuse  with --graph-nodes-second and --own-vmm-pool: past the weights, at
 *                 a granule's start, 4 MiB carved before the first forward: its first
 *                 granule left as fresh memory (zeros), its second written once by a
 *                 copy (an initialiser's temporary), then unused until the second
 *                 graph takes the 4 MiB for its first activation and, in its first
 *                 node, fills it past the activation's words (XLA's pool on the H100:
 *                 the prefill's temporaries carved from a piece of zeros past the last
 *                 weight, running into a piece that initialisers had written)
 *   --graph-nodes-into  with --graph-nodes: the layers are captured straight into the
 *                 graph instead of into child graphs, as XLA traces into its command
 *                 buffer: after the memset and input memcpy nodes, the first layer's
 *                 gemv and mix are kernel nodes (the driver's cuGraphAddKernelNode, the
 *                 runtime's cudaGraphAddKernelNode), then the rest of that layer and
 *                 every later layer (and --gather-from's gather) are captured into the
 *                 graph, one capture each (cudaStreamBeginCaptureToGraph on the graph
 *                 itself, thread-local, after the node before, whose last node
 *                 cudaStreamGetCaptureInfo tells before cudaStreamEndCapture); then the
 *                 output's memcpy node. The same checksums; not with
 *                 --graph-nodes-update (no child graph nodes to set), nor --far-new (it
 *                 launches between the first layer's gemv and mix)
 *   --profile-from N  from forward N on, the program profiles itself with CUPTI as
 *                 torch.profiler does (subscribe, kernel and copy records, driver
 *                 callbacks) and prints what it recorded at the end (profiler.c; one
 *                 thread)
 *   --usage       print cudaMemGetInfo and ft_get_gpu_memory_usage() after the first
 *                 and the last forward (on stderr: "meminfo ...", "usage ...")
 *   --seed S      the layers' matrices are drawn from seed S (0, the default: as
 *                 without it): a model of the same shape with other weights
 *   --hold PATH   after the last forward, before anything is freed, create PATH.held
 *                 and wait until PATH exists (at most 10 minutes): a test reads what
 *                 the running processes hold (tests/scenario/shm.sh reads /proc)
 *   --control N:ACTION[,N:ACTION...]  after forward N, worker 0 calls FlexTensor's
 *                 runtime control (when it is preloaded), while every thread waits
 *                 between two forwards: release (ft_release(1)), release0
 *                 (ft_release(0)), resume, replan (ft_request_replan), limit=SIZE
 *                 (ft_set_gpu_mem_limit; SIZE in bytes, or with K, M or G for KiB,
 *                 MiB, GiB). Each prints "control after N: ACTION -> RC" and the
 *                 usage ("usage after control N: ...") on stderr
 *   built as a library (libmodel-sim.so: model_main(argc, argv)), a hook set with
 *                 model_set_hook(fn) is called as fn(N) after each forward N, at the
 *                 same place (a Python program calls the control API from there)
 *   defaults: 16 layers of a 2048x2048 weight (16 MiB) + two vectors = 256 MiB
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

#include "examples/kernels.h"
#include "examples/minblas.h"
#include "examples/profiler.h"
#include "shim/flextensor.h"

/* Declared by nvcc's crt/device_functions.h for C++ only. */
extern cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                      void **args, size_t sharedMem, cudaStream_t stream);

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess) {                                                       \
            fprintf(stderr, "model: %s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__,    \
                    #call, cudaGetErrorString(err_), (int)err_);                         \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define MODEL_MAX_EXPERTS 64
typedef struct {
    uint32_t *w, *bias, *s, *pv;
    uint32_t *ex[MODEL_MAX_EXPERTS]; /* --moe: the layer's experts */
} layer_t;

static int layers = 16, dim = 2048, iters = 3, threads = 1, quiet = 0, ptr_arrays = 0, mark = 0,
           nvtx = 0, stale = 0, stale_rope = 0, stale_graph = 0, in_capture = 0, stale_from = -1, stale_new = -1, far_new = -1, vary_from = -1, shared = 0;
static int act_kernels = 0; /* --act-kernels */
static int act_twin = -1;   /* --act-twin */
static int prefill_every = 0; /* --prefill-every */
static int func_wide = 0;     /* --func-wide */
static int prefill_gemv = 0;  /* --prefill-gemv */
static uint32_t *act_pool;  /* its 2 MiB buffer, allocated before the weights */
static uint32_t *rope_buf;  /* --stale-rope's own activation, allocated before the weights */
static __thread int extra_kernels; /* this forward launches the --vary kernels */
static uint32_t **ptr_table; /* device array: ptr_table[l] = model[l].pv */
static uint32_t *shared_table; /* --shared: dim x dim words, every layer reads the first dim */
static void (*iteration_mark)(void);
static void (*profiling_suspend)(void);
static int (*profiling_resume)(void);
static int pause_forwards = 0;
static int poke_after = -1;
static int refill_after = -1; /* --refill */
static int rewrite_from = -1;
static int peek_after = -1;
static int scratch_from = -1;
static int pool_late = -1; /* --pool-late */
static int over_from = -1; /* --demote-after-plan */
static int drv_alloc; /* --drv-alloc */
static int drv_workspace_mib = 0;
static int outside_from = -1;
static unsigned long long drv_workspace; /* its device address, once allocated */
/* This thread made the workspace and alone clears it: threads' memsets on streams of
 * their own would write the same bytes at once (a cuBLAS handle's workspace likewise
 * serves one stream at a time). */
static __thread int drv_workspace_mine;
static pthread_mutex_t drv_workspace_lock = PTHREAD_MUTEX_INITIALIZER;
static int big_tables;
static int pad_odd; /* odd layers' weights are allocated 2 MiB larger than used */
static int big_last = 1; /* the last layer's weight is allocated this many times larger */
static int race_alloc; /* --race-alloc: 1 MiB buffers each thread allocates at its start */
static int early_end = -1; /* --early-end: the forwards the last thread runs (-1: all) */
static pthread_barrier_t race_barrier;
static int lockstep;                  /* --lockstep */
static pthread_barrier_t step_barrier;
static pthread_barrier_t write_barrier; /* around worker 0's writes into weights */
static int swap_from = -1; /* from this forward on, another pair of activation buffers */
static int alternate_acts; /* odd forwards on the other pair */
static int cross_from = -1; /* from this forward on, each layer also reads a far layer's weight */
static int skip_from = -1; /* from this forward on, the last layer is skipped */
static int gather_from = -1; /* from this forward on, each forward ends with a gather */
static int gather_until = -1; /* the last forward that does (-1: every one from gather_from) */
/* --moe E,K: each layer has E experts (dim x dim words each) and every forward routes to
 * K of them, chosen per forward and layer by a seeded generator (a router's choice):
 * each expert's weight is read by the forwards that route to it, not by the others. */
static int moe_experts, moe_k;
static size_t stale_off; /* --stale-off, bytes */
/* --static-rt: the runtime's launch as a library with its own copy of the runtime
 * makes it (the simulator's simcudaStaticLaunchKernel), or NULL. */
typedef cudaError_t (*static_launch_fn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
static static_launch_fn static_launch;
static int bypass_from = -1; /* from this forward on, mix launches bypass the interposer */
static int prologue;
static int autotune;         /* --autotune N[,K] */
static int autotune_kernels_n = 1; /* K */
static int grow_cache;     /* --grow-cache */
static int small_weights;  /* --small-weights */
static int init_kernel;       /* --init-kernel */
static int init_twice;        /* --init-twice */
static int init_other;        /* --init-other */
static int init_refill;       /* --init-refill */
static int load_after_launch; /* --load-after-launch */
static long hf_warmup_mib = -1; /* --hf-warmup M */
static int tail_layers;         /* --tail-layers K */
static uint32_t *warm; /* --prologue's buffer: thread t adds to dim words at warm + t * dim */
/* This thread's slice of warm. Each thread's forwards run on a stream of its own, so
 * adding to one slice from two threads would race on the device (mix reads and writes
 * every word it is given). */
static __thread uint32_t *warm_mine;
static int device;
static int side_device = -1;  /* --side-device */
static int side_from;         /* --side-from: the forward its launches begin at */
static int side_late;         /* --side-late: its buffer made at its first use */
static int per_thread_stream; /* --per-thread-stream: workers run on cudaStreamPerThread */
static uint32_t *side_buf;    /* its buffer, on that device */
static __thread int cur_iter; /* the forward under way on this thread */

static int in_graph2; /* --graph-nodes-second's graph is being built: a prefill's */

/* --prefill-every N: this forward is a prefill's (every Nth); so is the second graph of
 * --graph-nodes-second. */
static int prefill_pass(void)
{
    return in_graph2 || (prefill_every > 0 && cur_iter % prefill_every == prefill_every - 1);
}
static int usage;
/* --control: after forward `after`, `action` (with `bytes` for limit=). */
#define MODEL_MAX_CONTROLS 32
static struct control {
    int after;
    char action[16];
    unsigned long long bytes;
} controls[MODEL_MAX_CONTROLS];
static int n_controls;
static void (*after_forward_hook)(int it); /* model_set_hook's, in the library build */
static int profile_from = -1; /* --profile-from */
static int drop_after = -1;
static int reload_after = -1; /* --reload */
static int zero_after = -1;
static int (*get_usage)(ft_gpu_memory_usage_t *);
static int timing = 0;
static int graph_replays = 0; /* --graph */
static int graph_update = 0;  /* --graph-update */
static int graph_eager = 0;   /* --graph-eager */
static int alt_odd = 0;       /* --alt-odd */
static int graph_toggle = 0;  /* --graph-toggle */
static int graph_old_update = 0; /* --graph-old-update */
static int graph_nodes = 0;   /* --graph-nodes */
static int graph_nodes_update = 0; /* --graph-nodes-update */
static int graph_nodes_swap = 0;   /* --graph-nodes-swap */
static int graph_nodes_into = 0;   /* --graph-nodes-into */
static int graph_nodes_generic = 0; /* --graph-nodes-generic (2: its CUDA 12.2 form) */
static int graph_nodes_second = 0;  /* --graph-nodes-second */
static int second_far = 0;          /* --second-far MiB */
static int second_reuse = 0;        /* --second-reuse */
static uint32_t *reuse_buf;         /* --second-reuse's 4 MiB */
static layer_t *model;
static uint32_t *input;
static cudaKernel_t k_gemv, k_gemv_wide;
static const void *k_mix, *k_mix_alt;

typedef struct {
    int id;
    uint64_t checksum[64];
} worker_t;

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t fnv1a(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* --segments N: the weights are carved, one after another, out of allocations of N
 * MiB (a caching allocator's segments, each holding tensors of neighbouring layers). */
static size_t segment_bytes;
static int seg_down; /* --seg-down: each segment filled from its end down */
static char *segs[4096];
static int n_segs;
static size_t seg_used;
static size_t seg_end[4096]; /* each segment's bytes in use, at its end */
static long room_from = -1;  /* --room-from N */
static int room_first;       /* --room-first */
static int room_pair;        /* --room-pair */
static long start_room = -1; /* --start-room N */
static int room_low = -1;    /* --room-low: from this forward on, the room 2 MiB lower */
static uint32_t **room_of;   /* --room-from: per layer, the free room past its segment's weights */

/* --drv-alloc: the driver's allocation and free, resolved once. */
static int (*drv_mem_alloc)(unsigned long long *, size_t);
static int (*drv_mem_free)(unsigned long long);

static int ptr_query; /* --ptr-query */

/* --ptr-query: what a launcher asks of a pointer argument before it launches. */
static void query_pointer(const void *p)
{
    static CUresult (*one)(void *, CUpointer_attribute, CUdeviceptr);
    static CUresult (*many)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
    if (one == NULL) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
        one = cuda ? (CUresult(*)(void *, CUpointer_attribute, CUdeviceptr))dlsym(cuda, "cuPointerGetAttribute") : NULL;
        many = cuda ? (CUresult(*)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr))dlsym(
                          cuda, "cuPointerGetAttributes")
                    : NULL;
        if (one == NULL || many == NULL) {
            fprintf(stderr, "model: --ptr-query: cuPointerGetAttribute(s) not found\n");
            exit(1);
        }
    }
    CUdeviceptr dp = 0;
    CUresult rc = one(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)(uintptr_t)p);
    if (rc != CUDA_SUCCESS || dp != (CUdeviceptr)(uintptr_t)p) {
        fprintf(stderr, "model: cuPointerGetAttribute(DEVICE_POINTER, %p): error %d, %#llx\n", p, (int)rc,
                (unsigned long long)dp);
        exit(1);
    }
    unsigned int type = 0;
    int ordinal = -1;
    CUpointer_attribute which[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL };
    void *data[] = { &type, &ordinal };
    rc = many(2, which, data, (CUdeviceptr)(uintptr_t)p);
    if (rc != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE || ordinal != device) {
        fprintf(stderr, "model: cuPointerGetAttributes(%p): error %d, type %u, device %d\n", p, (int)rc, type,
                ordinal);
        exit(1);
    }
    /* The allocation's range, whole: with --segments, the segment's (FlexTensor serves
     * a large one in pieces, which the driver knows one by one). */
    static CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
    if (range == NULL) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
        range = cuda ? (CUresult(*)(CUdeviceptr *, size_t *, CUdeviceptr))dlsym(cuda, "cuMemGetAddressRange_v2")
                     : NULL;
    }
    CUdeviceptr want = (CUdeviceptr)(uintptr_t)p, start = 0, rbase = 0;
    size_t rsize = 0, want_size = (size_t)dim * (size_t)dim * sizeof(uint32_t), asize = 0;
    for (int i = 0; i < n_segs; i++)
        if ((const char *)p >= segs[i] && (const char *)p < segs[i] + segment_bytes)
            want = (CUdeviceptr)(uintptr_t)segs[i], want_size = segment_bytes;
    if (one(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
        one(&asize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
        (range != NULL && range(&rbase, &rsize, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) || start != want ||
        asize < want_size || (range != NULL && (rbase != want || rsize < want_size))) {
        fprintf(stderr, "model: the range of %p: start %#llx, %zu bytes; cuMemGetAddressRange %#llx, %zu bytes; "
                        "%#llx, %zu wanted\n", p, (unsigned long long)start, asize, (unsigned long long)rbase, rsize,
                (unsigned long long)want, want_size);
        exit(1);
    }
    struct cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess || at.type != cudaMemoryTypeDevice || at.device != device || at.devicePointer != p) {
        fprintf(stderr, "model: cudaPointerGetAttributes(%p): %s, type %d, device %d\n", p, cudaGetErrorName(e),
                (int)at.type, at.device);
        exit(1);
    }
}

static void drv_alloc_resolve(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (cuda == NULL)
        cuda = dlopen("libcuda.so.1", RTLD_NOW);
    drv_mem_alloc = cuda ? (int (*)(unsigned long long *, size_t))dlsym(cuda, "cuMemAlloc_v2") : NULL;
    drv_mem_free = cuda ? (int (*)(unsigned long long))dlsym(cuda, "cuMemFree_v2") : NULL;
    if (drv_mem_alloc == NULL || drv_mem_free == NULL) {
        fprintf(stderr, "model: --drv-alloc: cuMemAlloc_v2 or cuMemFree_v2 not found\n");
        exit(1);
    }
}

/* A layer tensor's device memory: cudaMalloc, or the driver's with --drv-alloc. */
/* --own-vmm: the weights in device memory the program maps itself, as PyTorch's
 * expandable_segments does (cuMemAddressReserve, cuMemCreate, cuMemMap,
 * cuMemSetAccess), one mapping per tensor. */
static int own_vmm, own_vmm_export, own_vmm_export_late, own_vmm_pool_mib, pool_weights_only;
static struct own_map {
    void *p;
    size_t size;
    CUmemGenericAllocationHandle h;
} own_maps[4096];
static int n_own_maps;

/* The driver's virtual-memory calls, looked up once (dlsym of libcuda: under the shim,
 * its wrappers where it has them, as a program linking the driver gets). */
static struct {
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
} vm;

static void own_vmm_resolve(void)
{
    if (vm.reserve != NULL)
        return;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (cuda != NULL) {
        vm.reserve = dlsym(cuda, "cuMemAddressReserve");
        vm.create = dlsym(cuda, "cuMemCreate");
        vm.map = dlsym(cuda, "cuMemMap");
        vm.access = dlsym(cuda, "cuMemSetAccess");
        vm.gran = dlsym(cuda, "cuMemGetAllocationGranularity");
        vm.unmap = dlsym(cuda, "cuMemUnmap");
        vm.release = dlsym(cuda, "cuMemRelease");
        vm.address_free = dlsym(cuda, "cuMemAddressFree");
        vm.export_fd = dlsym(cuda, "cuMemExportToShareableHandle");
    }
    if (!vm.reserve || !vm.create || !vm.map || !vm.access || !vm.gran || !vm.unmap || !vm.release ||
        !vm.address_free) {
        fprintf(stderr, "model: --own-vmm: the driver's virtual memory calls not found\n");
        exit(1);
    }
}

/* --own-vmm-pool: the reserved range, how much of it is mapped, how much carved. */
static struct {
    CUdeviceptr base;
    size_t reserved, mapped, used;
} vpool;

static void *vpool_alloc(size_t bytes, const CUmemAllocationProp *prop, size_t g)
{
    CUmemAccessDesc ad = { { CU_MEM_LOCATION_TYPE_DEVICE, device }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    if (vpool.base == 0) {
        vpool.reserved = (size_t)1 << 30;
        if (vm.reserve(&vpool.base, vpool.reserved, 0, 0, 0) != CUDA_SUCCESS) {
            fprintf(stderr, "model: --own-vmm-pool: reserving the pool failed\n");
            exit(1);
        }
    }
    size_t at = (vpool.used + 255) / 256 * 256;
    while (at + bytes > vpool.mapped) {
        size_t chunk = (size_t)own_vmm_pool_mib << 20;
        if (chunk < at + bytes - vpool.mapped)
            chunk = at + bytes - vpool.mapped;
        chunk = (chunk + g - 1) / g * g;
        CUmemGenericAllocationHandle h = 0;
        CUdeviceptr va = vpool.base + vpool.mapped;
        if (vpool.mapped + chunk > vpool.reserved ||
            vm.create(&h, chunk, prop, 0) != CUDA_SUCCESS || vm.map(va, chunk, 0, h, 0) != CUDA_SUCCESS ||
            vm.access(va, chunk, &ad, 1) != CUDA_SUCCESS) {
            fprintf(stderr, "model: --own-vmm-pool: growing the pool by %zu bytes failed\n", chunk);
            exit(1);
        }
        /* XLA releases each handle as soon as it is mapped: the mapping keeps it. */
        if (vm.release(h) != CUDA_SUCCESS) {
            fprintf(stderr, "model: --own-vmm-pool: releasing a mapped chunk failed\n");
            exit(1);
        }
        vpool.mapped += chunk;
    }
    vpool.used = at + bytes;
    return (void *)(uintptr_t)(vpool.base + at);
}

/* The pool given back: one unmap over every chunk (their handles were released when
 * mapped), then the range. */
static void vpool_release(void)
{
    if (vpool.base == 0)
        return;
    if (vm.unmap(vpool.base, vpool.mapped) != CUDA_SUCCESS) {
        fprintf(stderr, "model: --own-vmm-pool: unmapping the pool failed\n");
        exit(1);
    }
    if (vm.address_free(vpool.base, vpool.reserved) != CUDA_SUCCESS) {
        fprintf(stderr, "model: --own-vmm-pool: freeing the pool's range failed\n");
        exit(1);
    }
    vpool.base = 0;
}

/* The threads' activations come and go together: one lock over the mappings and the pool. */
static pthread_mutex_t own_vmm_lock = PTHREAD_MUTEX_INITIALIZER;

/* The properties of the program's own allocations (*prop) and their granularity. */
static size_t own_vmm_prop(CUmemAllocationProp *prop)
{
    own_vmm_resolve();
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = device;
    if (own_vmm_export)
        prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t g = 0;
    if (vm.gran(&g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0) {
        fprintf(stderr, "model: --own-vmm: no granularity\n");
        exit(1);
    }
    return g;
}

static void *own_vmm_alloc_locked(size_t bytes)
{
    CUmemAllocationProp prop;
    size_t g = own_vmm_prop(&prop);
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    CUmemAccessDesc ad = { { CU_MEM_LOCATION_TYPE_DEVICE, device }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    if (n_own_maps == (int)(sizeof own_maps / sizeof *own_maps)) {
        fprintf(stderr, "model: --own-vmm: too many mappings\n");
        exit(1);
    }
    if (own_vmm_pool_mib > 0)
        return vpool_alloc(bytes, &prop, g);
    size_t size = (bytes + g - 1) / g * g;
    int fd = -1;
    if (vm.reserve(&va, size, 0, 0, 0) != CUDA_SUCCESS || vm.create(&h, size, &prop, 0) != CUDA_SUCCESS ||
        (own_vmm_export && !own_vmm_export_late && (vm.export_fd == NULL ||
                            vm.export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS ||
                            close(fd) != 0)) ||
        vm.map(va, size, 0, h, 0) != CUDA_SUCCESS || vm.access(va, size, &ad, 1) != CUDA_SUCCESS) {
        fprintf(stderr, "model: --own-vmm: mapping %zu bytes failed\n", size);
        exit(1);
    }
    own_maps[n_own_maps++] = (struct own_map){ (void *)(uintptr_t)va, size, h };
    return (void *)(uintptr_t)va;
}

static void *own_vmm_alloc(size_t bytes)
{
    pthread_mutex_lock(&own_vmm_lock);
    void *p = own_vmm_alloc_locked(bytes);
    pthread_mutex_unlock(&own_vmm_lock);
    return p;
}

/* --second-reuse: two granules carved from the pool at a granule's start, the second
 * written by a copy before the first launch (as a weight loaded is), the first left as
 * it was mapped. */
static void carve_reuse(void)
{
    pthread_mutex_lock(&own_vmm_lock);
    CUmemAllocationProp prop;
    size_t g = own_vmm_prop(&prop);
    vpool.used = (vpool.used + g - 1) / g * g;
    reuse_buf = own_vmm_alloc_locked(2 * g);
    pthread_mutex_unlock(&own_vmm_lock);
    uint32_t *junk = malloc(g);
    if (junk == NULL) {
        fprintf(stderr, "model: --second-reuse: no memory\n");
        exit(1);
    }
    for (size_t i = 0; i < g / sizeof *junk; i++)
        junk[i] = (uint32_t)(i * 2654435761u) | 1;
    CHECK(cudaMemcpy(reuse_buf + g / sizeof *reuse_buf, junk, g, cudaMemcpyHostToDevice));
    free(junk);
}

static int own_vmm_free_locked(void *p)
{
    if (own_vmm_pool_mib > 0)
        return vpool.base != 0 && (CUdeviceptr)(uintptr_t)p >= vpool.base &&
               (CUdeviceptr)(uintptr_t)p < vpool.base + vpool.mapped; /* kept until the end */
    for (int i = 0; i < n_own_maps; i++) {
        if (own_maps[i].p != p)
            continue;
        CUdeviceptr va = (CUdeviceptr)(uintptr_t)p;
        if (vm.unmap(va, own_maps[i].size) != CUDA_SUCCESS || vm.release(own_maps[i].h) != CUDA_SUCCESS ||
            vm.address_free(va, own_maps[i].size) != CUDA_SUCCESS) {
            fprintf(stderr, "model: --own-vmm: unmapping failed\n");
            exit(1);
        }
        own_maps[i] = own_maps[--n_own_maps];
        return 1;
    }
    return 0;
}

static int own_vmm_free(void *p)
{
    pthread_mutex_lock(&own_vmm_lock);
    int mine = own_vmm_free_locked(p);
    pthread_mutex_unlock(&own_vmm_lock);
    return mine;
}

static void weight_malloc(void **dev, size_t bytes)
{
    if (own_vmm) {
        *dev = own_vmm_alloc(bytes);
        return;
    }
    if (!drv_alloc) {
        CHECK(cudaMalloc(dev, bytes));
        return;
    }
    unsigned long long d = 0;
    int rc = drv_mem_alloc(&d, bytes);
    if (rc != 0) {
        fprintf(stderr, "model: cuMemAlloc_v2 of %zu bytes failed (CUresult %d)\n", bytes, rc);
        exit(1);
    }
    *dev = (void *)(uintptr_t)d;
}

/* --segments: a place for bytes in the current segment (a new one when it is full), as
 * a caching allocator puts several tensors in one allocation; NULL when bytes is
 * larger than a segment or there are none. */
static uint32_t *segment_place(size_t bytes)
{
    bytes = (bytes + 511) & ~(size_t)511;
    if (segment_bytes == 0 || bytes > segment_bytes)
        return NULL;
    if (n_segs == 0 || seg_used + bytes > segment_bytes) {
        if (n_segs == (int)(sizeof segs / sizeof segs[0])) {
            fprintf(stderr, "model: too many segments\n");
            exit(1);
        }
        CHECK(cudaMalloc((void **)&segs[n_segs++], segment_bytes));
        seg_used = 0;
    }
    uint32_t *dev = (uint32_t *)(segs[n_segs - 1] + (seg_down ? segment_bytes - seg_used - bytes : seg_used));
    seg_used += bytes;
    seg_end[n_segs - 1] = seg_used;
    return dev;
}

static uint32_t *upload_padded(uint64_t seed, size_t count, uint32_t *host, size_t pad)
{
    for (size_t i = 0; i < count; i++)
        host[i] = (uint32_t)xorshift(&seed);
    uint32_t *dev = segment_place(count * sizeof *dev + pad);
    if (dev == NULL)
        weight_malloc((void **)&dev, count * sizeof *dev + pad);
    if (pad > 0)
        CHECK(cudaMemset((char *)dev + count * sizeof *dev, 0, pad));
    CHECK(cudaMemcpy(dev, host, count * sizeof *dev, cudaMemcpyHostToDevice));
    return dev;
}

/* --init-kernel: count words (and pad zeroed bytes) allocated and written on the device
 * by the fill kernel, right after the allocation. */
/* count words at dev written by the fill kernel from seed, on the legacy stream. */
static void fill_on_device(uint32_t *dev, uint64_t seed, size_t count)
{
    uint32_t s32 = (uint32_t)(seed ^ (seed >> 32));
    int n = (int)count;
    void *args[] = { &dev, &s32, &n };
    dim3 grid = { (unsigned)((count + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
    dim3 block = { MODEL_BLOCK, 1, 1 };
    CHECK(cudaLaunchKernel(model_kernel_fill(), grid, block, args, 0, 0));
}

static uint32_t *init_on_device(uint64_t seed, size_t count, size_t pad)
{
    uint32_t *dev = segment_place(count * sizeof *dev + pad);
    if (dev == NULL)
        CHECK(cudaMalloc((void **)&dev, count * sizeof *dev + pad));
    fill_on_device(dev, seed, count);
    if (pad > 0)
        CHECK(cudaMemset((char *)dev + count * sizeof *dev, 0, pad));
    return dev;
}

static uint32_t *upload_padded_or_init(uint64_t seed, size_t count, uint32_t *host, size_t pad)
{
    return init_kernel ? init_on_device(seed, count, pad) : upload_padded(seed, count, host, pad);
}

static uint32_t *upload(uint64_t seed, size_t count, uint32_t *host)
{
    return upload_padded_or_init(seed, count, host, 0);
}

/* --load-after-launch: kernels before any weight exists, each launched once on buffers
 * freed afterwards (nothing in them repeats, nothing of them is used again). */
static void unrelated_kernels(void)
{
    uint32_t *t1, *t2;
    size_t bytes = (size_t)dim * sizeof *t1;
    CHECK(cudaMalloc((void **)&t1, bytes));
    CHECK(cudaMalloc((void **)&t2, bytes));
    CHECK(cudaMemset(t1, 0, bytes));
    CHECK(cudaMemset(t2, 0, bytes));
    dim3 grid = { (unsigned)((dim + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
    dim3 block = { MODEL_BLOCK, 1, 1 };
    void *mix_args[] = { &t1, &t2, &dim };
    CHECK(cudaLaunchKernel(k_mix, grid, block, mix_args, 0, 0));
    if (minblas_scale(0, t2, t1, dim) != 0) {
        fprintf(stderr, "model: minblas_scale failed\n");
        exit(1);
    }
    void *bump_args[] = { &t1, &(struct model_meta){ (uint32_t)dim, 1, { 0 } } };
    CHECK(cudaLaunchKernel(model_kernel_bump(), grid, block, bump_args, 0, 0));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(t1));
    CHECK(cudaFree(t2));
}

/* --autotune N: the first layer's product N times, as a compiler times a kernel before
 * the program's loop begins. */
static void autotune_kernels(void)
{
    uint32_t *x, *y, *w = model[0].w, *arena = NULL;
    size_t bytes = (size_t)dim * sizeof *x;
    if (autotune_kernels_n == 3) { /* matrix, input and output carved from one scratch arena */
        size_t words = (size_t)dim * dim + 2 * (size_t)dim;
        CHECK(cudaMalloc((void **)&arena, words * sizeof *arena));
        CHECK(cudaMemset(arena, 0, words * sizeof *arena));
        w = arena;
        x = arena + (size_t)dim * dim;
        y = x + dim;
    } else {
        CHECK(cudaMalloc((void **)&x, bytes));
        CHECK(cudaMalloc((void **)&y, bytes));
        CHECK(cudaMemset(x, 0, bytes));
    }
    dim3 grid = { (unsigned)((dim + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
    dim3 block = { MODEL_BLOCK, 1, 1 };
    void *gemv_args[] = { &w, &x, &y, &dim };
    for (int i = 0; i < autotune; i++) {
        if (arena != NULL && i % 2 == 0) /* a new input for each pair timed, as a redzone allocator fills its buffers */
            CHECK(cudaMemsetAsync(x, i & 0xff, bytes, 0));
        CHECK(__cudaLaunchKernel(autotune_kernels_n >= 2 && i % 2 ? k_gemv_wide : k_gemv, grid, block, gemv_args, 0, 0));
    }
    CHECK(cudaDeviceSynchronize());
    if (arena != NULL) {
        CHECK(cudaFree(arena));
    } else {
        CHECK(cudaFree(x));
        CHECK(cudaFree(y));
    }
}

/* --hf-warmup: transformers 5.17 sizes its allocator warm-up as the free memory less
 * 1.2 GiB with no floor, and a negative size fails from_pretrained. */
static void hf_warmup(void)
{
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    long long bytes = (long long)free_b - hf_warmup_mib * 1048576ll;
    if (bytes < 0) {
        fprintf(stderr, "model: --hf-warmup: trying to create a tensor with negative dimension %lld "
                "(free %zu less %ld MiB)\n", bytes, free_b, hf_warmup_mib);
        exit(1);
    }
    size_t want = (size_t)layers * (size_t)dim * (size_t)dim * sizeof(uint32_t);
    if ((size_t)bytes > want)
        bytes = (long long)want;
    if (bytes > 0) {
        void *p = NULL;
        CHECK(cudaMalloc(&p, (size_t)bytes));
        CHECK(cudaFree(p));
    }
}

/* Frees a weight that upload gave, unless it lives in a --segments segment (those go
 * at exit, whole). */
static int pool_owns(const void *p);

static void free_weight(void *p)
{
    if (pool_owns(p))
        return; /* --grow-cache's pool goes at exit, whole */
    for (int i = 0; i < n_segs; i++)
        if ((char *)p >= segs[i] && (char *)p < segs[i] + segment_bytes)
            return;
    if (own_vmm && own_vmm_free(p))
        return;
    if (drv_alloc && p != NULL) {
        int rc = drv_mem_free((unsigned long long)(uintptr_t)p);
        if (rc != 0) {
            fprintf(stderr, "model: cuMemFree_v2 failed (CUresult %d)\n", rc);
            exit(1);
        }
        return;
    }
    CHECK(cudaFree(p));
}

/* --grow-cache: a caching allocator in PyTorch's manner. Blocks are kept in address
 * order over all segments; a block never spans two. */
#define POOL_SEG (2u << 20)
#define POOL_ROUND 512u
#define POOL_BLOCKS 4096
#define KV_PROMPT 8      /* rows of the prompt's K and V */
#define KV_ROW 4096      /* words in a row of K or V (16 KiB) */
typedef struct {
    char *seg;           /* the segment's base */
    size_t off, size;
    int used;
} pblock_t;
static pblock_t pool[POOL_BLOCKS];
static int n_pool;
static char *pool_segs[256];
static int n_pool_segs;

static void pool_insert(int at, pblock_t b)
{
    if (n_pool == POOL_BLOCKS) {
        fprintf(stderr, "model: --grow-cache: too many blocks\n");
        exit(1);
    }
    memmove(&pool[at + 1], &pool[at], (size_t)(n_pool - at) * sizeof *pool);
    pool[at] = b;
    n_pool++;
}

/* The smallest free block that holds n bytes (the lowest address among equals), split;
 * a new segment when none does. */
static void *pool_alloc(size_t n)
{
    n = (n + POOL_ROUND - 1) & ~(size_t)(POOL_ROUND - 1);
    if (n > POOL_SEG) {
        fprintf(stderr, "model: --grow-cache: a block of %zu bytes does not fit a segment\n", n);
        exit(1);
    }
    int best = -1;
    for (int i = 0; i < n_pool; i++)
        if (!pool[i].used && pool[i].size >= n && (best < 0 || pool[i].size < pool[best].size))
            best = i;
    if (best < 0) {
        if (n_pool_segs == (int)(sizeof pool_segs / sizeof pool_segs[0])) {
            fprintf(stderr, "model: --grow-cache: too many segments\n");
            exit(1);
        }
        char *seg;
        CHECK(cudaMalloc((void **)&seg, POOL_SEG));
        pool_segs[n_pool_segs++] = seg;
        best = n_pool;
        pool_insert(best, (pblock_t){ seg, 0, POOL_SEG, 0 });
    }
    pblock_t *b = &pool[best];
    if (b->size > n)
        pool_insert(best + 1, (pblock_t){ b->seg, b->off + n, b->size - n, 0 });
    pool[best].size = n;
    pool[best].used = 1;
    return pool[best].seg + pool[best].off;
}

/* The block at p back to the pool, merged with free neighbours of its segment. Its
 * last user was launched on the one stream, so the next block given out there runs
 * after it, as PyTorch's caching allocator relies on. */
static void pool_free(void *p)
{
    int i = 0;
    while (i < n_pool && pool[i].seg + pool[i].off != (char *)p)
        i++;
    if (i == n_pool || !pool[i].used) {
        fprintf(stderr, "model: --grow-cache: %p is no block\n", p);
        exit(1);
    }
    pool[i].used = 0;
    if (i + 1 < n_pool && !pool[i + 1].used && pool[i + 1].seg == pool[i].seg) {
        pool[i].size += pool[i + 1].size;
        memmove(&pool[i + 1], &pool[i + 2], (size_t)(n_pool - i - 2) * sizeof *pool);
        n_pool--;
    }
    if (i > 0 && !pool[i - 1].used && pool[i - 1].seg == pool[i].seg) {
        pool[i - 1].size += pool[i].size;
        memmove(&pool[i], &pool[i + 1], (size_t)(n_pool - i - 1) * sizeof *pool);
        n_pool--;
    }
}

static int pool_owns(const void *p)
{
    for (int i = 0; i < n_pool_segs; i++)
        if ((const char *)p >= pool_segs[i] && (const char *)p < pool_segs[i] + POOL_SEG)
            return 1;
    return 0;
}

/* count words from the seed, into a new block (a copy, as .to("cuda") makes). */
static uint32_t *pool_upload(uint64_t seed, size_t count, uint32_t *host)
{
    for (size_t i = 0; i < count; i++)
        host[i] = (uint32_t)xorshift(&seed);
    uint32_t *dev = pool_alloc(count * sizeof *dev);
    CHECK(cudaMemcpy(dev, host, count * sizeof *dev, cudaMemcpyHostToDevice));
    return dev;
}

static uint32_t *kv_inputs;  /* --grow-cache: forward t's input at kv_inputs + t * dim */
static uint32_t **kv_k, **kv_v; /* each layer's K and V */
static int kv_len;           /* their rows */

static uint64_t weight_seed; /* --seed */
static const char *hold_path; /* --hold */

/* --hold PATH: PATH.held says the forwards are done; PATH, made by the test, lets the
 * process go on. */
static void hold_until(const char *path)
{
    char held[4096];
    snprintf(held, sizeof held, "%s.held", path);
    FILE *f = fopen(held, "w");
    if (f != NULL)
        fclose(f);
    for (int i = 0; i < 60000 && access(path, F_OK) != 0; i++)
        usleep(10000);
}

/* Every layer's weights, allocated and uploaded through host (n * n words). */
static void upload_layers(uint32_t *host)
{
    size_t n = (size_t)dim;
    for (int l = 0; l < layers; l++) {
        size_t pad = pad_odd && l % 2 == 1 ? 2u << 20 : 0;
        if (l == layers - 1)
            pad += (size_t)(big_last - 1) * n * n * sizeof *model[l].w;
        model[l].w = upload_padded_or_init((0x9e3779b97f4a7c15ull * (uint64_t)(l + 1)) ^ weight_seed, n * n, host, pad);
        uint32_t *(*up)(uint64_t, size_t, uint32_t *) = grow_cache || small_weights ? pool_upload : upload;
        model[l].bias = up(0xd1b54a32d192ed03ull * (uint64_t)(l + 1), n, host);
        model[l].s = up(0x8cb92ba72f3d8dd7ull * (uint64_t)(l + 1), n, host);
        if (ptr_arrays)
            model[l].pv = upload(0x94d049bb133111ebull * (uint64_t)(l + 1), big_tables ? n * n : n, host);
        for (int e = 0; e < moe_experts; e++)
            model[l].ex[e] = upload(0xbf58476d1ce4e5b9ull * (uint64_t)(l + 1) + 0x94d049bb133111ebull * (uint64_t)e,
                                    n * n, host);
    }
}

/* --reload: every layer's weights freed, then a model of the same shape from another
 * seed allocated and uploaded (after the frees, as a program that deletes one model
 * before it loads the next). The caller keeps the other threads between forwards. */
static void reload_weights(void)
{
    for (int l = 0; l < layers; l++) {
        free_weight(model[l].w);
        free_weight(model[l].bias);
        free_weight(model[l].s);
        for (int e = 0; e < moe_experts; e++)
            free_weight(model[l].ex[e]);
    }
    weight_seed = weight_seed * 0x2545f4914f6cdd1dull + 0x5851f42d4c957f2dull;
    uint32_t *host = malloc((size_t)dim * (size_t)dim * sizeof *host);
    if (host == NULL) {
        fprintf(stderr, "model: out of host memory\n");
        exit(1);
    }
    upload_layers(host);
    free(host);
    if (init_kernel) /* the workers' streams may not wait for the legacy stream */
        CHECK(cudaDeviceSynchronize());
}

static void bump(uint32_t *y, struct model_meta m, cudaStream_t stream);

/* --room-from: each layer's room, zeroed (the segment's tail is uninitialised). */
static void find_rooms(void)
{
    size_t want = (((size_t)dim * sizeof(uint32_t) + 511) & ~(size_t)511) * (room_pair ? 2 : 1);
    room_of = calloc((size_t)layers, sizeof *room_of);
    if (room_of == NULL) {
        fprintf(stderr, "model: out of host memory\n");
        exit(1);
    }
    for (int l = 0; l < layers; l++)
        for (int k = 0; k < n_segs; k++)
            if ((char *)model[l].w >= segs[k] && (char *)model[l].w < segs[k] + segment_bytes) {
                /* at the next 2 MiB past the weights, as a caching allocator's block
                 * of its own would start */
                size_t at = (seg_end[k] + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
                if (seg_down) {
                    /* the free room lies below the weights: a block carved from it
                     * that runs over a granule's start into the granule where the
                     * lowest weight starts, half on each side */
                    size_t low = segment_bytes - seg_end[k], g = low & ~(size_t)((2u << 20) - 1);
                    if (g < want / 2 || low - g < want / 2) {
                        fprintf(stderr, "model: --room-from --seg-down: segment %d's lowest weight starts at %zu "
                                        "bytes: no room of %zu bytes on both sides of a granule's start below "
                                        "it\n", k, low, want / 2);
                        exit(1);
                    }
                    at = g - want / 2;
                }
                if (room_low >= 0)
                    at += 2u << 20; /* the higher room first */
                if (at + want > segment_bytes) {
                    fprintf(stderr, "model: --room-from: segment %d has no %zu bytes of room past 2 MiB "
                                    "boundaries after its weights\n", k, want);
                    exit(1);
                }
                room_of[l] = (uint32_t *)(segs[k] + at);
                CHECK(cudaMemset(room_of[l], 0, want));
                if (room_low >= 0)
                    CHECK(cudaMemset(segs[k] + at - (2u << 20), 0, want));
            }
    CHECK(cudaDeviceSynchronize());
}

static void load_weights(void)
{
    size_t n = (size_t)dim;
    uint32_t *host = malloc(n * n * sizeof *host);
    model = calloc((size_t)layers, sizeof *model);
    input = malloc(n * sizeof *input);
    if (host == NULL || model == NULL || input == NULL) {
        fprintf(stderr, "model: out of host memory\n");
        exit(1);
    }
    upload_layers(host);
    for (int i = 0; own_vmm_export_late && i < n_own_maps; i++) {
        int fd = -1;
        if (vm.export_fd == NULL ||
            vm.export_fd(&fd, own_maps[i].h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS ||
            close(fd) != 0) {
            fprintf(stderr, "model: --own-vmm-export-late: exporting mapping %d failed\n", i);
            exit(1);
        }
    }
    if (ptr_arrays) {
        uint32_t **tbl = malloc((size_t)layers * sizeof *tbl);
        for (int l = 0; l < layers; l++)
            tbl[l] = model[l].pv;
        CHECK(cudaMalloc((void **)&ptr_table, (size_t)layers * sizeof *tbl));
        CHECK(cudaMemcpy(ptr_table, tbl, (size_t)layers * sizeof *tbl, cudaMemcpyHostToDevice));
        free(tbl);
    }
    if (shared)
        shared_table = upload(0x2545f4914f6cdd1dull, n * n, host);
    if (init_kernel) /* the workers' streams may not wait for the legacy stream */
        CHECK(cudaDeviceSynchronize());
    if (init_twice) {
        /* layer 0's weight twice more, each time other values (fill is a function of
         * the seed: the output does not depend on the shim) */
        uint64_t seeds[2] = { 0x5851f42d4c957f2dull, 0x2545f4914f6cdd1dull };
        for (int k = 0; k < 2; k++) {
            fill_on_device(model[0].w, seeds[k], n * n);
            CHECK(cudaDeviceSynchronize());
        }
    }
    if (room_from >= 0)
        find_rooms();
    if (init_refill) {
        for (int l = 0; l < layers; l++)
            fill_on_device(model[l].w, 0x9e3779b97f4a7c15ull + (uint64_t)l, n * n);
        CHECK(cudaDeviceSynchronize());
    }
    if (init_other) {
        /* layer 0's weight once more, by another kernel */
        struct model_meta m = { (uint32_t)dim, 1, { 0 } };
        bump(model[0].w, m, 0);
        CHECK(cudaDeviceSynchronize());
    }
    uint64_t seed = 42;
    for (size_t i = 0; i < n; i++)
        input[i] = (uint32_t)xorshift(&seed);
    if (grow_cache) {
        kv_inputs = pool_upload(0x632be59bd9b4e019ull, (size_t)iters * n, host);
        kv_k = calloc((size_t)layers, sizeof *kv_k);
        kv_v = calloc((size_t)layers, sizeof *kv_v);
        if (kv_k == NULL || kv_v == NULL) {
            fprintf(stderr, "model: out of host memory\n");
            exit(1);
        }
    }
    free(host);
}

/* One bump kernel on y with meta m (cudaLaunchKernel). */
static void bump(uint32_t *y, struct model_meta m, cudaStream_t stream)
{
    dim3 grid = { (unsigned)((dim + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
    dim3 block = { MODEL_BLOCK, 1, 1 };
    void *bump_args[] = { &y, &m };
    CHECK(cudaLaunchKernel(model_kernel_bump(), grid, block, bump_args, 0, stream));
}

/* bump's meta, its tail left holding the weight of the layer two thirds in
 * (--stale-new, --far-new). */
static struct model_meta far_weight_meta(size_t off)
{
    struct model_meta meta = { (uint32_t)dim, 1, { 0 } };
    meta.tail[0] = (uint64_t)(uintptr_t)model[layers * 2 / 3].w + off;
    return meta;
}

/* Whether forward it ends with the gather (--gather-from, --gather-until). */
static int gathers(int it)
{
    return gather_from >= 0 && it >= gather_from && (gather_until < 0 || it <= gather_until);
}

/* --gather-from: y += what every layer's bias, scale vector and weight hold in their
 * first dim words, in one launch (cudaLaunchKernel) whose argument holds them all. */
static void gather_layers(uint32_t *y, int run_layers, cudaStream_t stream)
{
    struct model_gather g;
    memset(&g, 0, sizeof g);
    g.len = (uint32_t)dim;
    for (int part = 0; part < 3; part++)
        for (int l = 0; l < run_layers && g.n < MODEL_GATHER_MAX; l++)
            g.src[g.n++] = part == 0 ? model[l].bias : part == 1 ? model[l].s : model[l].w;
    dim3 grid = { (unsigned)((dim + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
    dim3 block = { MODEL_BLOCK, 1, 1 };
    void *gather_args[] = { &y, &g };
    CHECK(cudaLaunchKernel(model_kernel_gather(), grid, block, gather_args, 0, stream));
}

/* --drv-workspace: allocated by the first thread to get here, through the driver as a
 * library allocates (not cudaMalloc: FlexTensor serves that one itself), then cleared
 * in each of that thread's forwards. */
static void use_drv_workspace(cudaStream_t stream)
{
    size_t bytes = (size_t)drv_workspace_mib << 20;
    pthread_mutex_lock(&drv_workspace_lock);
    if (drv_workspace == 0) {
        drv_workspace_mine = 1;
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        int (*mem_alloc)(unsigned long long *, size_t) =
            cuda ? (int (*)(unsigned long long *, size_t))dlsym(cuda, "cuMemAlloc_v2") : NULL;
        if (mem_alloc == NULL || mem_alloc(&drv_workspace, bytes) != 0) {
            fprintf(stderr, "model: cuMemAlloc of the %d MiB workspace failed\n", drv_workspace_mib);
            exit(1);
        }
        if (cuda != NULL)
            dlclose(cuda);
    }
    pthread_mutex_unlock(&drv_workspace_lock);
    if (drv_workspace_mine)
        CHECK(cudaMemsetAsync((void *)(uintptr_t)drv_workspace, 0, bytes, stream));
}

/* --outside-from: 4 MiB mapped through the driver's virtual memory calls, its handle
 * exported first (NCCL's way), which the shim leaves to the program and does not track
 * (the first thread to get there). */
static void allocate_outside(void)
{
    static int done;
    pthread_mutex_lock(&drv_workspace_lock);
    if (!done) {
        done = 1;
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        typedef int (*reserve_fn)(unsigned long long *, size_t, size_t, unsigned long long, unsigned long long);
        typedef int (*create_fn)(unsigned long long *, size_t, const CUmemAllocationProp *, unsigned long long);
        typedef int (*map_fn)(unsigned long long, size_t, size_t, unsigned long long, unsigned long long);
        typedef int (*access_fn)(unsigned long long, size_t, const CUmemAccessDesc *, size_t);
        reserve_fn reserve = cuda ? (reserve_fn)dlsym(cuda, "cuMemAddressReserve") : NULL;
        create_fn create = cuda ? (create_fn)dlsym(cuda, "cuMemCreate") : NULL;
        map_fn map = cuda ? (map_fn)dlsym(cuda, "cuMemMap") : NULL;
        access_fn access = cuda ? (access_fn)dlsym(cuda, "cuMemSetAccess") : NULL;
        typedef int (*export_fn)(void *, unsigned long long, CUmemAllocationHandleType, unsigned long long);
        export_fn export_fd = cuda ? (export_fn)dlsym(cuda, "cuMemExportToShareableHandle") : NULL;
        /* Exported before it is mapped, as NCCL's buffers are: the program's own memory,
         * which FlexTensor leaves to it. */
        CUmemAllocationProp prop = { 0 };
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = device;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        CUmemAccessDesc acc = { prop.location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        unsigned long long va = 0, h = 0;
        size_t bytes = 4u << 20;
        int fd = -1;
        if (!reserve || !create || !map || !access || !export_fd || reserve(&va, bytes, 0, 0, 0) != 0 ||
            create(&h, bytes, &prop, 0) != 0 || export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != 0 ||
            close(fd) != 0 || map(va, bytes, 0, h, 0) != 0 || access(va, bytes, &acc, 1) != 0) {
            fprintf(stderr, "model: 4 MiB outside the runtime could not be mapped\n");
            exit(1);
        }
        if (cuda != NULL)
            dlclose(cuda);
    }
    pthread_mutex_unlock(&drv_workspace_lock);
}

/* A range in a domain of its own whose message is a registered string, as NCCL opens.
 * The domain is made once, by whichever thread comes first (pthread_once: threads
 * testing and setting it themselves would race). */
static nvtxDomainHandle_t nvtx_domain;
static nvtxStringHandle_t nvtx_msg;
static pthread_once_t nvtx_once = PTHREAD_ONCE_INIT;

static void nvtx_make_domain(void)
{
    nvtx_domain = nvtxDomainCreateA("model-lib");
    nvtx_msg = nvtxDomainRegisterStringA(nvtx_domain, "registered");
}

static void nvtx_push_registered(void)
{
    pthread_once(&nvtx_once, nvtx_make_domain);
    nvtxEventAttributes_t attr = { 0 };
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attr.message.registered = nvtx_msg;
    nvtxDomainRangePushEx(nvtx_domain, &attr);
}

/* --demote-after-plan: the activation of this forward, (layers / 2 + k) layers' weights
 * large in the k-th forward from over_from on, every byte 0x5a; its last dim words are
 * added into y. Returned for the caller to free at the forward's end. */
static void *grow_activation(cudaStream_t stream, uint32_t *y)
{
    size_t layer = (size_t)dim * dim * sizeof(uint32_t);
    size_t bytes = (size_t)(layers / 2 + cur_iter - over_from) * layer;
    if (bytes < layer)
        bytes = layer;
    uint32_t *act;
    CHECK(cudaMalloc((void **)&act, bytes));
    CHECK(cudaMemsetAsync(act, 0x5a, bytes, stream));
    uint32_t *row = act + bytes / sizeof *act - (size_t)dim;
    dim3 grid = { (unsigned)((dim + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
    dim3 block = { MODEL_BLOCK, 1, 1 };
    void *args[] = { &y, &row, &dim };
    CHECK(cudaLaunchKernel(k_mix, grid, block, args, 0, stream));
    return act;
}

/* --moe: layer l of the forward under way mixes into b the K experts its router picks
 * (distinct, from a generator seeded by the forward and the layer: the same with and
 * without the shim, different from forward to forward), launched in the experts' order. */
static void route_experts(int l, uint32_t *b, const cudaLaunchConfig_t *cfg)
{
    uint64_t seed = 0x2545f4914f6cdd1dull ^ ((uint64_t)cur_iter * 1000003u + (uint64_t)l);
    uint64_t chosen = 0;
    for (int k = 0; k < moe_k; k++) {
        int e;
        do
            e = (int)(xorshift(&seed) % (uint64_t)moe_experts);
        while (chosen & 1ull << e);
        chosen |= 1ull << e;
    }
    /* In the experts' order, as transformers' loop over the experts that got tokens. */
    for (int e = 0; e < moe_experts; e++)
        if (chosen & 1ull << e) {
            void *args[] = { &b, &model[l].ex[e], &dim };
            CHECK(cudaLaunchKernelExC(cfg, k_mix, args));
        }
}

/* --grow-cache: K or V of layer l, *cache (kv_len rows; none in the prompt), re-made
 * with `add` more rows from y: a new block, the old rows copied (cat), the old block
 * freed. */
static void grow_kv(uint32_t **cache, uint32_t *y, int add, cudaStream_t stream)
{
    int row = KV_ROW, len = kv_len;
    uint32_t *grown = pool_alloc((size_t)(len + add) * (size_t)row * sizeof *grown);
    uint32_t *old = *cache;
    size_t words = (size_t)(len + add) * (size_t)row;
    dim3 grid = { (unsigned)((words + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
    dim3 block = { MODEL_BLOCK, 1, 1 };
    void *args[] = { &grown, &old, &y, &len, &add, &row, &dim };
    CHECK(cudaLaunchKernel(model_kernel_cat(), grid, block, args, 0, stream));
    if (old != NULL)
        pool_free(old);
    *cache = grown;
}

/* --grow-cache: one decode step (the prompt when cur_iter is 0). */
static void forward_cached(cudaStream_t stream, uint32_t *out)
{
    dim3 grid = { (unsigned)((dim + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
    dim3 block = { MODEL_BLOCK, 1, 1 };
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = stream;
    int add = cur_iter == 0 ? KV_PROMPT : 1, row = KV_ROW;
    uint32_t *x = kv_inputs + (size_t)cur_iter * (size_t)dim;
    if (mark && iteration_mark != NULL)
        iteration_mark();
    if (nvtx)
        nvtxRangePushA("forward");
    for (int l = 0; l < layers; l++) {
        if (nvtx) {
            char name[32];
            snprintf(name, sizeof name, "layers.%d", l);
            nvtxRangePushA(name);
        }
        uint32_t *y = pool_alloc((size_t)dim * sizeof *y);
        void *gemv_args[] = { &model[l].w, &x, &y, &dim };
        CHECK(__cudaLaunchKernel(k_gemv, grid, block, gemv_args, 0, stream));
        if (l > 0)
            pool_free(x);
        void *mix_args[] = { &y, &model[l].bias, &dim };
        CHECK(cudaLaunchKernelExC(&cfg, k_mix, mix_args));
        grow_kv(&kv_k[l], y, add, stream);
        int rc = minblas_scale(stream, y, model[l].s, dim);
        if (rc != 0) {
            fprintf(stderr, "model: minblas_scale failed: %d\n", rc);
            exit(1);
        }
        grow_kv(&kv_v[l], y, add, stream);
        int len = kv_len + add;
        void *attend_args[] = { &y, &kv_k[l], &kv_v[l], &len, &row, &dim };
        CHECK(cudaLaunchKernelExC(&cfg, model_kernel_attend(), attend_args));
        x = y;
        if (nvtx)
            nvtxRangePop();
    }
    kv_len += add;
    if (nvtx)
        nvtxRangePop();
    CHECK(cudaMemcpyAsync(out, x, (size_t)dim * sizeof *out, cudaMemcpyDeviceToHost, stream));
    pool_free(x);
}

/* The layers this forward runs: --skip-last-from leaves the last one out. */
static int layers_run(void)
{
    return skip_from >= 0 && cur_iter >= skip_from ? layers - 1 : layers;
}

/* A layer's launches as a forward makes them, with the same grid on its stream. */
static cudaLaunchConfig_t layer_config(cudaStream_t stream)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = (dim3){ (unsigned)((dim + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
    cfg.blockDim = (dim3){ MODEL_BLOCK, 1, 1 };
    cfg.stream = stream;
    return cfg;
}

static void nvtx_layer_push(int l)
{
    char name[32];
    snprintf(name, sizeof name, "layers.%d", l);
    nvtxRangePushA(name);
    nvtx_push_registered();
}

static void nvtx_layer_pop(void)
{
    nvtxDomainRangePop(nvtx_domain);
    nvtxRangePop();
}

/* --func-wide: gemv_wide's CUfunction and the driver's launch, through which the
 * prefill passes launch it (XLA launches its kernels so). */
typedef CUresult (*drv_launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void **, void **);
static drv_launch_fn drv_launch;
static CUfunction f_gemv_wide;
static void drv_check(CUresult r, const char *what);

/* Layer l's first part, from its input a into b: the matrix product (gemv), then the
 * bias (mix), with what options launch between them. --graph-nodes makes the last
 * layer's gemv and mix nodes of their own instead, --graph-nodes-into the first
 * layer's (forward_nodes). */
static void layer_head(int l, const cudaLaunchConfig_t *cfg, uint32_t *a, uint32_t *b)
{
    cudaStream_t stream = cfg->stream;
    dim3 grid = cfg->gridDim, block = cfg->blockDim;
    /* --start-room: layer 0's product lands in the zeroed room past a far layer's
     * weight (--pad-odd), then is copied to b */
    uint32_t *gout = b;
    if (start_room >= 0 && l == 0 && cur_iter >= start_room)
        gout = model[(layers / 2) | 1].w + (size_t)dim * (size_t)dim;
    void *gemv_args[] = { &model[l].w, &a, &gout, &dim };
    if (prefill_pass() && func_wide)
        drv_check(drv_launch(f_gemv_wide, grid.x, grid.y, grid.z, block.x, block.y, block.z, 0, (CUstream)stream,
                             gemv_args, NULL),
                  "cuLaunchKernel");
    else
        CHECK(__cudaLaunchKernel(prefill_pass() && !prefill_gemv ? k_gemv_wide : k_gemv, grid, block, gemv_args, 0,
                                 stream));
    if (gout != b)
        CHECK(cudaMemcpyAsync(b, gout, (size_t)dim * sizeof *b, cudaMemcpyDeviceToDevice, stream));
    /* Once a forward, early, a kernel discovery never saw whose unused tail holds a
     * far layer's weight (generate's reduce kernel on the GPU did this). */
    if (l == 0 && far_new >= 0 && cur_iter >= far_new)
        bump(b, far_weight_meta(0), stream);
    if (cross_from >= 0 && cur_iter >= cross_from) {
        /* b = w . (the first row of a far layer's weight): one launch reads two
         * layers' weights, the second never seen with it in discovery. */
        uint32_t *far = model[(l + layers / 2) % layers].w;
        void *cross_args[] = { &model[l].w, &far, &b, &dim };
        CHECK(__cudaLaunchKernel(k_gemv, grid, block, cross_args, 0, stream));
    }

    void *mix_args[] = { &b, &model[l].bias, &dim };
    if (bypass_from >= 0 && cur_iter >= bypass_from) {
        if (model_launch_uninterposed(k_mix, grid.x, block.x, mix_args, stream) != 0) {
            fprintf(stderr, "model: --bypass-from: no uninterposed launch on this device\n");
            exit(1);
        }
    } else {
        CHECK(cudaLaunchKernelExC(cfg, alt_odd && l % 2 == 1 ? k_mix_alt : k_mix, mix_args));
    }

    if (moe_experts > 0)
        route_experts(l, b, cfg);
}

/* The rest of layer l (a its input, b its output): the scale, then what options add.
 * Buffers it allocates for the forward are left in *scratch_buf and *over_buf. */
static void layer_tail(int l, const cudaLaunchConfig_t *cfg, uint32_t *a, uint32_t *b, void **scratch_buf,
                       void **over_buf)
{
    cudaStream_t stream = cfg->stream;
    dim3 grid = cfg->gridDim, block = cfg->blockDim;
    int rc = minblas_scale(stream, b, shared ? shared_table : model[l].s, dim);
    if (rc != 0) {
        fprintf(stderr, "model: minblas_scale failed: %d\n", rc);
        exit(1);
    }
    if (ptr_arrays) {
        uint32_t **entry = ptr_table + l;
        void *mixp_args[] = { &b, &entry, &dim };
        if (static_launch != NULL)
            CHECK(static_launch(model_kernel_mixp(), grid, block, mixp_args, 0, stream));
        else
            CHECK(cudaLaunchKernel(model_kernel_mixp(), grid, block, mixp_args, 0, stream));
    }
    if (stale_from >= 0) {
        /* From forward stale_from on, every layer leaves a far layer's weight in the
         * tail, where discovery saw no garbage: even layers in a word that held NULL
         * before (as PyTorch's cat metadata on the GPU), odd ones in a word that
         * held the activation's address. */
        struct model_meta meta = { (uint32_t)dim, 1, { 0 } };
        uint64_t far = (uint64_t)(uintptr_t)model[(l + layers / 2) % layers].w;
        if (l % 2 == 0)
            meta.tail[0] = cur_iter >= stale_from ? far : 0;
        else
            meta.tail[1] = cur_iter >= stale_from ? far : (uint64_t)(uintptr_t)a;
        bump(b, meta, stream);
    }
    if (stale_new >= 0 && cur_iter >= stale_new)
        bump(b, far_weight_meta(stale_off), stream);
    if (stale_graph) {
        struct model_meta meta = { (uint32_t)dim, 1, { 0 } };
        meta.tail[0] = in_capture ? (uint64_t)(uintptr_t)model[1 % layers].w + 4096 : (uint64_t)(l * 7 + 1);
        bump(b, meta, stream);
    }
    if (stale_rope) {
        struct model_meta meta = { (uint32_t)dim, 1, { 0 } };
        meta.tail[0] = (uint64_t)(uintptr_t)model[1 % layers].w + (uint64_t)dim * (uint64_t)dim * 2 + 3;
        for (int k = 0; k < 3; k++) /* on other activations, as q and k */
            bump(k == 1 ? rope_buf : b, meta, stream);
    }
    if (stale) {
        /* Even layers leave a far layer's weight in the tail, odd ones a host address:
         * the word is garbage to the kernel either way. */
        struct model_meta meta = { (uint32_t)dim, 1, { 0 } };
        meta.tail[0] = l % 2 == 0 ? (uint64_t)(uintptr_t)model[(l + layers / 2) % layers].w
                                  : (uint64_t)(uintptr_t)&meta;
        for (int k = 1; k < 6; k++)
            meta.tail[k] = (uint64_t)(l * 6 + k);
        bump(b, meta, stream);
    }
    if (room_low >= 0 && cur_iter == room_low && l == 0)
        for (int m = 0; m < layers; m++)
            if (room_of[m] != NULL) {
                /* the room moves down 2 MiB, as a caching allocator hands out
                 * the lower block next (zeroed with the higher one) */
                room_of[m] -= (2u << 20) / sizeof *room_of[m];
            }
    if (room_from >= 0 && (cur_iter >= room_from || (room_first && cur_iter == 0)) && room_of[l] != NULL) {
        if (room_pair) {
            /* a far layer's: room2 = mix(room2, room), then room = mix(room, room2) */
            int m = (l + layers / 2) % layers;
            uint32_t *room2 = room_of[m] + (((size_t)dim * sizeof(uint32_t) + 511) & ~(size_t)511) / 4;
            void *to2[] = { &room2, &room_of[m], &dim };
            CHECK(cudaLaunchKernelExC(cfg, k_mix, to2));
            void *from2[] = { &room_of[m], &room2, &dim };
            CHECK(cudaLaunchKernelExC(cfg, k_mix, from2));
        }
        /* room = mix(room, b), then b = mix(b, room) */
        void *in_args[] = { &room_of[l], &b, &dim };
        CHECK(cudaLaunchKernelExC(cfg, k_mix, in_args));
        void *out_args[] = { &b, &room_of[l], &dim };
        CHECK(cudaLaunchKernelExC(cfg, k_mix, out_args));
    }
    if (drv_workspace_mib > 0 && l == layers / 2)
        use_drv_workspace(stream);
    if (outside_from >= 0 && cur_iter >= outside_from && l == 0)
        allocate_outside();
    if (scratch_from >= 0 && cur_iter >= scratch_from && l == layers / 2) {
        CHECK(cudaMalloc(scratch_buf, 2u << 20));
        CHECK(cudaMemsetAsync(*scratch_buf, 0, 2u << 20, stream));
    }
    if (pool_late >= 0 && cur_iter >= pool_late && l == layers / 2) {
        uint32_t *late = own_vmm_alloc(2u << 20);
        CHECK(cudaMemsetAsync(late, 0, 2u << 20, stream));
        void *in_args[] = { &late, &b, &dim };
        CHECK(cudaLaunchKernelExC(cfg, k_mix, in_args));
        void *out_args[] = { &b, &late, &dim };
        CHECK(cudaLaunchKernelExC(cfg, k_mix, out_args));
    }
    if (over_from >= 0 && cur_iter >= over_from && l == layers / 2)
        *over_buf = grow_activation(stream, b);
    if (prologue) {
        /* warm += a: its content changes every pass, as activations do */
        void *warm_args[] = { &warm_mine, &a, &dim };
        CHECK(cudaLaunchKernelExC(cfg, k_mix, warm_args));
    }
    if (extra_kernels)
        bump(b, (struct model_meta){ (uint32_t)dim, 1, { 0 } }, stream);
    if (l >= layers_run() - tail_layers)
        bump(b, (struct model_meta){ (uint32_t)dim, 1, { 0 } }, stream);
    for (int k = 0; k < (prefill_pass() ? act_kernels / 2 : act_kernels); k++) {
        uint32_t *y = act_pool + k;
        int n = dim - act_kernels;
        void *act_args[] = { &y, &b, &n };
        CHECK(cudaLaunchKernel(k == 0 && act_twin >= 0 && cur_iter >= act_twin ? k_mix_alt : k_mix, grid,
                               block, act_args, 0, stream));
    }
}

static void forward(cudaStream_t stream, uint32_t *a, uint32_t *b, uint32_t *out)
{
    void *scratch_buf = NULL, *over_buf = NULL;
    cudaLaunchConfig_t cfg = layer_config(stream);
    dim3 block = cfg.blockDim;
    if (mark && iteration_mark != NULL)
        iteration_mark();
    if (side_device >= 0 && cur_iter >= side_from) {
        int side_n = 256;
        void *side_args[] = { &side_buf, &side_buf, &side_n };
        dim3 one = { 1, 1, 1 };
        CHECK(cudaSetDevice(side_device));
        if (side_buf == NULL) {
            CHECK(cudaMalloc((void **)&side_buf, 256 * sizeof *side_buf));
            CHECK(cudaMemset(side_buf, 0, 256 * sizeof *side_buf));
        }
        CHECK(cudaLaunchKernel(k_mix, one, block, side_args, 0, 0));
        CHECK(cudaMemcpyAsync(side_buf, model[0].w, 256 * sizeof *side_buf, cudaMemcpyDeviceToDevice, 0));
        CHECK(cudaSetDevice(device));
    }
    if (nvtx)
        nvtxRangePushA("forward");
    CHECK(cudaMemcpyAsync(a, input, (size_t)dim * sizeof *a, cudaMemcpyHostToDevice, stream));
    int run_layers = layers_run();
    for (int l = 0; l < run_layers; l++) {
        if (nvtx)
            nvtx_layer_push(l);
        if (ptr_query)
            query_pointer(model[l].w);
        layer_head(l, &cfg, a, b);
        layer_tail(l, &cfg, a, b, &scratch_buf, &over_buf);
        uint32_t *t = a;
        a = b;
        b = t;
        if (nvtx)
            nvtx_layer_pop();
    }
    if (nvtx)
        nvtxRangePop();
    if (gathers(cur_iter))
        gather_layers(a, run_layers, stream);
    CHECK(cudaMemcpyAsync(out, a, (size_t)dim * sizeof *out, cudaMemcpyDeviceToHost, stream));
    if (scratch_buf != NULL)
        CHECK(cudaFree(scratch_buf));
    if (over_buf != NULL)
        CHECK(cudaFree(over_buf));
}

static void zero_first_row(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int (*memset_d32)(unsigned long long, unsigned int, size_t) =
        cuda ? (int (*)(unsigned long long, unsigned int, size_t))dlsym(cuda, "cuMemsetD32_v2") : NULL;
    if (memset_d32 == NULL || memset_d32((unsigned long long)(uintptr_t)model[layers / 2].w, 0, (size_t)dim) != 0) {
        fprintf(stderr, "model: cuMemsetD32 on layer %d failed\n", layers / 2);
        exit(1);
    }
    dlclose(cuda);
}

/* On stderr: the output compared with a run without FlexTensor stays on stdout. */
static void print_usage(int it)
{
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    fprintf(stderr, "meminfo after %d: free %zu total %zu\n", it, free_b, total_b);
    /* The driver's view, resolved as a library resolves it (dlsym on libcuda). */
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int (*cu_mem_get_info)(size_t *, size_t *) =
        cuda ? (int (*)(size_t *, size_t *))dlsym(cuda, "cuMemGetInfo_v2") : NULL;
    if (cu_mem_get_info != NULL && cu_mem_get_info(&free_b, &total_b) == 0)
        fprintf(stderr, "cumeminfo after %d: free %zu total %zu\n", it, free_b, total_b);
    if (cuda != NULL)
        dlclose(cuda);
    ft_gpu_memory_usage_t u;
    int rc = get_usage == NULL ? -1 : get_usage(&u);
    if (rc < 0) {
        fprintf(stderr, "usage after %d: unavailable\n", it);
        return;
    }
    fprintf(stderr, "usage after %d: total %llu resident %llu slots %llu other %llu unmapped %llu "
            "budget %llu%s\n", it, u.total_bytes, u.resident_bytes, u.slots_bytes, u.other_bytes,
            u.unmapped_bytes, u.budget_bytes, rc == 1 ? " (before the plan)" : "");
}

static int controls_after(int it)
{
    for (int i = 0; i < n_controls; i++)
        if (controls[i].after == it)
            return 1;
    return 0;
}

/* --control's calls after forward it, then the library's hook. On stderr: stdout is
 * compared with a run without FlexTensor, where each call is a no-op. */
static void run_controls(int it)
{
    for (int i = 0; i < n_controls; i++) {
        const struct control *c = &controls[i];
        if (c->after != it)
            continue;
        void *f = dlsym(RTLD_DEFAULT, strcmp(c->action, "limit") == 0    ? "ft_set_gpu_mem_limit"
                                      : strcmp(c->action, "replan") == 0 ? "ft_request_replan"
                                      : strcmp(c->action, "resume") == 0 ? "ft_resume"
                                                                          : "ft_release");
        int rc = -1;
        if (f != NULL && strcmp(c->action, "limit") == 0)
            rc = ((int (*)(unsigned long long))f)(c->bytes);
        else if (f != NULL && strncmp(c->action, "release", 7) == 0)
            rc = ((int (*)(int))f)(strcmp(c->action, "release0") != 0);
        else if (f != NULL)
            rc = ((int (*)(void))f)();
        fprintf(stderr, "control after %d: %s -> %d\n", it, c->action, rc);
        ft_gpu_memory_usage_t u;
        int got = get_usage == NULL ? -1 : get_usage(&u);
        if (got >= 0)
            fprintf(stderr, "usage after control %d: total %llu resident %llu slots %llu other %llu unmapped %llu "
                    "budget %llu\n", it, u.total_bytes, u.resident_bytes, u.slots_bytes, u.other_bytes,
                    u.unmapped_bytes, u.budget_bytes);
    }
    if (after_forward_hook != NULL)
        after_forward_hook(it);
}

/* --control's list: N:ACTION entries, comma-separated. */
static void parse_controls(const char *v)
{
    char *copy = strdup(v != NULL ? v : ""), *save = NULL;
    for (char *e = strtok_r(copy, ",", &save); e != NULL; e = strtok_r(NULL, ",", &save)) {
        struct control *c = &controls[n_controls];
        char *colon = strchr(e, ':'), *end = NULL;
        const char *act = colon != NULL ? colon + 1 : "";
        c->after = colon != NULL ? (int)strtol(e, &end, 10) : -1;
        if (n_controls == MODEL_MAX_CONTROLS || end != colon || c->after < 0) {
            fprintf(stderr, "model: --control wants N:ACTION entries (got %s)\n", e);
            exit(2);
        }
        if (strncmp(act, "limit=", 6) == 0) {
            c->bytes = strtoull(act + 6, &end, 10);
            int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
            c->bytes <<= shift;
            act = "limit";
        } else if (strcmp(act, "release") != 0 && strcmp(act, "release0") != 0 && strcmp(act, "resume") != 0 &&
                   strcmp(act, "replan") != 0) {
            fprintf(stderr, "model: --control: unknown action %s\n", act);
            exit(2);
        }
        snprintf(c->action, sizeof c->action, "%s", act);
        n_controls++;
    }
    free(copy);
}

/* What a forward computes: 1 with the --vary kernels, 2 with the --cross-from gemvs, 4
 * without its last layer (--skip-last-from), 8 with the --stale-new kernels, 16 with the
 * --far-new kernel, 32 with the --gather-from kernel, 128 after --reload. */
static int forward_kind(int it)
{
    int varied = vary_from >= 0 && it >= vary_from && (it - vary_from) % 2 == 0;
    int crossed = cross_from >= 0 && it >= cross_from;
    int skipped = skip_from >= 0 && it >= skip_from;
    int stale_late = stale_new >= 0 && it >= stale_new;
    int far_late = far_new >= 0 && it >= far_new;
    int gathered = gathers(it);
    int grown = over_from >= 0 && it >= over_from;
    int routed = moe_experts > 0 ? it + 1 : 0; /* --moe: every forward routes its own way */
    int reloaded = reload_after >= 0 && it > reload_after;
    int late = pool_late >= 0 && it >= pool_late;
    return varied | crossed << 1 | skipped << 2 | stale_late << 3 | far_late << 4 | gathered << 5 | grown << 6 |
           reloaded << 7 | late << 8 | routed << 9;
}

/* Whether worker 0 writes weights from the host after forward it (--zero, --peek,
 * --rewrite, --poke). */
static int writes_weights_after(int it)
{
    return it == zero_after || it == peek_after || (rewrite_from >= 0 && it >= rewrite_from) ||
           it == poke_after || it == refill_after;
}

/* Worker 0's writes after forward it, in this order, through the legacy stream. */
static void write_weights(int it)
{
    if (it == zero_after)
        zero_first_row();
    if (it == peek_after) {
        uint32_t *row = malloc((size_t)dim * sizeof *row);
        if (row == NULL)
            exit(1);
        CHECK(cudaMemcpy(row, model[layers / 2].w, (size_t)dim * sizeof *row, cudaMemcpyDeviceToHost));
        printf("peek %016" PRIx64 "\n", fnv1a(row, (size_t)dim * sizeof *row));
        row[0] ^= 0x01234567u;
        CHECK(cudaMemcpy(model[layers / 2].w, row, sizeof *row, cudaMemcpyHostToDevice));
        free(row);
    }
    if (rewrite_from >= 0 && it >= rewrite_from) {
        uint32_t v = 0x5bd1e995u * (uint32_t)(it + 1);
        CHECK(cudaMemcpy(model[0].w + 1, &v, sizeof v, cudaMemcpyHostToDevice));
    }
    if (it == refill_after) {
        char *from = (char *)(model[layers / 2].w + (size_t)dim * dim / 2);
        char *to = (char *)(model[layers / 2 + 1].w + (size_t)dim * dim / 2);
        size_t n = (size_t)(to - from);
        char *h = malloc(n);
        if (h == NULL)
            exit(1);
        CHECK(cudaMemcpy(h, from, n, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(from, h, n, cudaMemcpyHostToDevice));
        free(h);
    }
    if (it == poke_after) {
        uint32_t v = 0xdeadbeefu;
        CHECK(cudaMemcpy(model[0].w, &v, sizeof v, cudaMemcpyHostToDevice));
    }
    /* cuMemsetD32 does not block the host, nor need a copy from pageable memory wait
     * for its bytes to land, and the threads' non-blocking streams do not wait for the
     * legacy stream: without this the next forwards could read the words as they
     * change. The legacy stream and the blocking streams (one thread, or
     * --per-thread-stream) are ordered after these writes already. */
    if (threads > 1 && !per_thread_stream)
        CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

/* --graph: one forward captured on a stream of its own, then replayed. Nothing in the
 * capture synchronises: the host reads `out` after each replay's stream sync. */
static void capture_forward(cudaStream_t gs, cudaGraph_t *graph, uint32_t *a, uint32_t *b, uint32_t *out,
                            void *workspace, void *pool_buf, size_t ws_bytes)
{
    CHECK(cudaStreamBeginCapture(gs, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemsetAsync(workspace, 0, ws_bytes, gs));
    CHECK(cudaMemsetAsync(pool_buf, 0, ws_bytes, gs));
    in_capture = 1;
    forward(gs, a, b, out);
    in_capture = 0;
    CHECK(cudaStreamEndCapture(gs, graph));
}

static void run_graph(uint32_t *a, uint32_t *b, uint32_t *out, void *workspace, size_t ws_bytes)
{
    cudaStream_t gs;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    uint32_t *saved = input, *pinned;
    CHECK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
    CHECK(cudaMallocHost((void **)&pinned, (size_t)dim * sizeof *pinned));
    memcpy(pinned, input, (size_t)dim * sizeof *pinned);
    input = pinned;
    cur_iter = iters;
    /* --graph-old-update: cuGraphExecUpdate asked of the driver in its CUDA 11 form, as
     * a library built for CUDA 11 does (not called). */
    if (graph_old_update) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
        CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
            cuda != NULL ? (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))
                               dlsym(cuda, "cuGetProcAddress_v2")
                         : NULL;
        void *fn = NULL;
        if (gpa == NULL || gpa("cuGraphExecUpdate", &fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS ||
            fn == NULL) {
            fprintf(stderr, "model: cuGraphExecUpdate not found\n");
            exit(1);
        }
    }
    CHECK(cudaStreamBeginCapture(gs, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemsetAsync(workspace, 0, ws_bytes, gs));
    /* A buffer allocated during the capture, as PyTorch's graph pool does (cudaMalloc
     * with the thread's capture mode relaxed), cleared by the captured forward. */
    void *pool_buf;
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK(cudaMalloc(&pool_buf, ws_bytes));
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK(cudaMemsetAsync(pool_buf, 0, ws_bytes, gs));
    in_capture = 1;
    forward(gs, a, b, out);
    in_capture = 0;
    CHECK(cudaStreamEndCapture(gs, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    /* The graph goes once instantiated, as torch.cuda.graph's does (--graph-toggle
     * names its nodes: kept to the end). */
    if (!graph_toggle)
        CHECK(cudaGraphDestroy(graph));
    for (int r = 0; r < graph_replays; r++) {
        CHECK(cudaGraphLaunch(exec, gs));
        CHECK(cudaStreamSynchronize(gs));
        CHECK(cudaGetLastError());
        printf("graph replay %d checksum %016" PRIx64 "\n", r, fnv1a(out, (size_t)dim * sizeof *out));
        if (graph_eager) {
            forward(gs, a, b, out);
            CHECK(cudaStreamSynchronize(gs));
            CHECK(cudaGetLastError());
            printf("graph eager %d checksum %016" PRIx64 "\n", r, fnv1a(out, (size_t)dim * sizeof *out));
        }
        /* --graph-update: the forward captured again, the executable graph updated
         * from it (cudaGraphExecUpdate) after the first replay. */
        if (r == 0 && graph_update) {
            cudaGraph_t again;
            cudaGraphExecUpdateResultInfo info;
            capture_forward(gs, &again, a, b, out, workspace, pool_buf, ws_bytes);
            CHECK(cudaGraphExecUpdate(exec, again, &info));
            CHECK(cudaGraphDestroy(again));
        }
        /* --graph-toggle: the graph's last node turned off and on again in the
         * executable graph (cudaGraphNodeSetEnabled): the same work, changed node by
         * node after the instantiation. */
        if (r == 0 && graph_toggle) {
            cudaGraphNode_t nodes[4096];
            size_t n = sizeof nodes / sizeof nodes[0];
            CHECK(cudaGraphGetNodes(graph, nodes, &n));
            CHECK(cudaGraphNodeSetEnabled(exec, nodes[n - 1], 0));
            CHECK(cudaGraphNodeSetEnabled(exec, nodes[n - 1], 1));
        }
    }
    CHECK(cudaGraphExecDestroy(exec));
    if (graph_toggle)
        CHECK(cudaGraphDestroy(graph));
    CHECK(cudaFree(pool_buf));
    CHECK(cudaStreamDestroy(gs));
    input = saved;
    CHECK(cudaFreeHost(pinned));
}

/* --graph-nodes: the nodes of the forward that forward_nodes builds, kept to update
 * them. */
typedef struct {
    cudaGraphNode_t in, out;    /* the input's copy to the device, the output's back */
    cudaGraphNode_t *layer;     /* layer l's child graph; the last layer's: its tail's
                                 * (--graph-nodes-into: none) */
    cudaGraphNode_t gemv, mix;  /* the last layer's kernel nodes (--graph-nodes-into: the
                                 * first layer's) */
    cudaGraphNode_t gather;     /* --gather-from's child graph */
} forward_nodes_t;

typedef CUresult (*add_kernel_node_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                       const CUDA_KERNEL_NODE_PARAMS *);
typedef CUresult (*exec_kernel_params_fn)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
typedef CUresult (*add_node_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                                CUgraphNodeParams *);
typedef CUresult (*add_node_old_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);
static add_kernel_node_fn drv_add_kernel_node;
static add_node_fn drv_add_node; /* --graph-nodes-generic */
static add_node_old_fn drv_add_node_old; /* --graph-nodes-generic-old */
static exec_kernel_params_fn drv_exec_kernel_params;

static void drv_check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "model: %s failed: %d\n", what, (int)r);
        exit(1);
    }
}

/* What a traced child graph holds: layer l whole, its tail, or --gather-from's gather. */
enum traced { TRACE_LAYER, TRACE_TAIL, TRACE_GATHER };

/* Part of the forward captured into graph on gs (cudaStreamBeginCaptureToGraph,
 * thread-local), after *last when last is not NULL, as XLA traces what it does not make
 * nodes of itself; *last then becomes the last node captured, as
 * cudaStreamGetCaptureInfo tells it before the capture ends. */
static void trace_to(cudaGraph_t graph, cudaGraphNode_t *last, cudaStream_t gs, enum traced part, int l,
                     uint32_t *a, uint32_t *b)
{
    cudaGraph_t got;
    cudaLaunchConfig_t cfg = layer_config(gs);
    void *scratch_buf = NULL, *over_buf = NULL; /* left NULL: --graph-nodes refuses the options that set them */
    CHECK(cudaStreamBeginCaptureToGraph(gs, graph, last, NULL, last != NULL ? 1 : 0,
                                        cudaStreamCaptureModeThreadLocal));
    in_capture = 1;
    if (part == TRACE_LAYER)
        layer_head(l, &cfg, a, b);
    if (part == TRACE_GATHER)
        gather_layers(a, layers_run(), gs);
    else
        layer_tail(l, &cfg, a, b, &scratch_buf, &over_buf);
    in_capture = 0;
    if (last != NULL) {
        enum cudaStreamCaptureStatus st;
        const cudaGraphNode_t *deps = NULL;
        size_t ndeps = 0;
        CHECK(cudaStreamGetCaptureInfo(gs, &st, NULL, NULL, &deps, NULL, &ndeps));
        if (ndeps != 1) {
            fprintf(stderr, "model: the capture into the graph ends on %zu nodes, not one\n", ndeps);
            exit(1);
        }
        *last = deps[0];
    }
    CHECK(cudaStreamEndCapture(gs, &got));
    if (got != graph) {
        fprintf(stderr, "model: cudaStreamEndCapture gave another graph than the one captured into\n");
        exit(1);
    }
}

/* Part of the forward traced into a child graph of its own. */
static cudaGraph_t trace(cudaStream_t gs, enum traced part, int l, uint32_t *a, uint32_t *b)
{
    cudaGraph_t child;
    CHECK(cudaGraphCreate(&child, 0));
    trace_to(child, NULL, gs, part, l, a, b);
    return child;
}

/* The child graph node *node of graph after *last, holding child; or, updating x, that
 * node of x set to child. Either way CUDA copied the child, which goes. */
static void put_child(cudaGraph_t graph, cudaGraphExec_t x, cudaGraphNode_t *node, cudaGraphNode_t *last,
                      cudaGraph_t child)
{
    if (x != NULL)
        CHECK(cudaGraphExecChildGraphNodeSetParams(x, *node, child));
    else
        CHECK(cudaGraphAddChildGraphNode(node, graph, last, 1, child));
    *last = *node;
    CHECK(cudaGraphDestroy(child));
}

/* Layer l's gemv and mix as kernel nodes of graph after *last (fn->gemv, fn->mix), or,
 * with x, those nodes of x set: the gemv through the driver, as XLA adds its kernels;
 * the mix through the runtime; both take their arguments' values now. *last becomes the
 * mix. */
static void kernel_nodes(cudaGraph_t graph, cudaGraphExec_t x, forward_nodes_t *fn, cudaGraphNode_t *last,
                         cudaStream_t gs, int l, uint32_t *a, uint32_t *b)
{
    cudaLaunchConfig_t cfg = layer_config(gs);
    /* --graph-nodes-swap: the update gives the gemv the weight of the layer halfway. */
    int wl = x != NULL && graph_nodes_swap ? l / 2 : l;
    void *gemv_args[] = { &model[wl].w, &a, &b, &dim };
    CUDA_KERNEL_NODE_PARAMS gemv;
    memset(&gemv, 0, sizeof gemv);
    gemv.kern = (CUkernel)(prefill_pass() ? k_gemv_wide : k_gemv);
    if (prefill_pass() && func_wide) { /* --func-wide: its CUfunction, as XLA's nodes name theirs */
        gemv.func = f_gemv_wide;
        gemv.kern = NULL;
    }
    gemv.gridDimX = cfg.gridDim.x;
    gemv.blockDimX = cfg.blockDim.x;
    gemv.gridDimY = gemv.gridDimZ = gemv.blockDimY = gemv.blockDimZ = 1;
    gemv.kernelParams = gemv_args;
    void *mix_args[] = { &b, &model[l].bias, &dim };
    struct cudaKernelNodeParams mix = { (void *)(alt_odd && l % 2 == 1 ? k_mix_alt : k_mix), cfg.gridDim,
                                        cfg.blockDim, 0, mix_args, NULL };
    if (x != NULL) {
        drv_check(drv_exec_kernel_params(x, fn->gemv, &gemv), "cuGraphExecKernelNodeSetParams");
        CHECK(cudaGraphExecKernelNodeSetParams(x, fn->mix, &mix));
    } else if (graph_nodes_generic) {
        CUgraphNodeParams np;
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_KERNEL;
        np.kernel.kern = gemv.kern;
        np.kernel.gridDimX = gemv.gridDimX;
        np.kernel.gridDimY = gemv.gridDimY;
        np.kernel.gridDimZ = gemv.gridDimZ;
        np.kernel.blockDimX = gemv.blockDimX;
        np.kernel.blockDimY = gemv.blockDimY;
        np.kernel.blockDimZ = gemv.blockDimZ;
        np.kernel.kernelParams = gemv.kernelParams;
        if (graph_nodes_generic == 2)
            drv_check(drv_add_node_old(&fn->gemv, graph, last, 1, &np), "cuGraphAddNode");
        else
            drv_check(drv_add_node(&fn->gemv, graph, last, NULL, 1, &np), "cuGraphAddNode");
        CHECK(cudaGraphAddKernelNode(&fn->mix, graph, &fn->gemv, 1, &mix));
    } else {
        drv_check(drv_add_kernel_node(&fn->gemv, graph, last, 1, &gemv), "cuGraphAddKernelNode");
        CHECK(cudaGraphAddKernelNode(&fn->mix, graph, &fn->gemv, 1, &mix));
    }
    *last = fn->mix;
}

/* --graph-nodes: one forward from a and b into out, built into graph node by node, or,
 * with x, the same nodes of the executable graph x set for these buffers (fn names
 * them), as XLA builds and updates a command buffer. */
static void forward_nodes(cudaGraph_t graph, cudaGraphExec_t x, forward_nodes_t *fn, cudaStream_t gs, uint32_t *a,
                          uint32_t *b, uint32_t *out, void *workspace, size_t ws_bytes)
{
    size_t bytes = (size_t)dim * sizeof *a;
    int last_layer = layers_run() - 1;
    cudaGraphNode_t last;
    if (mark && iteration_mark != NULL)
        iteration_mark();
    if (nvtx)
        nvtxRangePushA("forward");
    if (x != NULL) {
        CHECK(cudaGraphExecMemcpyNodeSetParams1D(x, fn->in, a, input, bytes, cudaMemcpyHostToDevice));
    } else {
        struct cudaMemsetParams ws = { workspace, 0, 0, 1, ws_bytes, 1 };
        CHECK(cudaGraphAddMemsetNode(&last, graph, NULL, 0, &ws));
        CHECK(cudaGraphAddMemcpyNode1D(&fn->in, graph, &last, 1, a, input, bytes, cudaMemcpyHostToDevice));
    }
    last = fn->in;
    for (int l = 0; l <= last_layer; l++) {
        if (nvtx)
            nvtx_layer_push(l);
        if (ptr_query)
            query_pointer(model[l].w);
        if (graph_nodes_into) {
            /* Never with x: main refuses --graph-nodes-update with it. */
            if (l == 0)
                kernel_nodes(graph, NULL, fn, &last, gs, l, a, b);
            trace_to(graph, &last, gs, l == 0 ? TRACE_TAIL : TRACE_LAYER, l, a, b);
        } else if (l < last_layer) {
            put_child(graph, x, &fn->layer[l], &last, trace(gs, TRACE_LAYER, l, a, b));
        } else {
            kernel_nodes(graph, x, fn, &last, gs, l, a, b);
            put_child(graph, x, &fn->layer[l], &last, trace(gs, TRACE_TAIL, l, a, b));
        }
        uint32_t *t = a;
        a = b;
        b = t;
        if (nvtx)
            nvtx_layer_pop();
    }
    if (nvtx)
        nvtxRangePop();
    if (gathers(cur_iter) && graph_nodes_into)
        trace_to(graph, &last, gs, TRACE_GATHER, 0, a, b);
    else if (gathers(cur_iter))
        put_child(graph, x, &fn->gather, &last, trace(gs, TRACE_GATHER, 0, a, b));
    if (x != NULL)
        CHECK(cudaGraphExecMemcpyNodeSetParams1D(x, fn->out, out, a, bytes, cudaMemcpyDeviceToHost));
    else
        CHECK(cudaGraphAddMemcpyNode1D(&fn->out, graph, &last, 1, out, a, bytes, cudaMemcpyDeviceToHost));
}

/* One replay of exec on gs, waited for, its output's checksum printed as "LABEL replay R
 * checksum C". */
static void replay_nodes(cudaGraphExec_t exec, cudaStream_t gs, const char *label, int r, const uint32_t *out)
{
    CHECK(cudaGraphLaunch(exec, gs));
    CHECK(cudaStreamSynchronize(gs));
    CHECK(cudaGetLastError());
    printf("%s replay %d checksum %016" PRIx64 "\n", label, r, fnv1a(out, (size_t)dim * sizeof *out));
}

/* --graph-nodes: as run_graph, the graph built node by node (forward_nodes). It lives as
 * long as its executable graph, whose nodes the update names by the graph's. */
static void run_graph_nodes(uint32_t *a, uint32_t *b, uint32_t *out, void *workspace, size_t ws_bytes)
{
    cudaStream_t gs;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    forward_nodes_t fn = { 0 };
    uint32_t *saved = input, *pinned, *moved = NULL, *moved_in = NULL;
    size_t bytes = (size_t)dim * sizeof *a;
    enum cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion("cuGraphAddKernelNode", (void **)&drv_add_kernel_node, 12000,
                                           cudaEnableDefault, &found));
    CHECK(cudaGetDriverEntryPointByVersion("cuGraphExecKernelNodeSetParams", (void **)&drv_exec_kernel_params,
                                           12000, cudaEnableDefault, &found));
    if (graph_nodes_generic == 1)
        CHECK(cudaGetDriverEntryPointByVersion("cuGraphAddNode", (void **)&drv_add_node, 12030, cudaEnableDefault,
                                               &found));
    if (graph_nodes_generic == 2)
        CHECK(cudaGetDriverEntryPointByVersion("cuGraphAddNode", (void **)&drv_add_node_old, 12020,
                                               cudaEnableDefault, &found));
    fn.layer = calloc((size_t)layers, sizeof *fn.layer);
    if (drv_add_kernel_node == NULL || (graph_nodes_generic == 1 && drv_add_node == NULL) ||
        (graph_nodes_generic == 2 && drv_add_node_old == NULL) || drv_exec_kernel_params == NULL ||
        fn.layer == NULL) {
        fprintf(stderr, "model: --graph-nodes: no driver kernel-node functions, or no memory\n");
        exit(1);
    }
    CHECK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
    CHECK(cudaMallocHost((void **)&pinned, bytes));
    memcpy(pinned, input, bytes);
    input = pinned;
    cur_iter = iters;
    CHECK(cudaGraphCreate(&graph, 0));
    forward_nodes(graph, NULL, &fn, gs, a, b, out, workspace, ws_bytes);
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < graph_nodes; r++) {
        replay_nodes(exec, gs, "graph", r, out);
        /* --graph-nodes-update: the input moves, as XLA's buffers may from one
         * execution to the next (its pinned host copy and the activation it is copied
         * into, both to new allocations), and every node naming it takes the new one.
         * The old buffers are overwritten: a node left naming them would change the
         * checksums. */
        if (r == 0 && graph_nodes_update) {
            CHECK(cudaMallocHost((void **)&moved_in, bytes));
            memcpy(moved_in, input, bytes);
            memset(input, 0x5a, bytes);
            input = moved_in;
            CHECK(cudaMalloc((void **)&moved, bytes));
            CHECK(cudaMemset(a, 0x5a, bytes));
            forward_nodes(NULL, exec, &fn, gs, moved, b, out, workspace, ws_bytes);
        }
    }
    /* --graph-nodes-second: another graph, built the same way over activations carved
     * anew (XLA's prefill executable, compiled and built into a command buffer of its
     * own after the decode's replays, its buffers taken from the pool's room). */
    if (graph_nodes_second > 0) {
        size_t big = (size_t)4 << 20; /* prefill's activations: larger than decode's */
        uint32_t *a2, *b2;
        if (own_vmm) {
            if (second_far > 0) /* room no call uses, left behind (never freed: a pool's) */
                (void)own_vmm_alloc((size_t)second_far << 20);
            a2 = second_reuse ? reuse_buf : own_vmm_alloc(big);
            b2 = own_vmm_alloc(big);
        } else {
            CHECK(cudaMalloc((void **)&a2, big));
            CHECK(cudaMalloc((void **)&b2, big));
        }
        cudaGraph_t g2;
        cudaGraphExec_t x2;
        forward_nodes_t fn2 = { 0 };
        fn2.layer = calloc((size_t)layers, sizeof *fn2.layer);
        if (fn2.layer == NULL) {
            fprintf(stderr, "model: --graph-nodes-second: no memory\n");
            exit(1);
        }
        CHECK(cudaGraphCreate(&g2, 0));
        if (second_reuse) {
            /* the 4 MiB past the activation's words, from the granule of zeros into
             * the one written before: apart from what the layers use, its first node */
            uint32_t *past = a2 + dim, seed = 0x7e57;
            int n = (int)(big / sizeof *a2) - dim;
            void *args[] = { &past, &seed, &n };
            struct cudaKernelNodeParams kp = { (void *)model_kernel_fill(),
                                               { (unsigned)((n + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 },
                                               { MODEL_BLOCK, 1, 1 }, 0, args, NULL };
            cudaGraphNode_t fill_node;
            CHECK(cudaGraphAddKernelNode(&fill_node, g2, NULL, 0, &kp));
        }
        in_graph2 = 1;
        forward_nodes(g2, NULL, &fn2, gs, a2, b2, out, workspace, ws_bytes);
        in_graph2 = 0;
        CHECK(cudaGraphInstantiate(&x2, g2, 0));
        for (int r = 0; r < graph_nodes_second; r++)
            replay_nodes(x2, gs, "graph2", r, out);
        CHECK(cudaGraphExecDestroy(x2));
        CHECK(cudaGraphDestroy(g2));
        free(fn2.layer);
        if (!own_vmm || !own_vmm_free(a2)) /* the pool's stay until the end */
            CHECK(cudaFree(a2));
        if (!own_vmm || !own_vmm_free(b2))
            CHECK(cudaFree(b2));
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    if (moved != NULL) {
        CHECK(cudaFree(moved));
        CHECK(cudaFreeHost(moved_in));
    }
    free(fn.layer);
    CHECK(cudaStreamDestroy(gs));
    input = saved;
    CHECK(cudaFreeHost(pinned));
}

static void *run_worker(void *arg)
{
    worker_t *wk = arg;
    cudaStream_t stream = 0;
    uint32_t *a, *b, *out;
    CHECK(cudaSetDevice(device));
    if (per_thread_stream)
        stream = cudaStreamPerThread;
    else if (threads > 1)
        CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    void *race_bufs[64];
    if (race_alloc > 0) {
        pthread_barrier_wait(&race_barrier);
        for (int i = 0; i < race_alloc; i++)
            CHECK(cudaMalloc(&race_bufs[i], 1u << 20));
    }
    a = b = NULL; /* --grow-cache: its pool serves the activations */
    if (act_kernels > 0) {
        /* --act-kernels: the activations live in the pool too, as a decode step's
         * hidden states in PyTorch's small pool */
        a = act_pool + (256u << 10);
        b = a + dim;
    } else if (!grow_cache && own_vmm && !pool_weights_only) {
        /* --own-vmm: the activations in the program's own mappings too, as every
         * tensor is under PyTorch's expandable_segments */
        if (second_reuse)
            carve_reuse();
        a = own_vmm_alloc((size_t)dim * sizeof *a);
        b = own_vmm_alloc((size_t)dim * sizeof *b);
    } else if (!grow_cache) {
        CHECK(cudaMalloc((void **)&a, (size_t)dim * sizeof *a));
        CHECK(cudaMalloc((void **)&b, (size_t)dim * sizeof *b));
    }
    uint32_t *a2 = NULL, *b2 = NULL;
    if (swap_from >= 0 || alternate_acts) {
        CHECK(cudaMalloc((void **)&a2, (size_t)dim * sizeof *a2));
        CHECK(cudaMalloc((void **)&b2, (size_t)dim * sizeof *b2));
    }
    CHECK(cudaMallocHost((void **)&out, (size_t)dim * sizeof *out));
    /* --graph: a workspace the captured forward clears first, as cuBLAS's memset of its
     * workspace inside torch.cuda.graph's capture; allocated before the forwards and
     * untouched by them, the first FT_SPILL moves to host memory. */
    void *workspace = NULL;
    const size_t ws_bytes = 2u << 20;
    if (graph_replays > 0 || graph_nodes > 0)
        CHECK(cudaMalloc(&workspace, ws_bytes));
    if (prologue)
        warm_mine = warm + (size_t)wk->id * (size_t)dim;
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    int last = threads > 1 && wk->id == threads - 1;
    int my_iters = last && early_end >= 0 && early_end < iters ? early_end : iters;
    for (int it = 0; it < my_iters; it++) {
        if (it == profile_from && profiler_start() != 0)
            exit(1);
        if (lockstep)
            pthread_barrier_wait(&step_barrier);
        if (it == 0 && pause_forwards > 0 && profiling_suspend != NULL)
            profiling_suspend();
        CHECK(cudaEventRecord(t0, stream));
        cur_iter = it;
        extra_kernels = vary_from >= 0 && it >= vary_from && (it - vary_from) % 2 == 0;
        if (grow_cache)
            forward_cached(stream, out);
        else if ((swap_from >= 0 && it >= swap_from) || (alternate_acts && it % 2 == 1))
            forward(stream, a2, b2, out);
        else
            forward(stream, a, b, out);
        CHECK(cudaEventRecord(t1, stream));
        CHECK(cudaStreamSynchronize(stream));
        /* As PyTorch checks after every launch: an error FlexTensor's own calls left in
         * the runtime's last error would surface here. */
        CHECK(cudaGetLastError());
        if (timing && wk->id == 0) {
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, t0, t1));
            printf("iteration %d step_us %.1f\n", it, ms * 1000.0);
        }
        wk->checksum[it] = fnv1a(out, (size_t)dim * sizeof *out);
        if (it + 1 == pause_forwards && profiling_resume != NULL)
            profiling_resume();
        if (writes_weights_after(it)) {
            /* Worker 0 writes weights that every thread's forwards read: the write falls
             * between the threads' forwards it and it + 1 (each thread synchronised its
             * stream above), so that no kernel reads a word while it changes. */
            pthread_barrier_wait(&write_barrier);
            if (wk->id == 0)
                write_weights(it);
            pthread_barrier_wait(&write_barrier);
        }
        if (it == reload_after) {
            /* As the writes above: no thread's forward reads a weight while it goes. */
            pthread_barrier_wait(&write_barrier);
            if (wk->id == 0)
                reload_weights();
            pthread_barrier_wait(&write_barrier);
        }
        if (controls_after(it) || after_forward_hook != NULL) {
            /* As the writes above: between every thread's forwards it and it + 1. */
            pthread_barrier_wait(&write_barrier);
            if (wk->id == 0)
                run_controls(it);
            pthread_barrier_wait(&write_barrier);
        }
        if (!quiet && threads == 1)
            printf("iteration %d checksum %016" PRIx64 "\n", it, wk->checksum[it]);
        if (usage && wk->id == 0 && (it == 0 || it == iters - 1))
            print_usage(it);
        if (it == drop_after && layers > 1) {
            layers--;
            free_weight(model[layers].w);
            free_weight(model[layers].bias);
            free_weight(model[layers].s);
            if (ptr_arrays)
                free_weight(model[layers].pv);
        }
    }
    if (graph_replays > 0)
        run_graph(a, b, out, workspace, ws_bytes);
    if (graph_nodes > 0)
        run_graph_nodes(a, b, out, workspace, ws_bytes);
    if (workspace != NULL)
        CHECK(cudaFree(workspace));
    if (profile_from >= 0 && profile_from < iters && profiler_stop() != 0)
        exit(1);
    if (a2 != NULL) {
        CHECK(cudaFree(a2));
        CHECK(cudaFree(b2));
    }
    if (a != NULL && act_kernels == 0) {
        if (!own_vmm_free(a))
            CHECK(cudaFree(a));
        if (!own_vmm_free(b))
            CHECK(cudaFree(b));
    }
    if (my_iters < iters)
        usleep(60000);
    for (int i = 0; i < race_alloc; i++)
        CHECK(cudaFree(race_bufs[i]));
    CHECK(cudaFreeHost(out));
    if (stream && !per_thread_stream)
        CHECK(cudaStreamDestroy(stream));
    return NULL;
}

static int parse_int(const char *flag, const char *v, int lo, int hi)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (v == NULL || *v == '\0' || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "model: %s needs an integer in %d..%d (got %s)\n", flag, lo, hi,
                v ? v : "nothing");
        exit(2);
    }
    return (int)x;
}

#ifdef MODEL_LIBRARY
/* The library build (libmodel-sim.so): a program that embeds the model runs it with
 * model_main, and may have its hook called after each forward. */
#define MODEL_EXPORT __attribute__((visibility("default")))
MODEL_EXPORT void model_set_hook(void (*hook)(int it))
{
    after_forward_hook = hook;
}
MODEL_EXPORT int model_main(int argc, char **argv)
#else
int main(int argc, char **argv)
#endif
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--layers") == 0)
            layers = parse_int(a, v, 1, 4096), i++;
        else if (strcmp(a, "--dim") == 0)
            dim = parse_int(a, v, 1, 65536), i++;
        else if (strcmp(a, "--iters") == 0)
            iters = parse_int(a, v, 1, 64), i++;
        else if (strcmp(a, "--threads") == 0)
            threads = parse_int(a, v, 1, 64), i++;
        else if (strcmp(a, "--quiet") == 0)
            quiet = 1;
        else if (strcmp(a, "--ptr-arrays") == 0)
            ptr_arrays = 1;
        else if (strcmp(a, "--static-rt") == 0) {
            static_launch = (static_launch_fn)dlsym(RTLD_DEFAULT, "simcudaStaticLaunchKernel");
            if (static_launch == NULL) {
                fprintf(stderr, "model: --static-rt needs the simulated runtime\n");
                return 2;
            }
        }
        else if (strcmp(a, "--stale") == 0)
            stale = 1;
        else if (strcmp(a, "--ptr-query") == 0)
            ptr_query = 1;
        else if (strcmp(a, "--stale-rope") == 0)
            stale_rope = 1;
        else if (strcmp(a, "--stale-graph") == 0)
            stale_graph = 1;
        else if (strcmp(a, "--stale-from") == 0 && i + 1 < argc)
            stale_from = atoi(argv[++i]);
        else if (strcmp(a, "--far-new") == 0 && i + 1 < argc)
            far_new = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--prefill-every") == 0 && i + 1 < argc)
            prefill_every = parse_int(a, argv[++i], 2, 1 << 20);
        else if (strcmp(a, "--prefill-gemv") == 0)
            prefill_gemv = 1;
        else if (strcmp(a, "--func-wide") == 0)
            func_wide = 1;
        else if (strcmp(a, "--segments") == 0 && i + 1 < argc)
            segment_bytes = (size_t)parse_int(a, argv[++i], 1, 1024) << 20;
        else if (strcmp(a, "--segment-kib") == 0 && i + 1 < argc)
            segment_bytes = (size_t)parse_int(a, argv[++i], 1, 1 << 20) << 10;
        else if (strcmp(a, "--stale-new") == 0 && i + 1 < argc)
            stale_new = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--shared") == 0)
            shared = 1;
        else if (strcmp(a, "--device") == 0 && i + 1 < argc)
            device = parse_int(a, argv[++i], 0, 1023);
        else if (strcmp(a, "--side-device") == 0 && i + 1 < argc)
            side_device = parse_int(a, argv[++i], 0, 1023);
        else if (strcmp(a, "--side-from") == 0 && i + 1 < argc)
            side_from = parse_int(a, argv[++i], 0, 1 << 30);
        else if (strcmp(a, "--side-late") == 0)
            side_late = 1;
        else if (strcmp(a, "--per-thread-stream") == 0)
            per_thread_stream = 1;
        else if (strcmp(a, "--prologue") == 0)
            prologue = 1;
        else if (strcmp(a, "--drv-alloc") == 0)
            drv_alloc = 1;
        else if (strcmp(a, "--autotune") == 0 && i + 1 < argc) {
            const char *comma = strchr(argv[++i], ',');
            autotune = atoi(argv[i]);
            autotune_kernels_n = comma != NULL ? atoi(comma + 1) : 1;
            if (autotune_kernels_n < 1 || autotune_kernels_n > 3) {
                fprintf(stderr, "model: --autotune N,K: K is 1, 2 or 3, not %s\n", comma + 1);
                return 2;
            }
        }
        else if (strcmp(a, "--init-kernel") == 0)
            init_kernel = 1;
        else if (strcmp(a, "--own-vmm") == 0)
            own_vmm = 1;
        else if (strcmp(a, "--own-vmm-export") == 0)
            own_vmm = own_vmm_export = 1;
        else if (strcmp(a, "--own-vmm-export-late") == 0)
            own_vmm = own_vmm_export = own_vmm_export_late = 1;
        else if (strcmp(a, "--own-vmm-pool") == 0 && i + 1 < argc)
            own_vmm = 1, own_vmm_pool_mib = parse_int(a, argv[++i], 1, 1024);
        else if (strcmp(a, "--pool-weights-only") == 0)
            pool_weights_only = 1;
        else if (strcmp(a, "--pool-late") == 0 && i + 1 < argc)
            pool_late = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--init-twice") == 0)
            init_twice = 1;
        else if (strcmp(a, "--init-other") == 0)
            init_other = 1;
        else if (strcmp(a, "--init-refill") == 0)
            init_refill = 1;
        else if (strcmp(a, "--room-from") == 0 && i + 1 < argc)
            room_from = atol(argv[++i]);
        else if (strcmp(a, "--seg-down") == 0)
            seg_down = 1;
        else if (strcmp(a, "--room-first") == 0)
            room_first = 1;
        else if (strcmp(a, "--start-room") == 0 && i + 1 < argc)
            start_room = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--room-pair") == 0)
            room_pair = 1;
        else if (strcmp(a, "--room-low") == 0 && i + 1 < argc)
            room_low = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--tail-layers") == 0 && i + 1 < argc)
            tail_layers = atoi(argv[++i]);
        else if (strcmp(a, "--hf-warmup") == 0 && i + 1 < argc)
            hf_warmup_mib = atol(argv[++i]);
        else if (strcmp(a, "--load-after-launch") == 0)
            load_after_launch = 1;
        else if (strcmp(a, "--big-tables") == 0)
            big_tables = 1;
        else if (strcmp(a, "--big-last") == 0 && i + 1 < argc)
            big_last = parse_int(a, argv[++i], 1, 64);
        else if (strcmp(a, "--race-alloc") == 0 && i + 1 < argc)
            race_alloc = parse_int(a, argv[++i], 0, 64);
        else if (strcmp(a, "--early-end") == 0 && i + 1 < argc)
            early_end = parse_int(a, argv[++i], 0, 1000000);
        else if (strcmp(a, "--lockstep") == 0)
            lockstep = 1;
        else if (strcmp(a, "--pad-odd") == 0)
            pad_odd = 1;
        else if (strcmp(a, "--swap-acts") == 0 && i + 1 < argc)
            swap_from = atoi(argv[++i]);
        else if (strcmp(a, "--bypass-from") == 0 && i + 1 < argc)
            bypass_from = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--alternate-acts") == 0)
            alternate_acts = 1;
        else if (strcmp(a, "--cross-from") == 0 && i + 1 < argc)
            cross_from = atoi(argv[++i]);
        else if (strcmp(a, "--gather-from") == 0 && i + 1 < argc)
            gather_from = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--gather-until") == 0 && i + 1 < argc)
            gather_until = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--skip-last-from") == 0 && i + 1 < argc)
            skip_from = atoi(argv[++i]);
        else if (strcmp(a, "--scratch") == 0)
            scratch_from = 0;
        else if (strcmp(a, "--scratch-from") == 0 && i + 1 < argc)
            scratch_from = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--demote-after-plan") == 0 && i + 1 < argc)
            over_from = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--outside-from") == 0 && i + 1 < argc)
            outside_from = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--drv-workspace") == 0 && i + 1 < argc)
            drv_workspace_mib = parse_int(a, argv[++i], 1, 1 << 10);
        else if (strcmp(a, "--peek") == 0 && i + 1 < argc)
            peek_after = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--refill") == 0 && i + 1 < argc)
            refill_after = parse_int(a, argv[++i], 0, 1000000);
        else if (strcmp(a, "--rewrite") == 0 && i + 1 < argc)
            rewrite_from = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--stale-off") == 0 && i + 1 < argc)
            stale_off = (size_t)parse_int(a, argv[++i], 0, 1 << 20) << 10;
        else if (strcmp(a, "--moe") == 0 && i + 1 < argc) {
            const char *v2 = argv[++i];
            if (sscanf(v2, "%d,%d", &moe_experts, &moe_k) != 2 || moe_experts < 1 ||
                moe_experts > MODEL_MAX_EXPERTS || moe_k < 1 || moe_k > moe_experts) {
                fprintf(stderr, "model: --moe E,K: 1 <= K <= E <= %d (got '%s')\n", MODEL_MAX_EXPERTS, v2);
                return 2;
            }
        } else if (strcmp(a, "--vary") == 0 && i + 1 < argc)
            vary_from = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--act-twin") == 0 && i + 1 < argc)
            act_twin = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--act-kernels") == 0 && i + 1 < argc)
            act_kernels = parse_int(a, argv[++i], 0, 1 << 10);
        else if (strcmp(a, "--grow-cache") == 0)
            grow_cache = 1;
        else if (strcmp(a, "--small-weights") == 0)
            small_weights = 1;
        else if (strcmp(a, "--mark") == 0)
            mark = 1;
        else if (strcmp(a, "--nvtx") == 0)
            nvtx = 1;
        else if (strcmp(a, "--pause") == 0)
            pause_forwards = parse_int(a, v, 0, 64), i++;
        else if (strcmp(a, "--time") == 0)
            timing = 1;
        else if (strcmp(a, "--profile-from") == 0 && i + 1 < argc)
            profile_from = parse_int(a, argv[++i], 0, 1 << 20);
        else if (strcmp(a, "--usage") == 0)
            usage = 1;
        else if (strcmp(a, "--control") == 0)
            parse_controls(v), i++;
        else if (strcmp(a, "--graph") == 0)
            graph_replays = parse_int(a, v, 1, 1 << 20), i++;
        else if (strcmp(a, "--graph-update") == 0)
            graph_update = 1;
        else if (strcmp(a, "--graph-eager") == 0)
            graph_eager = 1;
        else if (strcmp(a, "--alt-odd") == 0)
            alt_odd = 1;
        else if (strcmp(a, "--graph-toggle") == 0)
            graph_toggle = 1;
        else if (strcmp(a, "--graph-old-update") == 0)
            graph_old_update = 1;
        else if (strcmp(a, "--graph-nodes") == 0)
            graph_nodes = parse_int(a, v, 1, 1 << 20), i++;
        else if (strcmp(a, "--graph-nodes-update") == 0)
            graph_nodes_update = 1;
        else if (strcmp(a, "--graph-nodes-swap") == 0)
            graph_nodes_swap = 1;
        else if (strcmp(a, "--graph-nodes-generic") == 0)
            graph_nodes_generic = 1;
        else if (strcmp(a, "--graph-nodes-generic-old") == 0)
            graph_nodes_generic = 2;
        else if (strcmp(a, "--graph-nodes-into") == 0)
            graph_nodes_into = 1;
        else if (strcmp(a, "--graph-nodes-second") == 0 && v)
            graph_nodes_second = parse_int(a, v, 1, 1 << 20), i++;
        else if (strcmp(a, "--second-reuse") == 0)
            second_reuse = 1;
        else if (strcmp(a, "--second-far") == 0 && v)
            second_far = parse_int(a, v, 1, 1024), i++;
        else if (strcmp(a, "--drop") == 0)
            drop_after = parse_int(a, v, 0, 63), i++;
        else if (strcmp(a, "--reload") == 0)
            reload_after = parse_int(a, v, 0, 63), i++;
        else if (strcmp(a, "--zero") == 0)
            zero_after = parse_int(a, v, 0, 63), i++;
        else if (strcmp(a, "--poke") == 0)
            poke_after = parse_int(a, v, 0, 63), i++;
        else if (strcmp(a, "--seed") == 0 && i + 1 < argc)
            weight_seed = (uint64_t)parse_int(a, argv[++i], 0, 1 << 30);
        else if (strcmp(a, "--hold") == 0 && i + 1 < argc)
            hold_path = argv[++i];
        else {
            fprintf(stderr, "usage: model [--layers L] [--dim N] [--iters I] [--threads T] "
                            "[--ptr-arrays] [--stale] [--stale-rope] [--ptr-query] [--stale-from N] [--stale-new N [--stale-off KIB]] [--far-new N] [--segments N | --segment-kib N [--seg-down] [--room-from N [--room-first] [--room-pair] [--room-low N]]] [--shared] [--vary N] [--act-kernels N [--prefill-every N [--func-wide | --prefill-gemv]] [--act-twin N]] [--rewrite N] [--peek N] [--scratch] [--scratch-from N] [--demote-after-plan N] [--drv-workspace N] [--outside-from N] [--big-tables] [--big-last K] [--drv-alloc] [--own-vmm | --own-vmm-export | --own-vmm-export-late | --own-vmm-pool N [--pool-late N] [--pool-weights-only]] [--race-alloc N] [--early-end N] [--lockstep] [--pad-odd [--start-room N]] [--swap-acts N] [--alternate-acts] [--cross-from N] [--gather-from N [--gather-until M]] [--moe E,K] [--skip-last-from N] [--bypass-from N] [--autotune N[,K]] [--prologue] [--grow-cache] [--small-weights] [--init-kernel [--init-twice] [--init-other] [--init-refill]] [--load-after-launch] [--hf-warmup M] [--tail-layers K] [--device N] [--side-device N [--side-from K] [--side-late]] [--per-thread-stream] [--mark] [--nvtx] [--pause N] [--poke N] [--refill N] [--zero N] [--drop N] [--reload N] [--time] "
                            "[--graph N [--graph-eager]] [--graph-nodes N [--graph-nodes-generic[-old]] [--graph-nodes-update [--graph-nodes-swap] | --graph-nodes-into] [--graph-nodes-second N [--second-far MiB | --second-reuse]]] [--alt-odd] [--usage] [--control N:ACTION,...] [--profile-from N] [--seed S] [--hold PATH] "
                            "[--quiet]\n");
            return 2;
        }
    }

    if (act_kernels >= dim || (act_kernels > 0 && (threads > 1 || grow_cache || dim > (128 << 10)))) {
        fprintf(stderr, "model: --act-kernels needs fewer kernels than --dim, one thread, no --grow-cache, --dim <= 128Ki\n");
        return 2;
    }
    if (seg_down && (segment_bytes == 0 || room_low >= 0 || room_pair)) {
        fprintf(stderr, "model: --seg-down needs --segments, and not --room-low or --room-pair\n");
        return 2;
    }
    if (room_from >= 0 && (segment_bytes == 0 || threads > 1)) {
        fprintf(stderr, "model: --room-from needs --segments and one thread\n");
        return 2;
    }
    /* The last thread leaves early: no barrier may wait for it. */
    if (early_end >= 0 && (threads < 2 || lockstep || zero_after >= 0 || peek_after >= 0 || rewrite_from >= 0 || poke_after >= 0 ||
                           refill_after >= 0 ||
                           reload_after >= 0 || n_controls > 0 || after_forward_hook != NULL)) {
        fprintf(stderr, "model: --early-end needs --threads 2 or more, and no --lockstep, weight writes, --reload "
                        "or controls\n");
        return 2;
    }
    if (refill_after >= 0 && (segment_bytes == 0 || layers < 2)) {
        fprintf(stderr, "model: --refill needs --segments and two layers\n");
        return 2;
    }
    if ((graph_update || graph_toggle || graph_old_update || graph_eager) && graph_replays == 0) {
        fprintf(stderr, "model: --graph-update, --graph-toggle, --graph-old-update and --graph-eager need --graph\n");
        return 2;
    }
    if (graph_nodes_swap && !graph_nodes_update) {
        fprintf(stderr, "model: --graph-nodes-swap needs --graph-nodes-update\n");
        return 2;
    }
    if ((graph_nodes_update || graph_nodes_into || graph_nodes_generic || graph_nodes_second) && graph_nodes == 0) {
        fprintf(stderr, "model: --graph-nodes-update, --graph-nodes-into and --graph-nodes-generic need --graph-nodes\n");
        return 2;
    }
    if (second_reuse && (graph_nodes_second == 0 || own_vmm_pool_mib == 0 || second_far > 0)) {
        fprintf(stderr, "model: --second-reuse needs --graph-nodes-second and --own-vmm-pool, without --second-far\n");
        return 2;
    }
    if (second_far > 0 && (graph_nodes_second == 0 || own_vmm_pool_mib == 0)) {
        fprintf(stderr, "model: --second-far needs --graph-nodes-second and --own-vmm-pool\n");
        return 2;
    }
    /* The update sets the layers' child graph nodes, which --graph-nodes-into does not
     * make; --far-new launches between the first layer's gemv and mix, which it makes
     * nodes of. */
    if (graph_nodes_into && (graph_nodes_update || far_new >= 0)) {
        fprintf(stderr, "model: --graph-nodes-into does not combine with --graph-nodes-update (the layers it "
                        "captures into the graph are no child graph nodes to set) nor --far-new\n");
        return 2;
    }
    /* --graph-nodes makes the last layer's gemv and mix nodes of their own, the layers
     * before it child graphs. */
    if (graph_nodes > 0 && (graph_replays > 0 || cross_from >= 0 || moe_experts > 0 ||
                            (skip_from >= 0 ? layers - 1 : layers) < 2)) {
        fprintf(stderr, "model: --graph-nodes needs two layers run, and no --graph, --cross-from or --moe\n");
        return 2;
    }
    if (profile_from >= 0 && threads > 1) {
        fprintf(stderr, "model: --profile-from needs one thread\n");
        return 2;
    }
    if (drop_after >= 0 && threads > 1) {
        fprintf(stderr, "model: --drop needs one thread\n");
        return 2;
    }
    /* Their tables and segments hold the first model's addresses, and --drop frees a
     * layer the reload would free again. */
    if (reload_after >= 0 && (ptr_arrays || shared || segment_bytes > 0 || grow_cache || drop_after >= 0 ||
                              graph_replays > 0 || graph_nodes > 0)) {
        fprintf(stderr, "model: --reload does not combine with --ptr-arrays, --shared, --segments, --grow-cache, "
                        "--drop, --graph or --graph-nodes\n");
        return 2;
    }
    if (grow_cache && (threads > 1 || ptr_arrays || shared || segment_bytes > 0)) {
        fprintf(stderr, "model: --grow-cache needs one thread, without --ptr-arrays, --shared, --segments\n");
        return 2;
    }
    if ((graph_replays > 0 || graph_nodes > 0) &&
        (threads > 1 || grow_cache || swap_from >= 0 || alternate_acts || drop_after >= 0 || side_device >= 0 ||
         scratch_from >= 0 || over_from >= 0 || outside_from >= 0 || drv_workspace_mib > 0 || pool_late >= 0)) {
        fprintf(stderr, "model: --graph and --graph-nodes need one thread, without options that allocate or use "
                        "another device inside a forward\n");
        return 2;
    }
    if (pool_weights_only && own_vmm_pool_mib == 0) {
        fprintf(stderr, "model: --pool-weights-only needs --own-vmm-pool\n");
        return 2;
    }
    if (pool_late >= 0 && own_vmm_pool_mib == 0) {
        fprintf(stderr, "model: --pool-late needs --own-vmm-pool\n");
        return 2;
    }
    /* Its buffer is made by the first forward to need it, which the others would race. */
    if (side_late && threads > 1) {
        fprintf(stderr, "model: --side-late needs one thread\n");
        return 2;
    }
    /* The control API of FlexTensor, when it is preloaded (flextensor.h). */
    iteration_mark = (void (*)(void))dlsym(RTLD_DEFAULT, "ft_iteration_mark");
    profiling_suspend = (void (*)(void))dlsym(RTLD_DEFAULT, "ft_profiling_suspend");
    profiling_resume = (int (*)(void))dlsym(RTLD_DEFAULT, "ft_profiling_resume");
    get_usage = (int (*)(ft_gpu_memory_usage_t *))dlsym(RTLD_DEFAULT, "ft_get_gpu_memory_usage");
    cudaKernel_t k_scale;
    CHECK(cudaGetKernel(&k_gemv, model_kernel_gemv()));
    CHECK(cudaGetKernel(&k_gemv_wide, model_kernel_gemv_wide()));
    if (func_wide) {
        typedef CUresult (*get_function_fn)(CUfunction *, CUkernel);
        get_function_fn get_function = NULL;
        enum cudaDriverEntryPointQueryResult found;
        CHECK(cudaGetDriverEntryPointByVersion("cuKernelGetFunction", (void **)&get_function, 12000,
                                               cudaEnableDefault, &found));
        CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", (void **)&drv_launch, 12000, cudaEnableDefault,
                                               &found));
        if (get_function == NULL || drv_launch == NULL) {
            fprintf(stderr, "model: --func-wide: no cuKernelGetFunction or cuLaunchKernel\n");
            exit(1);
        }
        drv_check(get_function(&f_gemv_wide, (CUkernel)k_gemv_wide), "cuKernelGetFunction");
    }
    CHECK(cudaGetKernel(&k_scale, model_kernel_scale()));
    k_mix = model_kernel_mix();
    k_mix_alt = model_kernel_mix_alt();
    if (minblas_init((void *)k_scale) != 0)
        return 1;

    double mib = ((double)dim * dim + 2.0 * dim) * 4.0 * layers / (1 << 20);
    if (!quiet)
        printf("model: %d layers, dim %d, %.1f MiB of weights, %d iterations, %d thread(s)\n",
               layers, dim, mib, iters, threads);
    CHECK(cudaSetDevice(device));
    if (drv_alloc) {
        CHECK(cudaFree(0)); /* the runtime's context current, for the driver's calls */
        drv_alloc_resolve();
    }
    if (prologue) {
        /* Warm-up kernels before any weight exists (mix: warm += warm). */
        size_t warm_bytes = (size_t)threads * (size_t)dim * sizeof *warm;
        if (warm_bytes < 2u << 20)
            warm_bytes = 2u << 20;
        CHECK(cudaMalloc((void **)&warm, warm_bytes));
        CHECK(cudaMemset(warm, 0, warm_bytes));
        dim3 grid = { (unsigned)((dim + MODEL_BLOCK - 1) / MODEL_BLOCK), 1, 1 };
        dim3 block = { MODEL_BLOCK, 1, 1 };
        cudaLaunchConfig_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDim = grid;
        cfg.blockDim = block;
        void *warm_args[] = { &warm, &warm, &dim };
        for (int i = 0; i < 4; i++)
            CHECK(cudaLaunchKernelExC(&cfg, k_mix, warm_args));
        CHECK(cudaDeviceSynchronize());
    }
    if (load_after_launch)
        unrelated_kernels();
    if (hf_warmup_mib >= 0)
        hf_warmup();
    if (act_kernels > 0) {
        CHECK(cudaMalloc((void **)&act_pool, 2u << 20));
        CHECK(cudaMemset(act_pool, 0, 2u << 20));
    }
    if (stale_rope) {
        CHECK(cudaMalloc((void **)&rope_buf, (size_t)dim * sizeof *rope_buf));
        CHECK(cudaMemset(rope_buf, 0, (size_t)dim * sizeof *rope_buf));
    }
    load_weights();
    if (autotune > 0)
        autotune_kernels();
    if (side_device >= 0 && !side_late) {
        CHECK(cudaSetDevice(side_device));
        CHECK(cudaMalloc((void **)&side_buf, 256 * sizeof *side_buf));
        CHECK(cudaMemset(side_buf, 0, 256 * sizeof *side_buf));
        CHECK(cudaSetDevice(device));
    }

    worker_t *wk = calloc((size_t)threads, sizeof *wk);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    if (race_alloc > 0)
        pthread_barrier_init(&race_barrier, NULL, (unsigned)threads);
    if (lockstep)
        pthread_barrier_init(&step_barrier, NULL, (unsigned)threads);
    pthread_barrier_init(&write_barrier, NULL, (unsigned)threads);
    /* NVTX fills its table of function pointers at its first call, which the threads
     * then read without a lock (nvtx3's headers, not ours to change): filled here,
     * before any thread starts, no thread reads a slot while another sets it. */
    if (nvtx)
        nvtxInitialize(NULL);
    for (int t = 0; t < threads; t++) {
        wk[t].id = t;
        if (pthread_create(&tid[t], NULL, run_worker, &wk[t]) != 0) {
            fprintf(stderr, "model: pthread_create failed\n");
            return 1;
        }
    }
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    if (hold_path != NULL)
        hold_until(hold_path);

    int agree = 1;
    for (int t = 0; t < threads; t++)
        for (int it = 0; it < (t == threads - 1 && t > 0 && early_end >= 0 && early_end < iters ? early_end : iters); it++) {
            /* A forward equals the first of its kind: with or without the --vary kernels,
             * before or after --cross-from, --demote-after-plan ... */
            int kind = forward_kind(it), first = 0;
            while (forward_kind(first) != kind)
                first++;
            uint64_t want = wk[0].checksum[first];
            int same = poke_after >= 0 || drop_after >= 0 || zero_after >= 0 || rewrite_from >= 0 || peek_after >= 0 ||
                       room_from >= 0 ||
                       grow_cache ||
                       wk[t].checksum[it] == want;
            if (!same && agree)
                fprintf(stderr, "model: thread %d, forward %d: checksum %016" PRIx64 ", %016" PRIx64 " wanted\n",
                        t, it, wk[t].checksum[it], want);
            agree &= same;
        }
    for (int l = 0; l < layers; l++) {
        free_weight(model[l].w);
        free_weight(model[l].bias);
        free_weight(model[l].s);
        if (ptr_arrays)
            free_weight(model[l].pv);
    }
    if (ptr_arrays)
        CHECK(cudaFree(ptr_table));
    if (shared)
        free_weight(shared_table);
    if (prologue)
        CHECK(cudaFree(warm));
    for (int i = 0; i < n_segs; i++)
        CHECK(cudaFree(segs[i]));
    for (int i = 0; i < n_pool_segs; i++)
        CHECK(cudaFree(pool_segs[i]));
    if (own_vmm_pool_mib > 0)
        vpool_release();
    printf("checksum %016" PRIx64 "%s\n",
           wk[0].checksum[poke_after >= 0 || drop_after >= 0 || zero_after >= 0 || rewrite_from >= 0 ||
                          peek_after >= 0 || cross_from >= 0 || skip_from >= 0 || gather_from >= 0 ||
                          over_from >= 0 || moe_experts > 0 || grow_cache || reload_after >= 0 || pool_late >= 0
                      ? iters - 1 : 0],
           agree ? "" : " (iterations or threads DISAGREE)");
    free(wk);
    free(tid);
    free(model);
    free(input);
    return agree ? 0 : 1;
}
