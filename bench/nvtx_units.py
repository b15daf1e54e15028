"""NVTX ranges name FlexTensor's units: a small Llama (shapes from a transformers
LlamaConfig, random bf16 weights, no download) whose decoder layers, embeddings and
head each run inside an NVTX range named after the module (torch.cuda.nvtx, pushed and
popped by forward hooks), run for a few forwards. Under ft-run (which points
NVTX_INJECTION64_PATH at libflextensor-nvtx.so) discovery should name each unit after
its range; ft-trace shows the names.

    ft-run --trace T.bin python3 bench/nvtx_units.py [--layers 4] [--hidden 4096] [--iters 6]
    python3 bench/nvtx_units.py ...     the same without the shim: the logits to compare

Prints one JSON line: the last forward's logits' sum and a hash of their bytes.
"""
import argparse
import hashlib
import json

import torch
from transformers import LlamaForCausalLM

from ftbench import llama_config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--keep-logits", action="store_true",
                    help="keep the last forward's logits alive through the next one")
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = llama_config(a.layers, a.hidden)
    # built on the CPU, then moved: each weight gets its own allocation, as in
    # bench/llama_forward.py (built on the GPU in float32 and then cast, the bf16
    # weights were packed into the float32 weights' freed segments, several layers in
    # one region, and discovery rightly found one unit); hidden 4096 gives every
    # projection 32 MiB or more, PyTorch's own segment each
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval().to("cuda")
    named = [("embed_tokens", model.model.embed_tokens), ("norm", model.model.norm), ("lm_head", model.lm_head)]
    named += [(f"layers.{i}", layer) for i, layer in enumerate(model.model.layers)]
    # the hooks must return None: a forward pre-hook's result replaces the module's
    # arguments, and range_push / range_pop return the nesting depth
    def push(name):
        def hook(module, args):
            torch.cuda.nvtx.range_push(name)
        return hook

    def pop(module, args, out):
        torch.cuda.nvtx.range_pop()

    for name, mod in named:
        mod.register_forward_pre_hook(push(name))
        mod.register_forward_hook(pop)
    ids = torch.randint(0, cfg.vocab_size, (1, 8), generator=torch.Generator().manual_seed(1)).to("cuda")
    with torch.no_grad():
        logits = None
        for _ in range(a.iters):
            # The last logits are dropped first (as bench/ftbench.repeat_forwards does):
            # kept alive through the next forward, its small activations alternate
            # between two places in PyTorch's shared 2 MiB segments, and discovery then
            # takes two forwards for one pass (--keep-logits shows it)
            if not a.keep_logits:
                logits = None
            logits = model(ids).logits
    torch.cuda.synchronize()
    raw = logits.float().cpu().numpy().tobytes()
    print(json.dumps({"logits_sum": float(logits.float().sum()), "sha1": hashlib.sha1(raw).hexdigest(),
                      "ranges": [n for n, _ in named]}), flush=True)


if __name__ == "__main__":
    main()
