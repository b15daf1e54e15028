"""Tensor-parallel benchmark: a Llama-style model (shapes from a transformers
LlamaConfig, random bf16 weights, no download) split over the processes of a
torch.distributed job, one GPU each, NCCL all-reduces after the attention output and
the MLP down projection (Megatron-style: q/k/v, gate and up split by columns, o and
down by rows; embeddings, norms and head replicated). bench/tp.sh drives it:

    python3 bench/tp_bench.py make --weights DIR --world 2 [--layers 32] [--hidden 4096]
    torchrun --nproc-per-node 2 bench/tp_bench.py run OUTDIR --weights DIR [--layers 32]
        [--hidden 4096] [--warmup 8] [--iters 10] [--tag plain]

make: every rank's shard is made on the GPU from seeded generators (a shard depends
only on its rank; replicated weights are the same in every shard) and saved to
DIR, once. run: each rank loads its shard (mmap) and copies it to its GPU, as a
checkpoint load would (host-to-device copies, no kernels), then runs, inputs from a
seeded generator, the same on every rank:
  decode   forward of (1, 1) token ids: --warmup forwards, then --iters timed ones;
  prefill  forward of (8, 512): min(2, --warmup) warm-up, min(5, --iters) timed;
  generate 32 new tokens, greedy, from a (1, 16) prompt, no KV cache.
Each rank saves its decode and prefill logits (last position) and tokens to
OUTDIR/TAG-rankR.pt and writes one JSON line with its timings to OUTDIR/TAG-rankR.json;
under FlexTensor (LD_PRELOAD, FT_GPU_MEM_LIMIT per process) the same script runs
unchanged.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ftbench import MemWatch, ft_usage, gpu_used_mib, h2d_gbps, llama_config, repeat_forwards

WEIGHT_SEED = 1234
INPUT_SEED = 4321


class Shard:
    """One rank's weights, made on the GPU: 1-D weights 1.0, the others
    (rand - 0.5) * 0.04 from a generator seeded by (rank or 'replicated', index)."""

    def __init__(self, cfg, rank, world, saved=None):
        h, heads, kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
        inter = cfg.intermediate_size
        if heads % world or kv % world or inter % world:
            raise SystemExit(f"tp_bench: {heads} heads, {kv} kv heads and {inter} MLP columns "
                             f"must divide by the world size {world}")
        self.hd = h // heads
        self.heads, self.kv = heads // world, kv // world
        self.eps = cfg.rms_norm_eps
        self.theta = getattr(cfg, "rope_theta", None) or 10000.0
        self.count = 0
        self.bytes = 0
        self.rank = rank
        self.saved = saved
        self.embed = self.make((cfg.vocab_size, h), replicated=True)
        self.layers = []
        for _ in range(cfg.num_hidden_layers):
            self.layers.append({
                "ln1": self.make((h,), replicated=True),
                "q": self.make((self.heads * self.hd, h)),
                "k": self.make((self.kv * self.hd, h)),
                "v": self.make((self.kv * self.hd, h)),
                "o": self.make((h, self.heads * self.hd)),
                "ln2": self.make((h,), replicated=True),
                "gate": self.make((inter // world, h)),
                "up": self.make((inter // world, h)),
                "down": self.make((h, inter // world)),
            })
        self.norm = self.make((h,), replicated=True)
        self.head = self.make((cfg.vocab_size, h), replicated=True)

    def make(self, shape, replicated=False):
        self.count += 1
        if self.saved is not None:  # from the weights file: a host-to-device copy
            src = self.saved[self.count - 1]
            if tuple(src.shape) != tuple(shape):
                raise SystemExit(f"tp_bench: weights file: tensor {self.count} has shape "
                                 f"{tuple(src.shape)}, expected {tuple(shape)}")
            t = src.to("cuda")
        elif len(shape) == 1:
            t = torch.ones(shape, dtype=torch.bfloat16, device="cuda")
        else:
            seed = WEIGHT_SEED + self.count * 1009 + (0 if replicated else 1 + self.rank) * 7919
            g = torch.Generator(device="cuda").manual_seed(seed)
            t = ((torch.rand(shape, generator=g, device="cuda", dtype=torch.float32) - 0.5)
                 * 0.04).to(torch.bfloat16)
        self.bytes += t.numel() * t.element_size()
        return t


def rms(x, w, eps):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + eps)).to(x.dtype) * w


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def forward(m, ids, world):
    b, t = ids.shape
    pos = torch.arange(t, device="cuda", dtype=torch.float32)
    inv = 1.0 / (m.theta ** (torch.arange(0, m.hd, 2, device="cuda", dtype=torch.float32) / m.hd))
    ang = torch.outer(pos, inv)
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    x = F.embedding(ids, m.embed)
    for L in m.layers:
        y = rms(x, L["ln1"], m.eps)
        q = F.linear(y, L["q"]).view(b, t, m.heads, m.hd).transpose(1, 2)
        k = F.linear(y, L["k"]).view(b, t, m.kv, m.hd).transpose(1, 2)
        v = F.linear(y, L["v"]).view(b, t, m.kv, m.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        o = F.linear(a.transpose(1, 2).reshape(b, t, m.heads * m.hd), L["o"])
        if world > 1:
            dist.all_reduce(o)
        x = x + o
        y = rms(x, L["ln2"], m.eps)
        d = F.linear(F.silu(F.linear(y, L["gate"])) * F.linear(y, L["up"]), L["down"])
        if world > 1:
            dist.all_reduce(d)
        x = x + d
    return F.linear(rms(x, m.norm, m.eps), m.head)


steady_from = None


def run_forwards(m, ids, world, warmup, iters, watch, name):
    """(last position's logits of the last forward on the cpu, warm-up ms, timed ms,
    whether every forward's logits equal the first's). watch.phase names each forward."""
    def steady():
        global steady_from
        if steady_from is None:
            steady_from = time.time()  # after the warm-up (FlexTensor's plan is made)
    count = [0]

    def step():
        watch.phase = f"{name} {count[0]}"
        count[0] += 1
        return forward(m, ids, world)[:, -1, :].clone()
    return repeat_forwards(step, warmup, iters, steady)


def shard_path(a, rank, world):
    return os.path.join(a.weights, f"tp-L{a.layers}-H{a.hidden}-w{world}-r{rank}.pt")


def make(a, cfg):
    """Every rank's shard made on the GPU, one after the other, and saved to the host."""
    for rank in range(a.world):
        t0 = time.time()
        with torch.no_grad():
            m = Shard(cfg, rank, a.world)
        flat = [m.embed] + [L[k] for L in m.layers for k in L] + [m.norm, m.head]
        path = shard_path(a, rank, a.world)
        os.makedirs(a.weights, exist_ok=True)
        torch.save([t.cpu() for t in flat], path + ".tmp")
        os.replace(path + ".tmp", path)  # a file at path is always complete
        print(json.dumps({"mode": "make", "rank": rank, "world": a.world, "path": path,
                          "shard_bytes": m.bytes, "s": round(time.time() - t0, 2)}), flush=True)
        del m, flat
        torch.cuda.empty_cache()


