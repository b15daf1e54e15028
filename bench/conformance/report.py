"""The conformance table, from the folder of one bench/conformance/run.sh call: its
runs.tsv (one line a process: case, kind, k, budget bytes, exit code, seconds, tag),
each process's TAG.json (bench/conformance/cases.py or jax_case.py, whose rows have
the same fields) and TAG.log (its stdout and
stderr, FlexTensor's report included). Standard library only (no torch), so that
run.sh can rewrite the table after every process.

    python3 bench/conformance/report.py LOGDIR [--json OUT.json]  > conformance.md

Columns (one row per case and budget):
  status    ok; DIFF (an output differs from the run without FlexTensor); CRASH rc;
            TIMEOUT (run.sh's per-process limit); SKIP (no time left in the call);
            SKIP (no jax) (a JAX case where jax cannot be imported); NOREF (the
            reference run failed, nothing to compare or size against)
  bitwise   outputs equal to the reference, bitwise (cases.py --ref), or the first
            key that differs
  peak      NVML every 5 ms in the process (ftbench.MemWatch): the GPU's memory in
            use less its use before the process, at its highest; against the budget
            plus the most memory in use outside FlexTensor's count (in use less
            ft_get_gpu_memory_usage's total) in the same samples: ok or OVER
  decode, prefill
            median step ms under FlexTensor / without; the link bound: the bytes of
            streamed weights after that phase (ft_get_gpu_memory_usage: unmapped +
            slots; for the MoE, times the share of the weights the steps used: every
            non-expert byte and the experts the router picked) over the host-to-device
            bandwidth (1 GiB pinned copies in the reference run, else the shim's own
            figure); ratio = FlexTensor / max(without, link), against 1.25 (dense) or
            1.5 (MoE decode)
  1st streamed
            seconds from the process's start to the end of the first step after which
            FlexTensor had a plan that streams; in brackets the reference's time to the
            end of the same step
  verdict   the shim's `flextensor: verdict:` line, up to its first bracket (in full
            below the table)
"""
import json
import os
import re
import sys

TARGET_DENSE, TARGET_MOE = 1.25, 1.5


def text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def load_json(path):
    t = text(path).strip()
    if not t:
        return None
    try:
        return json.loads(t.splitlines()[-1])
    except ValueError:
        return None


def read_runs(d):
    runs, order = {}, []
    for line in text(os.path.join(d, "runs.tsv")).splitlines():
        f = line.split("\t")
        if len(f) < 7:
            continue
        case, kind, k, budget, rc, secs, tag = f[:7]
        r = {"case": case, "kind": kind, "k": k, "budget": int(budget) if budget.isdigit() else None,
             "rc": rc, "secs": secs, "tag": tag,
             "json": load_json(os.path.join(d, tag + ".json")), "log": text(os.path.join(d, tag + ".log"))}
        runs[tag] = r
        if case not in order:
            order.append(case)
    return runs, order


def f(x, p=1):
    return "-" if x is None else f"{x:.{p}f}"


def last_match(pattern, log, group=1):
    m = re.findall(pattern, log, flags=re.M)
    if not m:
        return None
    v = m[-1]
    return v if isinstance(v, str) else v[group - 1]


def shim_lines(log):
    """FlexTensor's report lines worth reading in the table's notes."""
    keep = []
    for l in log.splitlines():
        if l.startswith(("flextensor: verdict:", "flextensor: plan (", "flextensor: device memory outside",
                         "flextensor: copy bandwidth")) or \
                (l.startswith("flextensor: residency: ") and
                 ("copied in" in l or "waited for the prefetching thread" in l or "handed the leaving" in l)):
            keep.append(l[:400])
    return keep


def skip_reason(j):
    """A row's "skipped" (jax_case.py without jax), up to its first bracket; None."""
    s = (j or {}).get("skipped")
    return str(s).split(" (")[0] if s else None


def status_of(r, ref_ok, ref_skipped=None):
    rc, j = r["rc"], r["json"]
    if rc == "skip":
        return "SKIP"
    if rc == "noref":
        return f"SKIP ({ref_skipped})" if ref_skipped else "NOREF"
    if rc in ("124", "137"):
        return "TIMEOUT"
    if rc != "0":
        return f"CRASH {rc}"
    if j is None:
        return "CRASH (no JSON)"
    if skip_reason(j):
        return f"SKIP ({skip_reason(j)})"
    if r["kind"] != "ref" and not ref_ok:
        return "NOREF"
    cmp_ = j.get("compare")
    if r["kind"] != "ref" and (cmp_ is None or not cmp_.get("equal")):
        return "DIFF" if cmp_ is not None else "NOREF"
    return "ok"


