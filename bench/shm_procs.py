"""The host-memory sampler and the table of bench/shm_procs.sh: N processes of one model
at once under FlexTensor, without and with FT_SHM_ENABLED's shared host copy (issue 12).

    python3 bench/shm_procs.py sample OUT.jsonl --proc TAG=JSON_PATH [--proc ...]
        [--every 0.5] [--weights PATH] [--ns NAMESPACE] [--max-s 600]
    python3 bench/shm_procs.py report LOGDIR [--json OUT.json]

sample: every --every seconds, one JSON line: /proc/meminfo (MemTotal, MemFree,
MemAvailable, Shmem), the size and allocated bytes of FlexTensor's segments in /dev/shm
(ft-NAMESPACE-*, or every ft-* without --ns), and for each process found, /proc/PID/smaps_rollup's totals and
/proc/PID/smaps's Rss and Pss by kind of mapping: "seg" FlexTensor's segments
(/dev/shm/ft-*), "pin" memory the driver maps (/dev/nvidia*: cudaHostAlloc's pinned
pages; simcuda-pinned on the simulator), "weights" the weights file the model is loaded
from (mmap), "anon" anonymous memory and the heap, "other" the rest (libraries). A
process is found by its command line: a python whose arguments hold JSON_PATH (the
offload_bench.py output the driver gave it; the ft-run it started from execs python in
place). Figures in KiB, as /proc gives them. Pss counts a page shared by k processes
1/k in each, so summed over the processes it counts the page once; Rss counts it in
each. It stops on SIGTERM or after --max-s.

report: reads LOGDIR (meta.txt, runs.tsv, each process's JSON and log, mem-P.jsonl) and
prints the table; compares each process's saved tensors with phase A's (torch.equal,
torch imported only there).

No torch at import: the sampler runs beside the processes it measures.
"""
import argparse
import json
import os
import re
import signal
import statistics
import sys
import time

KINDS = ("seg", "pin", "weights", "anon", "other")


# --- sample ---------------------------------------------------------------------------

def meminfo():
    r = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("MemTotal", "MemFree", "MemAvailable", "Shmem"):
                    r[k] = int(v.split()[0])
    except OSError:
        pass
    return r


def segments(ns):
    """FlexTensor's segments of namespace ns (every one when ns is empty) in /dev/shm:
    count, bytes (size), allocated bytes."""
    n, size, alloc = 0, 0, 0
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        names = []
    for name in names:
        if not name.startswith(f"ft-{ns}-" if ns else "ft-"):
            continue
        try:
            st = os.stat(os.path.join("/dev/shm", name))
        except OSError:
            continue
        n += 1
        size += st.st_size
        alloc += st.st_blocks * 512
    return {"n": n, "bytes": size, "alloc": alloc}


def kind_of(name, weights):
    if "/shm/ft-" in name:  # /dev/shm/ft-NS-FP (/run/shm/ where /dev/shm links there)
        return "seg"
    if name.startswith("/dev/nvidia") or "simcuda-pinned" in name:
        return "pin"
    if weights and (name == weights or name == weights + " (deleted)"):
        return "weights"
    if name == "" or name.startswith(("[heap]", "[anon", "[stack")):
        return "anon"
    return "other"


