"""One process, two GPUs: a transformers Llama with random bf16 weights split in
pipeline fashion (embeddings and the first half of the layers on cuda:0, the rest,
the final norm and the head on cuda:1; accelerate's dispatch_model moves the hidden
states between them). Under FlexTensor, the shim manages cuda:0 (the first
allocation's device) while every forward also launches on cuda:1, so discovery's
snapshots and the residency engine's checksums can be asked for from a thread whose
current device is cuda:1. The logits of every forward are saved for a bitwise
comparison with a run without the shim.

    python3 bench/two_devices.py OUT.pt [--layers 8] [--hidden 4096] [--iters 10]

Prints one JSON line: parameter bytes per device, forward times, logits equal across
forwards.
"""
import argparse
import json
import time

import torch
from accelerate import dispatch_model
from transformers import LlamaForCausalLM

from ftbench import fill_random, llama_config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=128)
    a = ap.parse_args()

    cfg = llama_config(a.layers, a.hidden)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    gen = torch.Generator().manual_seed(1234)
    fill_random(model, gen)
    model.model.rotary_emb.__init__(config=cfg)
    model.eval()
    half = a.layers // 2
    device_map = {"model.embed_tokens": 0, "model.rotary_emb": 0, "model.norm": 1, "lm_head": 1}
    for i in range(a.layers):
        device_map[f"model.layers.{i}"] = 0 if i < half else 1
    torch.cuda.set_device(0)
    model = dispatch_model(model, device_map=device_map)
    per_dev = {0: 0, 1: 0}
    for p in model.parameters():
        per_dev[p.device.index] += p.numel() * p.element_size()

    ids = torch.randint(0, cfg.vocab_size, (1, a.tokens), generator=gen).to("cuda:0")
    outs, times = [], []
    with torch.no_grad():
        for _ in range(a.iters):
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            t = time.time()
            logits = model(ids).logits
            torch.cuda.synchronize(1)
            times.append(time.time() - t)
            outs.append(logits.float().cpu())
    same = all(torch.equal(outs[0], o) for o in outs[1:])
    torch.save(outs, a.out)
    print(json.dumps({"param_bytes": per_dev, "forward_s": [round(x, 4) for x in times],
                      "iterations_equal": same, "logits_device": str(logits.device)}))


if __name__ == "__main__":
    main()