def bitwise_of(j):
    c = (j or {}).get("compare")
    if c is None:
        return "-"
    if c.get("equal"):
        return "yes"
    bad = [k for k, v in c.get("keys", {}).items() if not v.get("equal")]
    d = c["keys"][bad[0]] if bad else {}
    extra = d.get("why") or (f"max {d['max_abs_diff']:.3g}" if "max_abs_diff" in d else
                             f"{d.get('differing')} differ" if "differing" in d else "")
    row = d.get("first_differing_row")
    return f"NO: {bad[0] if bad else '?'}" + (f" row {row}" if row is not None else "") + \
        (f" ({extra})" if extra else "") + (f" +{len(bad) - 1}" if len(bad) > 1 else "")


def streamed_bytes(j, phase):
    u = (j or {}).get(f"ft_usage_after_main.{phase}")
    if not u or u.get("before_plan"):
        return None
    return u["unmapped"] + u["slots"]


def bandwidth(refj, log):
    """GB/s: the reference's 1 GiB pinned copies, else the shim's measurement."""
    if refj and refj.get("h2d_gbps"):
        return refj["h2d_gbps"], "ref"
    v = last_match(r"host to device ([0-9.]+) GB/s", log)
    return (float(v), "shim") if v else (None, None)


def step_cell(case, phase, j, refj, bw):
    """(cell text, ratio, target, judged ok/MISS/None)."""
    ph = (j or {}).get("phases", {}).get("main", {})
    rph = (refj or {}).get("phases", {}).get("main", {})
    ft, ref = ph.get(f"{phase}_ms_median"), rph.get(f"{phase}_ms_median")
    if ft is None:
        return "-", None, None, None
    s = streamed_bytes(j, phase)
    w = (j or {}).get("weights_bytes")
    used = ph.get(f"used_bytes_{phase}")
    share = used / w if used and w else 1.0
    link = s * share / (bw * 1e9) * 1e3 if s is not None and bw else None
    floor = max(x for x in (ref, link) if x is not None) if ref is not None or link is not None else None
    ratio = ft / floor if floor else None
    target = None if case == "moe" and phase == "prefill" else \
        TARGET_MOE if case == "moe" else TARGET_DENSE
    ok = None
    if ratio is not None and target is not None:
        ok = "ok" if ratio <= target else "MISS"
    cell = f"{f(ft)} / {f(ref)}, link {f(link)}" + (f" (x{share:.2f} used)" if share < 0.999 else "") + \
        f", **{f(ratio, 2)}**" + (f" {ok}" if ok else "")
    return cell, ratio, target, ok


def peak_cell(r, j):
    """(cell, judged ok/OVER/None)."""
    if not j:
        return "-", None
    b = r["budget"] / 1048576 if r["budget"] else None
    peak, out = j.get("watch_peak_mib"), j.get("watch_outside_max_mib")
    if peak is None:
        res = j.get("max_memory_reserved")
        if res is None:
            return "-", None
        # no NVML in the process: PyTorch's reserved memory only, nothing outside it
        v = res / 1048576
        ok = None if b is None else ("ok" if v <= b else "OVER")
        return f"{v:.0f} / {f(b, 0)} (torch reserved, no NVML)" + (f" {ok}" if ok else ""), ok
    if b is None:
        return f"{peak:.0f}", None
    ok = "ok" if peak <= b + (out or 0) + 0.5 else "OVER"
    return f"{peak:.0f} / {b:.0f} + {f(out, 0)} {ok}", ok


def first_cell(j, refj):
    fs = (j or {}).get("first_streamed")
    if not fs:
        return "-"
    ref_t = None
    for s in (refj or {}).get("steps", []):
        if s.get("ph") == fs.get("ph") and s.get("i") == fs.get("i"):
            ref_t = s.get("t1")
    return f"{fs['t1']:.1f} ({f(ref_t)}) {fs['ph']}#{fs['i']}"


def compile_note(j):
    """The compiled and JAX cases' extras: the first call of each shape (compilation),
    the compile settings, dynamo's graph breaks and cudagraph skips, XLA's allocator
    limit and peak; "" for the other cases."""
    j = j or {}
    ph = j.get("phases", {}).get("main", {})
    out = []
    if ph.get("compile_decode_s") is not None or ph.get("compile_prefill_s") is not None:
        out.append(f"first call (compiles) decode {f(ph.get('compile_decode_s'))} s, "
                   f"prefill {f(ph.get('compile_prefill_s'))} s")
    if j.get("compile_options"):
        cnt = j.get("compile_counters") or {}
        breaks = sum((cnt.get("graph_break") or {}).values())
        skips = (cnt.get("inductor") or {}).get("cudagraph_skips")
        out.append(f"torch.compile {j['compile_options']}, Inductor deterministic "
                   f"{j.get('inductor_deterministic')}, {breaks} graph break(s)"
                   + (f", {skips} cudagraph skip(s)" if skips else ""))
    mem = j.get("xla_memory_end") or j.get("xla_memory_after_load")
    if isinstance(mem, dict) and "bytes_limit" in mem:
        out.append(f"XLA limit {mem['bytes_limit'] / 1048576:.0f} MiB, peak in use "
                   f"{mem.get('peak_bytes_in_use', 0) / 1048576:.0f} MiB "
                   f"(PREALLOCATE={(j.get('xla_env') or {}).get('XLA_PYTHON_CLIENT_PREALLOCATE')})")
    return "; ".join(out)