def smaps(pid, weights):
    """Rss and Pss (KiB) by kind of mapping, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps", "rb") as f:
            text = f.read().decode("latin-1")
    except OSError:
        return None
    c = {k: [0, 0] for k in KINDS}
    cur = c["other"]
    for line in text.split("\n"):
        if not line:
            continue
        ch = line[0]
        if ch in "0123456789abcdef":
            # a mapping's header: ADDR PERMS OFFSET DEV INODE [NAME]
            parts = line.split(None, 5)
            name = parts[5].strip() if len(parts) > 5 else ""
            cur = c[kind_of(name, weights)]
        elif ch == "R" and line.startswith("Rss:"):
            cur[0] += int(line.split()[1])
        elif ch == "P" and line.startswith("Pss:"):
            cur[1] += int(line.split()[1])
    return c


def rollup(pid):
    r = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem"):
                    r[k] = int(v.split()[0])
    except OSError:
        return None
    return r


def argv_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return None


def is_ours(argv, path):
    return bool(argv) and os.path.basename(argv[0]).startswith("python") and path in argv


def find(procs, known):
    """Updates known {tag: pid} for the processes of procs {tag: path} now running."""
    for tag, path in procs.items():
        pid = known.get(tag)
        if pid is not None and not is_ours(argv_of(pid), path):
            del known[tag]
    missing = {t: p for t, p in procs.items() if t not in known}
    if not missing:
        return
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return
    for pid in pids:
        argv = argv_of(pid)
        for tag, path in list(missing.items()):
            if is_ours(argv, path):
                known[tag] = int(pid)
                del missing[tag]
        if not missing:
            return


def sample(a):
    procs = {}
    for spec in a.proc:
        tag, _, path = spec.partition("=")
        procs[tag] = path
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    known, t_end = {}, time.time() + a.max_s
    with open(a.out, "a") as out:
        while not stop and time.time() < t_end:
            t0 = time.time()
            find(procs, known)
            rec = {"t": round(t0, 3), "mem": meminfo(), "seg": segments(a.ns), "p": {}}
            for tag, pid in sorted(known.items()):
                c, r = smaps(pid, a.weights), rollup(pid)
                if c is None or r is None:
                    continue
                rec["p"][tag] = dict(r, pid=pid, c=c)
            rec["ms"] = round((time.time() - t0) * 1e3, 1)
            out.write(json.dumps(rec) + "\n")
            out.flush()
            dt = a.every - (time.time() - t0)
            if dt > 0 and not stop:
                time.sleep(dt)
    return 0


# --- report ---------------------------------------------------------------------------

def text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def last_json(path):
    lines = [l for l in text(path).splitlines() if l.strip().startswith("{")]
    try:
        return json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}


def read_samples(path):
    r = []
    for line in text(path).splitlines():
        try:
            r.append(json.loads(line))
        except ValueError:
            pass  # a line cut when the sampler was stopped
    return r


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def gib_of_kib(x):
    return None if x is None else x / 1048576.0


def f(x, p=2):
    return "-" if x is None else f"{x:.{p}f}"


# What a process's figures are, from one sample's entry (KiB).
FIGURES = (
    ("pss", "Pss, every mapping", lambda e: e.get("Pss")),
    ("seg", "  FlexTensor segment /dev/shm/ft-*", lambda e: e["c"]["seg"][1]),
    ("pin", "  driver-mapped /dev/nvidia* (cudaHostAlloc)", lambda e: e["c"]["pin"][1]),
    ("anon", "  anonymous and heap", lambda e: e["c"]["anon"][1]),
    ("weights", "  the weights file (mmap)", lambda e: e["c"]["weights"][1]),
    ("other", "  other (libraries, files)", lambda e: e["c"]["other"][1]),
    ("rss", "Rss, every mapping (a shared page in each)", lambda e: e.get("Rss")),
    ("pss_shmem", "Pss_Shmem (smaps_rollup)", lambda e: e.get("Pss_Shmem")),
)
# System-wide figures, from one sample, less the phase's first sample (KiB).
SYSTEM = (
    ("used", "system: MemTotal-MemAvailable, less before",
     lambda s: s["mem"].get("MemTotal", 0) - s["mem"].get("MemAvailable", 0)),
    ("shmem", "system: Shmem, less before", lambda s: s["mem"].get("Shmem")),
    ("segalloc", "/dev/shm/ft-* allocated", lambda s: s["seg"]["alloc"] / 1024.0),
)


def windows(J, tags):
    """Each process's steady state: its timed decode steps to its last timed prefill."""
    w = {}
    for t in tags:
        j = J.get(t) or {}
        t0, t1 = j.get("decode_t0"), j.get("prefill_t1") or j.get("decode_t1")
        if t0 is not None and t1 is not None and t1 > t0:
            w[t] = (t0, t1)
    return w


