#!/usr/bin/env python3
"""Load benchmark of `troupe serve` over the WebSocket protocol (docs/protocol.md).

Opens --streams (default 64) concurrent WebSocket streams, each a greedy (temperature 0) request
with its own prompt, and reports throughput, time to first token, inter-token gaps and end-to-end
latency as seen by the client. It checks that
  - every stream completes with exactly --max-tokens consecutive tokens,
  - each output equals the one the same prompt gets alone (run first, one at a time; --check N
    limits that to the first N prompts),
  - the server's RSS comes back after the load: the whole load runs --rounds times (default 3);
    RSS is read, settled, before the load and after each round, and after the last round must be
    within 5% of where the first round left it (the first round's own growth, KV blocks and
    allocator arenas touched once, is printed too).
Exit code 1 when a check fails.

By default it starts `build/troupe serve --no-cache` on a free loopback port (the response cache
would otherwise answer the load phase from the isolated runs) and stops it at the end. --url
targets a running server instead (give --pid for the RSS check; answers from its cache fail the
check). Run it in the test venv, which has `websockets`:
    bash scripts/test-venv.sh && .cache/test-venv/bin/python bench/load.py
"""
import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "clients"))

from websockets.asyncio.client import connect  # noqa: E402

from harness import Server  # noqa: E402  (starts troupe serve in a scratch directory)

TOPICS = ["the ocean", "volcanoes", "honey bees", "the moon", "bread", "trains", "chess", "rain",
          "libraries", "bicycles", "coffee", "glaciers", "owls", "music", "bridges", "gardens"]
FORMS = ["Write a short paragraph about {}.", "Explain {} to a child.", "List three facts about {}.",
         "Describe {} in a few sentences."]


