"""A transformers Llama model with random bf16 weights, built from a config (no
download), run for a few forwards; the logits of every forward are saved so that a
run under FlexTensor can be compared bitwise with a run without it.

    python3 bench/llama_forward.py OUT.pt [--layers 16] [--hidden 4096] [--iters 3]

The weights are made on the CPU and copied to the GPU (cudaMemcpy, no kernels), as a
checkpoint load would do. Prints one JSON line with the timings and the parameter
bytes.
"""
import argparse
import json
import time

import torch
from transformers import LlamaForCausalLM

from ftbench import fill_random, ft_usage, llama_config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    a = ap.parse_args()

    cfg = llama_config(a.layers, a.hidden)
    t0 = time.time()
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    gen = torch.Generator().manual_seed(1234)
    fill_random(model, gen)
    model.model.rotary_emb.__init__(config=cfg)  # rotary inv_freq: recomputed on the CPU
    t_build = time.time() - t0
    model = model.to("cuda")
    model.eval()
    params = sum(p.numel() * p.element_size() for p in model.parameters())

    ids = torch.randint(0, cfg.vocab_size, (1, a.tokens), generator=gen).to("cuda")
    outs, times = [], []
    with torch.no_grad():
        for _ in range(a.iters):
            torch.cuda.synchronize()
            t = time.time()
            logits = model(ids).logits
            torch.cuda.synchronize()
            times.append(time.time() - t)
            outs.append(logits.float().cpu())
    same = all(torch.equal(outs[0], o) for o in outs[1:])
    torch.save(outs, a.out)
    free_b, total_b = torch.cuda.mem_get_info()
    print(json.dumps({"param_bytes": params, "build_s": round(t_build, 2),
                      "forward_s": [round(x, 4) for x in times], "iterations_equal": same,
                      "mem_get_info": [free_b, total_b], "ft_usage": ft_usage()}))


if __name__ == "__main__":
    main()