def phase_memory(samples, J, tags):
    """Steady-state and peak figures of one phase, summed over its processes (KiB), and
    how the steady state was taken."""
    r = {"steady": {}, "peak": {}, "how": "no samples", "samples": len(samples)}
    if not samples:
        return r
    base = samples[0]
    if base.get("p"):
        r["how_base"] = "a process was already running at the first sample"
    w = windows(J, tags)
    common = None
    if tags and len(w) == len(tags):
        lo, hi = max(v[0] for v in w.values()), min(v[1] for v in w.values())
        if hi > lo:
            common = (lo, hi)
    in_common = [s for s in samples if common and common[0] <= s["t"] <= common[1]
                 and all(t in s["p"] for t in tags)]

    def total(s, fn):
        vals = [fn(s["p"][t]) for t in tags if t in s["p"]]
        vals = [v for v in vals if v is not None]
        return sum(vals) if vals else None

    for key, _, fn in FIGURES:
        r["peak"][key] = max((v for v in (total(s, fn) for s in samples) if v is not None), default=None)
        if in_common:
            r["steady"][key] = med(total(s, fn) for s in in_common)
        else:
            per = []
            for t in tags:
                lo, hi = w.get(t, (float("-inf"), float("inf")))
                per.append(med(fn(s["p"][t]) for s in samples if t in s["p"] and lo <= s["t"] <= hi))
            per = [v for v in per if v is not None]
            r["steady"][key] = sum(per) if per else None
    if in_common:
        r["how"] = f"{len(in_common)} samples while all {len(tags)} were in their timed steps"
        sys_s = in_common
    else:
        lo = min((v[0] for v in w.values()), default=None)
        hi = max((v[1] for v in w.values()), default=None)
        sys_s = [s for s in samples if lo is not None and lo <= s["t"] <= hi]
        r["how"] = ("each process's own timed steps (they did not overlap)" if w
                    else "no timed steps recorded: every sample a process was seen")
        if not sys_s:
            sys_s = [s for s in samples if s.get("p")]
    for key, _, fn in SYSTEM:
        b = fn(base) if key != "segalloc" else 0
        vals = [fn(s) for s in samples]
        if b is None or any(v is None for v in vals):
            continue
        r["peak"][key] = max(v - b for v in vals)
        r["steady"][key] = med(fn(s) - b for s in sys_s) if sys_s else None
    r["sample_ms"] = med(s.get("ms") for s in samples)
    r["every_s"] = med(b["t"] - a["t"] for a, b in zip(samples, samples[1:])) if len(samples) > 1 else None
    return r


def mib_of(num, unit):
    return float(num) * (1024.0 if unit == "GiB" else 1.0)


def ft_log(log):
    """What FlexTensor's exit report says of its host stores (MiB), its verdict."""
    r = {}
    m = re.findall(r"residency: (\d+) unit\(s\), ([0-9.]+) MiB, moved to ([^;]+);", log)
    if m:
        r["streamed_units"], r["streamed_mib"], r["store_kind"] = int(m[-1][0]), float(m[-1][1]), m[-1][2]
    m = re.findall(r"shm: segment (\S+): (\d+) unit\(s\), ([0-9.]+) (MiB|GiB), used from it: (\d+) filled by this "
                   r"process \((\d+) taken over[^)]*\), (\d+) checked and used as another filled them; private "
                   r"copies: (\d+) waited out, (\d+) differing, (\d+) written to here, (\d+) without room", log)
    if m:
        g = m[-1]
        r.update(seg=g[0], shared_units=int(g[1]), shared_mib=mib_of(g[2], g[3]), filled=int(g[4]),
                 taken_over=int(g[5]), checked=int(g[6]), waited_out=int(g[7]), differing=int(g[8]),
                 written=int(g[9]), no_room=int(g[10]))
    m = re.findall(r"shm: (created|attached to) segment (\S+) \((\d+) unit\(s\), ([0-9.]+) (MiB|GiB)", log)
    if m:
        r["seg_how"], r["seg_size_mib"] = m[-1][0], mib_of(m[-1][3], m[-1][4])
    m = re.findall(r"host memory: ([0-9.]+) MiB of [^,]* held by FlexTensor after the switch[^,]*"
                   r"(?:, ([0-9.]+) MiB at exit)?", log)
    if m:
        # at exit when the line has it: the units made to stream past the plan too
        r["private_host_mib"] = float(m[-1][1] or m[-1][0])
    m = re.findall(r"^flextensor: verdict: (.*)$", log, re.M)
    if m:
        r["verdict"] = m[-1]
    r["warnings"] = len(re.findall(r"^flextensor: warning:", log, re.M))
    r["errors"] = len(re.findall(r"^flextensor: error:", log, re.M))
    r["shm_lines"] = [l for l in log.splitlines()
                      if l.startswith(("flextensor: shm:", "flextensor: warning: shm:", "flextensor: error: shm:"))]
    return r