def run(a, cfg):
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", rank))
    idle = gpu_used_mib(local)
    torch.cuda.set_device(local)  # before anything else touches the GPU
    if world > 1:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        dist.all_reduce(torch.ones(1, device="cuda"))
    # the context, NCCL's buffers and the libraries' code, before any weight: device
    # memory in use less what PyTorch's allocator holds (cudaMalloc, through the shim)
    w = torch.ones(256, 256, dtype=torch.bfloat16, device="cuda")
    F.scaled_dot_product_attention(w.view(1, 1, 256, 256), w.view(1, 1, 256, 256),
                                   w.view(1, 1, 256, 256), is_causal=True)
    torch.cuda.synchronize()
    used = gpu_used_mib(local)
    context_mib = (used - idle - torch.cuda.memory_reserved() / 1048576
                   if used is not None and idle is not None else None)
    del w
    watch = MemWatch(local, idle)
    watch.phase = "load"
    t0 = time.time()
    saved = torch.load(shard_path(a, rank, world), mmap=True, weights_only=True)
    with torch.no_grad():
        m = Shard(cfg, rank, world, saved)
    del saved
    torch.cuda.synchronize()
    res = {"tag": a.tag, "rank": rank, "world": world, "pid": os.getpid(),
           "device": torch.cuda.get_device_name(local), "cuda_device": local,
           "layers": a.layers, "hidden": a.hidden, "shard_bytes": m.bytes,
           "load_s": round(time.time() - t0, 2), "idle_mib": idle,
           "context_mib": None if context_mib is None else round(context_mib, 1)}

    gen = torch.Generator().manual_seed(INPUT_SEED)
    dec_ids = torch.randint(0, cfg.vocab_size, (1, 1), generator=gen).to("cuda")
    pre_ids = torch.randint(0, cfg.vocab_size, (8, 512), generator=gen).to("cuda")
    prompt = torch.randint(0, cfg.vocab_size, (1, 16), generator=gen).to("cuda")
    tensors = {}
    with torch.no_grad():
        lg, warm, times, eq = run_forwards(m, dec_ids, world, a.warmup, a.iters, watch, "decode")
        tensors["decode_logits"] = lg
        res["steady_from"] = steady_from
        res.update(decode_warmup_ms=warm, decode_ms=times,
                   decode_ms_median=round(statistics.median(times), 3),
                   decode_iterations_equal=eq, ft_usage_after_decode=ft_usage())
        lg, warm, times, eq = run_forwards(m, pre_ids, world, min(2, a.warmup), min(5, a.iters), watch, "prefill")
        tensors["prefill_logits"] = lg
        res.update(prefill_warmup_ms=warm, prefill_ms=times,
                   prefill_ms_median=round(statistics.median(times), 3),
                   prefill_iterations_equal=eq)
        seq = prompt
        watch.phase = "generate"
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(32):
            nxt = forward(m, seq, world)[:, -1, :].argmax(-1, keepdim=True)
            seq = torch.cat((seq, nxt), dim=1)
        torch.cuda.synchronize()
        tensors["tokens"] = seq[0, prompt.shape[1]:].tolist()
        res["generate_ms"] = round((time.perf_counter() - t) * 1e3, 3)
    torch.cuda.synchronize()
    res.update(watch.summary())
    if ft_usage(before_plan=True) is None:
        # without FlexTensor: the link as the job streams, every process copying at once
        res["h2d_gbps_concurrent"] = h2d_gbps(sync=dist.barrier if world > 1 else None)
    used = gpu_used_mib(local)
    usage = ft_usage()
    # what the process holds outside the budget once every kernel has run (lazily
    # loaded modules included): in use less PyTorch's reserved memory, or less what
    # FlexTensor holds under it
    held = usage["total"] if usage else torch.cuda.memory_reserved()
    res.update(max_memory_allocated=torch.cuda.max_memory_allocated(),
               max_memory_reserved=torch.cuda.max_memory_reserved(),
               mem_get_info=list(torch.cuda.mem_get_info()), ft_usage=usage,
               end_used_mib=None if used is None or idle is None else round(used - idle, 1),
               outside_mib=None if used is None or idle is None else round(used - idle - held / 1048576, 1))
    os.makedirs(a.outdir, exist_ok=True)
    torch.save(tensors, os.path.join(a.outdir, f"{a.tag}-rank{rank}.pt"))
    line = json.dumps(res)
    with open(os.path.join(a.outdir, f"{a.tag}-rank{rank}.json"), "w") as f:
        f.write(line + "\n")
    print(line, flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["make", "run"])
    ap.add_argument("outdir", nargs="?", default=".", help="run: where results go")
    ap.add_argument("--weights", required=True, help="folder of the shards' files")
    ap.add_argument("--world", type=int, default=2, help="make: how many shards")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--tag", default="run")
    a = ap.parse_args()
    cfg = llama_config(a.layers, a.hidden, rope_theta=10000.0)
    (make if a.mode == "make" else run)(a, cfg)


if __name__ == "__main__":
    main()