def prompts(n):
    out = [f.format(t) for f in FORMS for t in TOPICS]
    while len(out) < n:
        out += [p + " Be brief." for p in out[: n - len(out)]]
    return out[:n]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def one_stream(url, rid, prompt, max_tokens, timeout):
    """One request on its own socket: its tokens with arrival times and the final frame."""
    async with connect(url, open_timeout=timeout, ping_timeout=None, max_size=None) as ws:
        t0 = time.monotonic()
        await ws.send(json.dumps({"type": "generate", "id": rid, "messages": [{"role": "user", "content": prompt}],
                                  "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}))
        tokens, arrivals = [], []
        while True:
            f = json.loads(await asyncio.wait_for(ws.recv(), timeout))
            if f.get("id") != rid:
                raise RuntimeError(f"stream {rid}: unexpected frame {f}")
            if f["type"] == "token":
                tokens.append(f)
                arrivals.append(time.monotonic())
            elif f["type"] in ("done", "error"):
                return {"id": rid, "prompt": prompt, "start": t0, "end": time.monotonic(), "tokens": tokens,
                        "arrivals": arrivals, "final": f,
                        "text": "".join(t["text"] for t in tokens) + (f.get("text") or "")}


def fmt_ms(xs):
    return (f"p50 {pct(xs, 50) * 1000:8.1f}  p90 {pct(xs, 90) * 1000:8.1f}  p99 {pct(xs, 99) * 1000:8.1f}  "
            f"max {max(xs) * 1000:8.1f} ms")


async def settled_rss(pid):
    """The server's RSS once it had a moment to free what the streams held: the lowest of ten
    readings over five seconds."""
    readings = []
    for _ in range(10):
        await asyncio.sleep(0.5)
        readings.append(rss_bytes(pid))
    return min(readings)


async def bench(args, url, pid):
    ps = prompts(args.streams)
    problems = []

    def check(ok, what):
        if not ok:
            problems.append(what)
        return ok

    # 1. Isolated greedy references, one at a time (this also warms the server up).
    n_ref = args.streams if args.check is None else min(args.check, args.streams)
    print(f"isolated runs: {n_ref} prompts, one at a time ...", flush=True)
    t = time.monotonic()
    refs = {}
    for i in range(n_ref):
        r = await one_stream(url, f"ref-{i}", ps[i], args.max_tokens, args.timeout)
        check(r["final"]["type"] == "done", f"isolated run {i} failed: {r['final']}")
        refs[i] = r
    ref_s = time.monotonic() - t
    ref_tokens = sum(len(r["tokens"]) for r in refs.values())
    print(f"  {ref_tokens} tokens in {ref_s:.1f} s ({ref_tokens / ref_s:.1f} tokens/s, one stream)")

    # 2. The load, --rounds times: every stream at once, each on its own socket.
    rss = [await settled_rss(pid)] if pid else []
    rounds = []
    compared = matched = 0
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds}: {args.streams} concurrent streams x {args.max_tokens} tokens ...",
              flush=True)
        t0 = time.monotonic()
        runs = await asyncio.gather(*(one_stream(url, f"load{rnd}-{i}", ps[i], args.max_tokens, args.timeout)
                                      for i in range(args.streams)), return_exceptions=True)
        wall = time.monotonic() - t0
        done = []
        for i, r in enumerate(runs):
            where = f"round {rnd + 1}, stream {i}"
            if isinstance(r, BaseException):
                check(False, f"{where}: {type(r).__name__}: {r}")
                continue
            f = r["final"]
            if not check(f["type"] == "done", f"{where} ended with {f}"):
                continue
            idx = [t["index"] for t in r["tokens"]]
            check(idx == list(range(args.max_tokens)),
                  f"{where}: token indexes {idx[:5]}... ({len(idx)} tokens, wanted {args.max_tokens})")
            check(f["usage"]["completion_tokens"] == args.max_tokens, f"{where}: usage {f['usage']}")
            check(not f.get("cached"), f"{where} came from the response cache: start the server with --no-cache")
            if i in refs:
                compared += 1
                matched += check(r["text"] == refs[i]["text"],
                                 f"{where} differs from its isolated run:\n    alone:  {refs[i]['text']!r}\n"
                                 f"    loaded: {r['text']!r}")
            done.append(r)
        rounds.append((wall, done))
        if pid:
            rss.append(await settled_rss(pid))

    # ---- report -------------------------------------------------------------------------------
    every = [r for _, done in rounds for r in done]
    tokens = sum(len(r["tokens"]) for r in every)
    wall = sum(w for w, _ in rounds)
    ttft = [r["arrivals"][0] - r["start"] for r in every if r["arrivals"]]
    gaps = [b - a for r in every for a, b in zip(r["arrivals"], r["arrivals"][1:])]
    e2e = [r["end"] - r["start"] for r in every]
    server_ttft = [r["final"]["timings"]["ttft_ms"] / 1000 for r in every]
    print()
    for k, (w, done) in enumerate(rounds):
        n = sum(len(r["tokens"]) for r in done)
        line = f"round {k + 1}: {len(done)}/{args.streams} streams done, {n / w:6.1f} tokens/s over {w:.2f} s"
        if pid:
            line += f", RSS after {rss[k + 1] / 2**20:.1f} MiB"
        print(line)
    print(f"streams completed   {len(every)}/{args.streams * args.rounds}")
    print(f"throughput          {tokens / wall:.1f} tokens/s ({tokens} tokens in {wall:.2f} s), "
          f"{ref_tokens / ref_s:.1f} tokens/s for one stream alone")
    if every:
        print(f"TTFT (client)       {fmt_ms(ttft)}")
        print(f"TTFT (server)       {fmt_ms(server_ttft)}")
        print(f"inter-token gap     {fmt_ms(gaps)}")
        print(f"end to end          {fmt_ms(e2e)}")
        print(f"per-stream rate     p50 {statistics.median(len(r['tokens']) / (r['end'] - r['start']) for r in every):.1f}"
              f" tokens/s")
    print(f"equal to isolated   {matched}/{compared} compared ({n_ref} prompts x {args.rounds} rounds)")
    if pid:
        # The first round touches memory no single stream needs (KV blocks of 64 sequences,
        # allocator arenas of busy threads): that is growth once, not per request. The check is
        # that later rounds leave memory where the first left it.
        first = (rss[1] - rss[0]) / rss[0] * 100
        print(f"server RSS          {rss[0] / 2**20:.1f} MiB before the load, {rss[1] / 2**20:.1f} MiB after round 1 "
              f"({first:+.2f}%)")
        if args.rounds > 1:
            steady = (rss[-1] - rss[1]) / rss[1] * 100
            print(f"                    {rss[-1] / 2**20:.1f} MiB after round {args.rounds} "
                  f"({steady:+.2f}% from round 1)")
            check(abs(steady) <= 5.0, f"RSS moved {steady:+.2f}% between round 1 and round {args.rounds} (limit 5%)")
        check(abs(first) <= 5.0 or args.rounds > 1, f"RSS moved {first:+.2f}% over the load (limit 5%)")
    else:
        print("server RSS          not measured (give --pid with --url)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "streams": args.streams, "rounds": args.rounds, "completed": len(every), "max_tokens": args.max_tokens,
            "wall_s": wall, "tokens_per_s": tokens / wall, "single_stream_tokens_per_s": ref_tokens / ref_s,
            "ttft_s": {p: pct(ttft, p) for p in (50, 90, 99)}, "inter_token_s": {p: pct(gaps, p) for p in (50, 90, 99)},
            "e2e_s": {p: pct(e2e, p) for p in (50, 90, 99)}, "rss_bytes": rss, "compared": compared,
            "matched": matched, "problems": problems}, indent=2))
    print()
    if problems:
        print(f"FAILED: {len(problems)} problem(s)")
        for p in problems[:20]:
            print("  - " + p)
        return 1
    print("OK: every stream completed, outputs equal their isolated runs, RSS within 5%")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="ws://HOST:PORT/v1/ws of a running server (default: start one)")
    ap.add_argument("--pid", type=int, help="the --url server's process id, for the RSS check")
    ap.add_argument("--streams", type=int, default=64, help="concurrent streams (default 64)")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per stream (default 32)")
    ap.add_argument("--rounds", type=int, default=3, help="times the whole load runs (default 3)")
    ap.add_argument("--check", type=int, help="compare only the first N streams with isolated runs (default all)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds to wait for any one frame (default 300)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra argument for the started `troupe serve` (repeatable)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.streams < 1 or args.max_tokens < 1 or args.rounds < 1:
        ap.error("--streams, --max-tokens and --rounds must be positive")

    if args.url:
        return asyncio.run(bench(args, args.url, args.pid))
    server = Server("--no-cache", "--max-seqs", str(max(64, args.streams)), *args.server_arg)
    print(f"server: {' '.join(server.cmd)} (pid {server.proc.pid}, port {server.port})")
    try:
        return asyncio.run(bench(args, server.ws_url, server.proc.pid))
    finally:
        code = server.stop()
        if code != 0:
            print(f"server exited with {code}:\n{server.output()}")


if __name__ == "__main__":
    sys.exit(main())