def compare(ref_path, path):
    """'yes' when every saved tensor equals the reference's (torch.equal), else what
    differs; '-' when either is missing."""
    if not ref_path or not path or not os.path.exists(ref_path) or not os.path.exists(path):
        return "-", {}
    try:
        import torch
        a = torch.load(ref_path, weights_only=True)
        b = torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001 (the table must come back)
        return f"error ({type(e).__name__})", {}
    per, diff = {}, []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x is None and y is None:
            continue
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            eq = x.shape == y.shape and x.dtype == y.dtype and bool(torch.equal(x, y))
            if not eq and x.shape == y.shape:
                try:
                    per[k + "_maxabs"] = float((x.float() - y.float()).abs().max())
                except Exception:  # noqa: BLE001 (a figure beside the verdict, not needed)
                    pass
        else:
            eq = x == y
        per[k] = eq
        if not eq:
            diff.append(k)
    return ("yes" if not diff else "DIFF " + ",".join(diff)), per


def read_meta(d):
    m = {}
    for line in text(os.path.join(d, "meta.txt")).splitlines():
        k, _, v = line.partition("=")
        if k:
            m[k.strip()] = v.strip()
    return m


def read_runs(d):
    """runs.tsv: phase, tag, kind, rc (or skip), seconds."""
    runs = []
    for line in text(os.path.join(d, "runs.tsv")).splitlines():
        p = line.split("\t")
        if len(p) >= 5:
            runs.append({"phase": p[0], "tag": p[1], "kind": p[2], "rc": p[3], "secs": p[4]})
    return runs


def status(rc):
    return {"0": "ok", "124": "TIMEOUT", "137": "KILLED", "skip": "SKIP"}.get(rc, f"rc {rc}")