def verdict_of(log):
    v = last_match(r"^flextensor: verdict: (.*)$", log)
    return v


def report(d):
    runs, order = read_runs(d)
    env = text(os.path.join(d, "env.txt")).strip().splitlines()
    lines = ["# FlexTensor conformance", ""]
    if env:
        lines += ["`" + " | ".join(env[:4]) + "`", ""]
    hdr = ["case", "1/k", "budget MiB", "status", "bitwise", "peak MiB / budget + outside",
           "decode ms FT / ref, link, ratio", "prefill ms FT / ref, link, ratio", "1st streamed s (ref)",
           "verdict"]
    lines += ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    notes, fails, refs, rows_json = [], [], [], []
    tally = {"runs": 0, "bitwise": 0, "mem_ok": 0, "mem_judged": 0, "perf_ok": 0, "perf_judged": 0,
             "crash": 0, "timeout": 0, "skip": 0}
    for case in order:
        ref = runs.get(f"{case}-ref")
        refj = ref["json"] if ref else None
        ref_ok = bool(ref and ref["rc"] == "0" and refj and not refj.get("error"))
        ref2 = runs.get(f"{case}-ref2")
        det = None
        if ref2 and ref2["json"] and ref2["json"].get("compare") is not None:
            det = bool(ref2["json"]["compare"].get("equal"))
        w = refj.get("weights_bytes") if refj else None
        ph = (refj or {}).get("phases", {}).get("main", {})
        rs = status_of(ref, True) if ref else "missing"
        ref_skipped = skip_reason(refj)
        cn = compile_note(refj)
        refs.append(f"- **{case}**: reference {rs} ({ref['secs'] if ref else '-'} s), weights "
                    f"{f(w / 1e9 if w else None, 2)} GB, decode {f(ph.get('decode_ms_median'))} ms, prefill "
                    f"{f(ph.get('prefill_ms_median'))} ms, ready at {f((refj or {}).get('ready_s'))} s, "
                    f"h2d {f((refj or {}).get('h2d_gbps'))} GB/s, peak {f((refj or {}).get('watch_peak_mib'), 0)} MiB"
                    + (f", prefill repeats equal {ph.get('prefill_iterations_equal')}"
                       if ph.get("prefill_iterations_equal") is not None else "")
                    + ("" if det is None else f"; **reference deterministic (two runs bitwise equal): "
                       f"{'yes' if det else 'NO: bitwise equality means nothing for this case'}**")
                    + (f"; tied {refj.get('tied')}" if refj and case == "tied" else "")
                    + (f"; dtypes {refj.get('dtypes')} on {refj.get('devices')}" if refj and
                       case.startswith("pretrained") else "")
                    + (f"; expert share per block per decode step "
                       f"{ph.get('expert_share_decode')}" if case == "moe" and ph else "")
                    + (f"; {cn}" if cn else ""))
        if ref and rs != "ok" and not rs.startswith("SKIP"):
            fails.append((f"{case} reference", ref))
        fts = sorted((r for r in runs.values() if r["case"] == case and r["kind"] == "ft"),
                     key=lambda r: int(r["k"]) if r["k"].isdigit() else 0)
        for r in fts:
            j, log = r["json"], r["log"]
            st = status_of(r, ref_ok, ref_skipped)
            bw, bw_src = bandwidth(refj, log)
            dec, dr, dt, dok = step_cell(case, "decode", j, refj, bw)
            pre, pr, pt, pok = step_cell(case, "prefill", j, refj, bw)
            peak, mok = peak_cell(r, j)
            v = verdict_of(log)
            # FlexTensor's own word: memory it served past the budget is in its count of
            # "outside" only when it is not its own (a graph's units loaded over the
            # slots), so the sampled peak alone can pass where the verdict says otherwise
            m = re.search(r"budget exceeded by up to ([0-9.]+ [KMG]iB)", v or "")
            if m and mok == "ok":
                peak, mok = peak.replace(" ok", f" OVER (the verdict: by up to {m.group(1)})"), "OVER"
            short = (v.split(" (")[0] if v else "-").replace("|", "/")
            bm = r["budget"] / 1048576 if r["budget"] else None
            row = [case, r["k"], f(bm, 0), st, bitwise_of(j) if not st.startswith("SKIP") else "-", peak, dec, pre,
                   first_cell(j, refj), short]
            lines.append("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")
            tally["runs"] += 1
            tally["bitwise"] += st == "ok"
            tally["crash"] += st.startswith("CRASH")
            tally["timeout"] += st == "TIMEOUT"
            tally["skip"] += st.startswith("SKIP")
            if mok:
                tally["mem_judged"] += 1
                tally["mem_ok"] += mok == "ok"
            for ok in (dok, pok):
                if ok:
                    tally["perf_judged"] += 1
                    tally["perf_ok"] += ok == "ok"
            rows_json.append({"case": case, "k": r["k"], "budget": r["budget"], "status": st,
                              "bitwise": ((j or {}).get("compare") or {}).get("equal"),
                              "decode_ratio": dr, "decode_target": dt, "prefill_ratio": pr, "prefill_target": pt,
                              "peak_mib": (j or {}).get("watch_peak_mib"),
                              "outside_mib": (j or {}).get("watch_outside_max_mib"),
                              "ft_max_mib": (j or {}).get("watch_ft_max_mib"), "verdict": v, "secs": r["secs"],
                              "first_streamed": (j or {}).get("first_streamed")})
            ln = shim_lines(log)
            extra = []
            if j:
                extra.append(f"FlexTensor held at most {f(j.get('watch_ft_max_mib'), 0)} MiB "
                             f"({j.get('watch_ft_max_phase', '-')}); peak in {j.get('watch_peak_phase', '-')}; "
                             f"outside at most {f(j.get('watch_outside_max_mib'), 0)} MiB "
                             f"({j.get('watch_outside_phase', '-')}); link at {f(bw)} GB/s ({bw_src or '-'}); "
                             f"streamed after decode {f((streamed_bytes(j, 'decode') or 0) / 1048576, 0)} MiB, "
                             f"after prefill {f((streamed_bytes(j, 'prefill') or 0) / 1048576, 0)} MiB; "
                             f"{r['secs']} s")
                if case == "free_load":
                    fa = next((s for s in j.get("steps", []) if s.get("ph", "").startswith("main.")
                               and s.get("plan") and s.get("streamed")), None)
                    extra.append(f"model B: ready at {f(j.get('ready_b_s'))} s, first streamed step "
                                 + (f"{fa['ph']}#{fa['i']} at {fa['t1']:.1f} s" if fa else "none"))
                if compile_note(j):
                    extra.append(compile_note(j))
            nw = sum(1 for l in log.splitlines() if l.startswith("flextensor: warning:"))
            ne = sum(1 for l in log.splitlines() if l.startswith("flextensor: error:"))
            extra.append(f"{nw} warning(s), {ne} error(s) in the shim's log")
            notes.append(f"- **{case} 1/{r['k']}** ({st}): " + "; ".join(extra) +
                         "".join(f"\n  - `{l}`" for l in ln))
            if st != "ok" and not st.startswith("SKIP"):
                fails.append((f"{case} 1/{r['k']}", r))
    lines.append("")
    lines.append(f"**Summary**: {tally['runs']} run(s) under FlexTensor: {tally['bitwise']} ok (bitwise "
                 f"equal, no crash), {tally['crash']} crash(es), {tally['timeout']} timeout(s), "
                 f"{tally['skip']} skipped (for time, or no jax); memory within budget + outside "
                 f"{tally['mem_ok']} of {tally['mem_judged']}; step time within its link-bound target "
                 f"{tally['perf_ok']} of {tally['perf_judged']} (dense decode/prefill <= {TARGET_DENSE}, "
                 f"MoE decode <= {TARGET_MOE}).")
    smoke = text(os.path.join(d, "smoke.txt")).rstrip()
    if smoke:
        lines += ["", "## Smoke test: every case in one process, tiny models, no FlexTensor", "",
                  "```", smoke, "```"]
    lines += ["", "## References (without FlexTensor)", ""] + refs
    lines += ["", "## Under FlexTensor", ""] + notes
    if fails:
        lines += ["", "## Failures: last lines of their logs", ""]
        for name, r in fails:
            j = r["json"] or {}
            tail = [l for l in r["log"].splitlines() if l.strip()][-15:]
            lines.append(f"### {name}: {status_of(r, True)}" + (f": {j['error']}" if j.get("error") else ""))
            lines += ["```"] + [l[:300] for l in tail] + ["```", ""]
    return "\n".join(lines) + "\n", rows_json


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: report.py LOGDIR [--json OUT.json]")
    md, rows = report(sys.argv[1])
    sys.stdout.write(md)
    if "--json" in sys.argv[2:]:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as fh:
            json.dump(rows, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