def report(a):
    d = a.logdir
    meta, runs = read_meta(d), read_runs(d)
    n = int(meta.get("NPROC", "3") or 3)
    # runs.tsv is in the order the processes ended; the table goes by number
    tags = {p: sorted((r["tag"] for r in runs if r["phase"] == p), key=lambda t: int(t[1:]) if t[1:].isdigit() else 0)
            for p in ("A", "B", "C")}
    J = {r["tag"]: last_json(os.path.join(d, r["tag"] + ".json")) for r in runs}
    L = {r["tag"]: ft_log(text(os.path.join(d, r["tag"] + ".log"))) for r in runs}
    R = {r["tag"]: r for r in runs}
    M = {p: phase_memory(read_samples(os.path.join(d, f"mem-{p}.jsonl")), J, [t for t in tags[p] if R[t]["rc"] != "skip"])
         for p in ("A", "B", "C")}
    ref_tag = tags["A"][0] if tags["A"] else None
    ref_pt = (J.get(ref_tag) or {}).get("tensors") if ref_tag else None
    bit = {}
    for p in ("B", "C"):
        for t in tags[p]:
            bit[t] = compare(ref_pt, (J.get(t) or {}).get("tensors"))

    out, js = [], {"meta": meta, "runs": runs, "memory": M, "ft": L, "bitwise": {t: v[0] for t, v in bit.items()},
                   "bitwise_detail": {t: v[1] for t, v in bit.items()}}
    j0 = next((J[t] for t in tags["A"] + tags["B"] + tags["C"] if J.get(t)), {})
    out.append(f"== FlexTensor FT_SHM_ENABLED: {n} processes at once, Llama {meta.get('LAYERS', '?')} layers, hidden "
               f"{meta.get('HIDDEN', '?')}, {f((j0.get('param_bytes') or 0) / 1e9)} GB bf16 weights; budget "
               f"{meta.get('BUDGET', '?')} each (ft-run --gpu-mem); {j0.get('device', '?')}")
    out.append(f"   A: 1 process without FlexTensor (the reference); B: {n} under ft-run, private host copies; "
               f"C: {n} under ft-run with FT_SHM_ENABLED=1 FT_SHM_NAMESPACE={meta.get('NS', '?')}")
    env = [l.strip() for l in text(os.path.join(d, "env.txt")).splitlines() if l.strip()]
    if env:
        out.append("   " + " | ".join(env[:5]))
    out.append(f"   decode 1x1: {meta.get('WARMUP', '?')} warm-up + {meta.get('ITERS', '?')} timed forwards; prefill 8x512: "
               f"2 + {min(5, int(meta.get('ITERS', '5') or 5))}; the processes of a phase wait for each other before "
               f"each timed part (ftbench.Barrier)")

    # --- per process: status, bitwise, step times, FlexTensor's line
    hdr = ("proc", "status", "s", "bitwise = A", "decode ms", "prefill ms", "streamed MiB", "shared MiB",
           "filled/checked", "barrier")
    rows = []
    for p in ("A", "B", "C"):
        for t in tags[p]:
            j, l, r = J.get(t) or {}, L.get(t) or {}, R[t]
            bar = "-"
            if "decode_barrier_all" in j:
                bar = ("all" if j.get("decode_barrier_all") and j.get("prefill_barrier_all") else "NOT ALL") + \
                      f" {f(j.get('decode_barrier_s', 0), 1)}+{f(j.get('prefill_barrier_s', 0), 1)} s"
            fc = f"{l['filled']}/{l['checked']}" if "filled" in l else "-"
            rows.append((t, status(r["rc"]), r["secs"], "ref" if p == "A" else bit.get(t, ("-",))[0],
                         f(j.get("decode_ms_median")), f(j.get("prefill_ms_median")), f(l.get("streamed_mib"), 1),
                         f(l.get("shared_mib"), 1), fc, bar))
    w = [max(len(str(x[i])) for x in rows + [hdr]) for i in range(len(hdr))]
    fmt = lambda x: "  ".join(str(c).ljust(w[i]) if i < 4 else str(c).rjust(w[i]) for i, c in enumerate(x))
    out += ["", fmt(hdr)] + [fmt(x) for x in rows]

    def pmed(p, key):
        return med((J.get(t) or {}).get(key) for t in tags[p])

    ref = J.get(ref_tag) or {}
    streamed = med((L.get(t) or {}).get("streamed_mib") for t in tags["B"] + tags["C"])
    h2d = ref.get("h2d_gbps")
    for key, name in (("decode_ms_median", "decode"), ("prefill_ms_median", "prefill")):
        a_, b_, c_ = ref.get(key), pmed("B", key), pmed("C", key)
        link = n * streamed * 1048576 / (h2d * 1e9) * 1e3 if streamed and h2d else None
        out.append(f"{name} median of the processes' medians, ms: A {f(a_)}, B {f(b_)}, C {f(c_)}; C/B "
                   f"{f(c_ / b_ if c_ and b_ else None, 3)}; link bound with {n} streaming at once "
                   f"{f(link)} ({n} x {f(streamed, 0)} MiB at {f(h2d)} GB/s, A's 1 GiB pinned copies)")
    js["steps"] = {p: {k: pmed(p, k) for k in ("decode_ms_median", "prefill_ms_median")} for p in ("B", "C")}

    # --- host memory
    out.append("")
    out.append(f"host memory (GiB), summed over each phase's processes: steady state = median over the timed steps; "
               f"peak = the largest sample")
    names = [("A", "A (1 plain)"), ("B", f"B ({n} private)"), ("C", f"C ({n} shared)")]
    hdr2 = ["", ] + [f"{nm} steady" for _, nm in names] + [f"{p} peak" for p, _ in names]
    rows2 = []
    for key, label, _ in FIGURES + SYSTEM:
        rows2.append([label] + [f(gib_of_kib(M[p]["steady"].get(key))) for p, _ in names] +
                     [f(gib_of_kib(M[p]["peak"].get(key))) for p, _ in names])
    w2 = [max(len(str(x[i])) for x in rows2 + [hdr2]) for i in range(len(hdr2))]
    fmt2 = lambda x: "  ".join(str(c).ljust(w2[i]) if i == 0 else str(c).rjust(w2[i]) for i, c in enumerate(x))
    out += [fmt2(hdr2)] + [fmt2(x) for x in rows2]
    for p, nm in names:
        out.append(f"  {p}: steady state from {M[p]['how']}; {M[p]['samples']} samples, every "
                   f"{f(M[p].get('every_s'), 2)} s, {f(M[p].get('sample_ms'), 0)} ms each"
                   + (f"; {M[p]['how_base']}" if M[p].get("how_base") else ""))

    # --- FlexTensor's stores: three measures against one process's streamed bytes. A
    # private process's host store at exit counts the units made to stream past the
    # plan as well, which the residency line (the switch) does not; its median is the
    # measure where B's exit reports give it.
    one_b = med((L.get(t) or {}).get("private_host_mib") for t in tags["B"])
    one, one_how = (one_b, "a private process's host store at exit, B's median") if one_b else \
        (streamed, "the exit report's residency line")
    out.append("")
    out.append(f"FlexTensor's host stores, {n} processes together, against one process's streamed bytes "
               f"({f(one, 0)} MiB, {one_how}; issue 12's target: C <= 1.2x, B about {n}x):")
    a_pin = M["A"]["steady"].get("pin")
    a_pss = M["A"]["steady"].get("pss")
    a_w = M["A"]["steady"].get("weights") or 0
    a_used = M["A"]["steady"].get("used")
    js["stores"] = {}
    for p in ("B", "C"):
        s = M[p]["steady"]
        L_p = [L.get(t) or {} for t in tags[p]]
        # The segments once each (processes that computed other fingerprints made
        # segments of their own), and what each process holds of its own after the
        # switch (its exit report); before that line existed, streamed less used
        # from the segment, never below 0.
        segs = {}
        for l in L_p:
            if l.get("seg") or l.get("seg_size_mib"):
                segs[l.get("seg") or id(l)] = max(segs.get(l.get("seg") or id(l), 0),
                                                  l.get("seg_size_mib") or l.get("shared_mib") or 0)
        shared = sum(segs.values())
        private = sum(l["private_host_mib"] if l.get("private_host_mib") is not None else
                      max(0.0, (l.get("streamed_mib") or 0) - (l.get("shared_mib") or 0)) for l in L_p)
        own = (shared + private) * 1024 if any(l.get("streamed_mib") for l in L_p) else None
        by_map = (s.get("seg") or 0) + s["pin"] - n * a_pin if s.get("pin") is not None and a_pin is not None else None
        by_pss = (s["pss"] - (s.get("weights") or 0) - n * (a_pss - a_w)
                  if s.get("pss") is not None and a_pss is not None else None)
        by_sys = s["used"] - n * a_used if s.get("used") is not None and a_used is not None else None
        js["stores"][p] = {"ft_own_kib": own, "smaps_seg_pin_kib": by_map, "pss_less_plain_kib": by_pss,
                           "system_less_plain_kib": by_sys, "streamed_one_mib": one,
                           "shared_once_mib": shared, "private_sum_mib": private}

        def x(v, judged=True):
            if v is None or not one:
                return f"{f(gib_of_kib(v))} GiB"
            ratio = v / 1024.0 / one
            mark = ""
            if p == "C" and judged:
                mark = " ok" if ratio <= 1.2 else " MISS"
            return f"{f(gib_of_kib(v))} GiB = {ratio:.2f}x{mark}"
        ok = sum(1 for t in tags[p] if R[t]["rc"] == "0")
        out.append(f"  {p} ({ok} of {len(tags[p])} processes ended well): FlexTensor's count {x(own)} ({len(segs)} "
                   f"segment(s), {f(shared / 1024.0)} GiB once + private {f(private / 1024.0)} GiB summed)")
        out.append(f"     smaps: segment + driver-mapped Pss, less {n}x A's driver-mapped {x(by_map)}")
        out.append(f"     smaps: all Pss (less the weights file), less {n}x A's {x(by_pss)}")
        out.append(f"     system (rough: every process's own memory moves it): MemTotal-MemAvailable over "
                   f"before, less {n}x A's {x(by_sys, False)}")

    # --- FlexTensor's own lines
    out.append("")
    for p in ("B", "C"):
        for t in tags[p]:
            l = L.get(t) or {}
            if R[t]["rc"] == "skip":
                continue
            v = l.get("verdict", "-")
            out.append(f"  {t}: verdict: {v[:150]}; {l.get('warnings', 0)} warning(s), {l.get('errors', 0)} error(s)"
                       + (f"; streamed to {l['store_kind']}" if l.get("store_kind") else ""))
    for t in tags["C"]:
        l = L.get(t) or {}
        if R[t]["rc"] == "skip":
            continue
        if "filled" in l:
            out.append(f"  {t}: shm: {l.get('seg_how', '?')} {l['seg']}; {l['shared_units']} unit(s), "
                       f"{f(l['shared_mib'], 1)} MiB used from it: {l['filled']} filled ({l['taken_over']} taken over), "
                       f"{l['checked']} checked; private: {l['waited_out']} waited out, {l['differing']} differing, "
                       f"{l['written']} written to, {l['no_room']} without room or pinning")
        else:
            out.append(f"  {t}: no shm exit line (the segment was not used)")
        odd = [x for x in l.get("shm_lines", []) if x.startswith(("flextensor: warning:", "flextensor: error:"))]
        out += [f"  {t}: {x[len('flextensor: '):][:220]}" for x in odd[:3]]
    for k in ("SHM_NOTE", "WEIGHTS_NOTE", "CLEAN"):
        if meta.get(k):
            out.append(f"{k.lower()}: {meta[k]}")
    for t in tags["A"] + tags["B"] + tags["C"]:
        if R[t]["rc"] not in ("0", "skip"):
            tail = [l for l in text(os.path.join(d, t + ".log")).splitlines() if "miss on" not in l][-6:]
            out.append(f"  {t} ({status(R[t]['rc'])}), last lines:")
            out += [f"    | {l[:200]}" for l in tail]
    print("\n".join(out))
    if a.json:
        with open(a.json, "w") as fo:
            json.dump(js, fo, indent=1, default=str)
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("out")
    s.add_argument("--proc", action="append", default=[], metavar="TAG=JSON_PATH")
    s.add_argument("--every", type=float, default=0.5)
    s.add_argument("--weights", default="")
    s.add_argument("--ns", default="")
    s.add_argument("--max-s", type=float, default=600.0)
    r = sub.add_parser("report")
    r.add_argument("logdir")
    r.add_argument("--json", default=None)
    a = ap.parse_args()
    return sample(a) if a.cmd == "sample" else report(a)


if __name__ == "__main__":
    sys.exit(main())
