#!/usr/bin/env python3
"""Cluster benchmark: a front (`troupe serve` with cluster.listen) and `troupe worker` processes on
this machine, over loopback, against plain single-process `troupe serve`. Every figure is measured
in this run, by WebSocket clients (docs/protocol.md) that time each token as it arrives.

  (a) the front's overhead per token: the same load (--streams concurrent greedy streams x
      --tokens tokens) against one process and through a front that routes everything to one
      worker (cluster.local_replica=false), both engines single-threaded: aggregate tokens/s,
      mean inter-token gap, TTFT, and the front process's own CPU time per token;
  (b) the migration pause: a front with two warm workers; --streams streams placed alternately
      (round_robin); once every stream has --kill-after tokens one worker is killed (kill -9) and
      its streams continue on the other. Per stream, the time from the kill to its next token
      (the killed worker's streams and the survivor's own, apart), and the time until the front's
      log declares the worker dead; p50/p99 over --rounds rounds, a fresh spare joining before
      each. Each stream must still be complete, contiguous and equal to the single-process output;
  (c) throughput of 1 vs 2 single-threaded workers behind a local_replica=false front, against
      one process with 2 engine threads (--c-streams streams x --tokens). The machine's cores
      bound this: with 2 cores, 2 one-threaded workers plus a front cannot beat 1 two-threaded
      process by much, and the output says so.

(a) and (c) run each configuration --repeats times, alternating, and print the median run; each
measurement starts with a short warm-up request. The script prints the CPU model. The response
cache is off everywhere (it would answer repeated prompts). Every process this script starts is in its own session and
is killed when it exits (normally, on an exception, on SIGINT/SIGTERM); it kills nothing else.
Ports come from the OS (bind to port 0) unless --port-base is given.

Run in the test venv, which has `websockets`:
    bash scripts/test-venv.sh && .cache/test-venv/bin/python bench/cluster.py
"""
import argparse
import asyncio
import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime
import urllib.error
import urllib.request
from pathlib import Path

from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TROUPE_BIN", ROOT / "build" / "troupe")).resolve()
MODEL = Path(os.environ.get("TROUPE_MODEL", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")).resolve()

TOPICS = ["the ocean", "volcanoes", "honey bees", "the moon", "bread", "trains", "chess", "rain",
          "libraries", "bicycles", "coffee", "glaciers", "owls", "music", "bridges", "gardens"]
FORMS = ["Write a short paragraph about {}.", "Explain {} to a child."]
PROMPTS = [f.format(t) for f in FORMS for t in TOPICS]

STARTED = []  # every process this script started (subprocess.Popen), killed at exit
WORKDIR = Path(tempfile.mkdtemp(prefix="troupe-cluster-bench-"))


def cleanup():
    for p in STARTED:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(WORKDIR, ignore_errors=True)


atexit.register(cleanup)


def on_signal(signum, _frame):
    sys.exit(128 + signum)  # runs atexit: cleanup


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Ports:
    def __init__(self, base):
        self.next = base

    def take(self):
        if self.next:
            self.next += 1
            return self.next - 1
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


class Proc:
    """A troupe process of ours: its log in WORKDIR, killed at exit."""

    def __init__(self, name, args):
        self.name = name
        self.log_path = WORKDIR / f"{name}.log"
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen([str(BIN), *args], cwd=WORKDIR, stdout=self.log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        STARTED.append(self.p)

    def cpu_s(self):
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def alive(self):
        return self.p.poll() is None

    def tail(self, n=30):
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def kill9(self):
        os.kill(self.p.pid, signal.SIGKILL)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def health(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        # 503 no_replica: a front with local_replica=false, loaded, before its workers join.
        body = json.loads(e.read() or b"{}")
        return body if body.get("status") == "no_replica" else None
    except OSError:
        return None  # not listening yet, or 503 while loading


def wait_ready(proc, port, timeout=180):
    """Until the front's /health answers 200."""
    deadline = time.monotonic() + timeout
    while health(port) is None:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} not ready in {timeout} s:\n{proc.tail()}")
        time.sleep(0.05)


def wait_joined(worker, timeout=180):
    """Until the worker prints that the front took it (the router places requests on it from then
    on; /health shows it only at its next refresh, every 2 s)."""
    deadline = time.monotonic() + timeout
    while "troupe worker: joined" not in worker.log_path.read_text(errors="replace"):
        if not worker.alive():
            raise RuntimeError(f"{worker.name} exited (was it sent a signal? 'draining' means SIGTERM/SIGINT):\n"
                               f"{worker.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{worker.name} did not join in {timeout} s:\n{worker.tail()}")
        time.sleep(0.02)


def common_sets(threads):
    return ["--set", f"model.threads={threads}", "--set", "cache.enabled=false"]


def start_single(ports, threads):
    port = ports.take()
    p = Proc(f"single-{threads}t-{port}", ["serve", "--listen", f"127.0.0.1:{port}", "--model", str(MODEL),
                                           *common_sets(threads)])
    wait_ready(p, port)
    return p, port


def start_front(ports):
    port, cport = ports.take(), ports.take()
    # The front's own engine serves nothing (local_replica=false); one thread keeps it out of the way.
    p = Proc(f"front-{port}", ["serve", "--listen", f"127.0.0.1:{port}", "--model", str(MODEL), *common_sets(1),
                               "--set", f'cluster.listen="127.0.0.1:{cport}"', "--set", "cluster.local_replica=false",
                               "--set", 'router.policy="round_robin"'])
    wait_ready(p, port)
    return p, port, cport


def start_worker(cport, name, threads=1, wait=True):
    w = Proc(name, ["worker", "--join", f"127.0.0.1:{cport}", "--name", name, "--set", f'model.path="{MODEL}"',
                    *common_sets(threads)])
    if wait:
        wait_joined(w)
    return w


# --- clients ----------------------------------------------------------------------------------

class Stream:
    def __init__(self, rid, prompt, max_tokens):
        self.rid, self.prompt, self.max_tokens = rid, prompt, max_tokens
        self.sent = None
        self.arrivals = []  # (monotonic time, index, text)
        self.done = None
        self.error = None

    @property
    def text(self):
        return "".join(t for _, _, t in self.arrivals) + (self.done or {}).get("text", "")

    def contiguous(self):
        return [i for _, i, _ in self.arrivals] == list(range(len(self.arrivals)))

    def ok(self):
        return self.error is None and self.done is not None and self.contiguous() and \
            self.done.get("usage", {}).get("completion_tokens") == self.max_tokens


async def run_stream(url, s, timeout):
    try:
        async with connect(url, open_timeout=timeout, ping_timeout=None, max_size=None) as ws:
            s.sent = time.monotonic()
            await ws.send(json.dumps({"type": "generate", "id": s.rid, "messages": [{"role": "user", "content": s.prompt}],
                                      "max_tokens": s.max_tokens, "temperature": 0, "ignore_eos": True}))
            while True:
                f = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                if f.get("type") == "token":
                    s.arrivals.append((time.monotonic(), f["index"], f.get("text", "")))
                elif f.get("type") == "done":
                    s.done = f
                    return
                elif f.get("type") == "error":
                    s.error = f"{f.get('code')}: {f.get('message')}"
                    return
    except Exception as e:  # noqa: BLE001 (a broken stream is a figure to report, not a crash)
        s.error = f"{type(e).__name__}: {e}"


_rid = [0]


def streams_for(prompts, max_tokens):
    out = []
    for p in prompts:
        _rid[0] += 1
        out.append(Stream(f"b{os.getpid()}-{_rid[0]}", p, max_tokens))
    return out


async def run_load(port, prompts, max_tokens, timeout):
    streams = streams_for(prompts, max_tokens)
    url = f"ws://127.0.0.1:{port}/v1/ws"
    t0 = time.monotonic()
    await asyncio.gather(*(run_stream(url, s, timeout) for s in streams))
    return streams, time.monotonic() - t0


def summarize(streams, wall):
    tokens = sum(len(s.arrivals) for s in streams)
    gaps = [b[0] - a[0] for s in streams for a, b in zip(s.arrivals, s.arrivals[1:])]
    ttft = [s.arrivals[0][0] - s.sent for s in streams if s.arrivals]
    return {"tokens": tokens, "wall": wall, "tps": tokens / wall if wall > 0 else 0,
            "itl_mean_ms": 1e3 * sum(gaps) / len(gaps) if gaps else float("nan"),
            "itl_p99_ms": 1e3 * pct(gaps, 99), "ttft_p50_ms": 1e3 * pct(ttft, 50),
            "failed": sum(not s.ok() for s in streams)}


def measure(port, prompts, max_tokens, timeout, warm=1, cpu_of=None):
    """A warm-up (`warm` concurrent short requests), then the load; with cpu_of, that process's CPU seconds."""
    asyncio.run(run_load(port, prompts[:warm], 8, timeout))
    cpu0 = cpu_of.cpu_s() if cpu_of else 0
    streams, wall = asyncio.run(run_load(port, prompts, max_tokens, timeout))
    r = summarize(streams, wall)
    if cpu_of:
        r["cpu_ms_per_token"] = 1e3 * (cpu_of.cpu_s() - cpu0) / max(1, r["tokens"])
    return streams, r


def fmt(r):
    return (f"{r['tps']:7.1f} tokens/s ({r['tokens']} tokens in {r['wall']:.2f} s), inter-token mean "
            f"{r['itl_mean_ms']:6.1f} ms (p99 {r['itl_p99_ms']:6.1f}), TTFT p50 {r['ttft_p50_ms']:6.1f} ms"
            + (f", {r['failed']} FAILED" if r["failed"] else ""))


def same_as(streams, reference):
    return sum(1 for s in streams if s.ok() and reference.get(s.prompt) == s.text)


# --- (b) the migration pause ------------------------------------------------------------------

async def migration_round(port, victim, prompts, max_tokens, kill_after, timeout):
    """Streams spread over two warm workers by round_robin (stream i on one worker, i+1 on the
    other); `victim` is killed once every stream has kill_after tokens. Which half was on the
    victim shows in the pauses: its streams wait for the death to be noticed and for their
    continuation's prefill on the survivor, the survivor's own streams only for that prefill."""
    streams = streams_for(prompts, max_tokens)
    url = f"ws://127.0.0.1:{port}/v1/ws"
    tasks = []
    for s in streams:  # one at a time, so that the router places them in this order
        tasks.append(asyncio.create_task(run_stream(url, s, timeout)))
        await asyncio.sleep(0.03)
    deadline = time.monotonic() + timeout
    while min(len(s.arrivals) for s in streams) < kill_after and time.monotonic() < deadline:
        if any(s.done or s.error for s in streams):
            break
        await asyncio.sleep(0.002)
    kill_at, kill_wall = time.monotonic(), time.time()
    victim.kill9()
    victim.p.wait()
    await asyncio.gather(*tasks)

    def pause(s):  # None: the stream had ended before the kill
        after = [t for t, _, _ in s.arrivals if t > kill_at]
        return after[0] - kill_at if after else None

    halves = [[pause(s) for s in streams[k::2]] for k in (0, 1)]
    means = [sum(p for p in h if p is not None) / max(1, sum(p is not None for p in h)) for h in halves]
    moved = 0 if means[0] >= means[1] else 1
    return (streams, [p for p in halves[moved] if p is not None], [p for p in halves[1 - moved] if p is not None],
            kill_wall)


def noticed_after(front, victim, kill_wall):
    """Seconds from the kill to the front's log line that declares the victim dead, or None."""
    for line in front.log_path.read_text(errors="replace").splitlines():
        m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\].*\(" + re.escape(victim.name) + r"\) is dead", line)
        if m:
            return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp() - kill_wall
    return None


def tps_list(rows):
    return ", ".join(f"{r['tps']:.0f}" for r in rows)


def median_row(rows):
    """The run with the median throughput of repeated runs of one configuration."""
    return sorted(rows, key=lambda r: r["tps"])[len(rows) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=8, help="concurrent streams in (a) and (b)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per stream")
    ap.add_argument("--repeats", type=int, default=5, help="runs of each configuration in (a) and (c), interleaved")
    ap.add_argument("--c-streams", type=int, default=16, help="concurrent streams in (c)")
    ap.add_argument("--rounds", type=int, default=6, help="kills in (b)")
    ap.add_argument("--kill-after", type=int, default=8, help="(b): kill once every stream has this many tokens")
    ap.add_argument("--timeout", type=float, default=180, help="seconds a stream may go without a frame")
    ap.add_argument("--port-base", type=int, default=0, help="take ports from here up (default: the OS picks free ones)")
    ap.add_argument("--skip", default="", help="parts to skip, e.g. 'c' or 'ab'")
    a = ap.parse_args()
    if not BIN.exists() or not MODEL.exists():
        sys.exit(f"need {BIN} and {MODEL}")
    (WORKDIR / "models").symlink_to(MODEL.parent)
    ports = Ports(a.port_base)
    prompts = PROMPTS[: a.streams]
    c_prompts = (PROMPTS * (a.c_streams // len(PROMPTS) + 1))[: a.c_streams]
    ok = True
    t_start = time.monotonic()
    print(f"troupe cluster bench: {BIN.name} with {MODEL.name}; front and workers on 127.0.0.1 (loopback)")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"greedy streams, ignore_eos, response cache off, {a.tokens} tokens per stream; every process "
          f"single-threaded in its engine unless said; fronts route with round_robin, local_replica=false", flush=True)

    names = iter(f"bench-w{i}" for i in range(1, 1000))

    # One process per configuration, all up at once so that their runs can alternate (the idle
    # ones cost nearly nothing; the machine's load from others moves, so alternation is fairer).
    single1, sport1 = start_single(ports, 1)
    front1, port1, cport1 = start_front(ports)
    worker1 = start_worker(cport1, next(names))
    # The single process's answers are the reference every routed answer must equal.
    streams, _ = measure(sport1, prompts, a.tokens, a.timeout)
    reference = {s.prompt: s.text for s in streams if s.ok()}
    if len(reference) != len(prompts):
        print("  the single process did not complete every reference stream")
        ok = False

    if "a" not in a.skip:
        print(f"\n== (a) the front's overhead: {a.streams} concurrent streams x {a.tokens} tokens, one engine thread; "
              f"{a.repeats} runs of each, alternating ==", flush=True)
        singles, fronts, equal = [], [], 0
        for _ in range(a.repeats):
            _, r = measure(sport1, prompts, a.tokens, a.timeout, cpu_of=single1)
            singles.append(r)
            streams, r = measure(port1, prompts, a.tokens, a.timeout, cpu_of=front1)
            fronts.append(r)
            equal += same_as(streams, reference)
        s1, f1 = median_row(singles), median_row(fronts)
        print(f"  single process (median run) : {fmt(s1)}")
        print(f"  front -> 1 worker (median)  : {fmt(f1)}")
        print(f"  runs, tokens/s: single {tps_list(singles)}; "
              f"through the front {tps_list(fronts)}")
        itl_s = sorted(r["itl_mean_ms"] for r in singles)[len(singles) // 2]
        itl_f = sorted(r["itl_mean_ms"] for r in fronts)[len(fronts) // 2]
        print(f"  through the front / single (medians): throughput {f1['tps'] / s1['tps']:.3f}x, mean inter-token "
              f"gap {itl_f:.1f} / {itl_s:.1f} ms = {itl_f / itl_s:.3f}x ({itl_f - itl_s:+.2f} ms a token)")
        cpu_f = sorted(r["cpu_ms_per_token"] for r in fronts)[len(fronts) // 2]
        cpu_s = sorted(r["cpu_ms_per_token"] for r in singles)[len(singles) // 2]
        print(f"  the front process's own CPU time: {cpu_f:.3f} ms per token (median; the single process, its "
              f"engine included: {cpu_s:.3f} ms per token)")
        print(f"  routed outputs equal to the single process's: {equal}/{a.repeats * len(prompts)}")
        ok = ok and equal == a.repeats * len(prompts) and all(r["failed"] == 0 for r in singles + fronts)
        rows = {"single 1t": s1}
    single1.stop()

    front2, port2, cport2 = start_front(ports)
    workers = [start_worker(cport2, next(names))]
    if "b" not in a.skip:
        print(f"\n== (b) migration pause: {a.streams} streams x {a.tokens} tokens spread over 2 warm workers "
              f"(round_robin), kill -9 of one once every stream has {a.kill_after} tokens; {a.rounds} rounds ==",
              flush=True)
        moved, stayed, noticed = [], [], []
        h0 = health(port2) or {}
        for rnd in range(a.rounds):
            workers.append(start_worker(cport2, next(names)))
            # Warm both (the new one's first steps fault its weights in), one request each.
            asyncio.run(run_load(port2, prompts[:2], 8, a.timeout))
            victim = workers[0]  # the older of the two live ones
            streams, m, st, kill_wall = asyncio.run(migration_round(port2, victim, prompts, a.tokens, a.kill_after,
                                                                    a.timeout))
            workers.remove(victim)
            time.sleep(0.1)  # the front's log line
            seen = noticed_after(front2, victim, kill_wall)
            if seen is not None:
                noticed.append(seen)
            moved += m
            stayed += st
            good = sum(s.ok() for s in streams)
            eq = same_as(streams, reference)
            print(f"  round {rnd + 1}: killed {victim.name}, declared dead after "
                  f"{'?' if seen is None else f'{1e3 * seen:.0f}'} ms; its {len(m)} streams: kill -> next token "
                  f"{1e3 * min(m, default=float('nan')):.0f}-{1e3 * max(m, default=float('nan')):.0f} ms; "
                  f"the survivor's {len(st)}: {1e3 * min(st, default=float('nan')):.0f}-"
                  f"{1e3 * max(st, default=float('nan')):.0f} ms; {good}/{len(streams)} complete and contiguous, "
                  f"{eq}/{len(streams)} equal to the single process", flush=True)
            ok = ok and good == len(streams) and eq == len(streams) and len(m) > 0
        time.sleep(2.5)  # /health is refreshed every 2 s
        r0, r = h0.get("router", {}), (health(port2) or {}).get("router", {})
        print(f"  kill -> next token, the killed worker's streams ({len(moved)}): p50 {1e3 * pct(moved, 50):.0f} ms, "
              f"p99 {1e3 * pct(moved, 99):.0f} ms, max {1e3 * max(moved, default=float('nan')):.0f} ms")
        print(f"  kill -> the front's log declares the worker dead: p50 {1e3 * pct(noticed, 50):.0f} ms, max "
              f"{1e3 * max(noticed, default=float('nan')):.0f} ms (log timestamps, 1 ms resolution)")
        print(f"  kill -> next token, the survivor's own streams ({len(stayed)}): p50 {1e3 * pct(stayed, 50):.0f} ms, "
              f"p99 {1e3 * pct(stayed, 99):.0f} ms")
        print(f"  the front counted {r.get('migrations', 0) - r0.get('migrations', 0)} migrations and "
              f"{r.get('replica_deaths', 0) - r0.get('replica_deaths', 0)} replica deaths")
        if "a" not in a.skip:
            s1 = rows["single 1t"]
            print(f"  (for scale, one process at this load: mean inter-token gap {s1['itl_mean_ms']:.0f} ms, TTFT p50 "
                  f"{s1['ttft_p50_ms']:.0f} ms)")

    if "c" not in a.skip:
        print(f"\n== (c) throughput: {a.c_streams} concurrent streams x {a.tokens} tokens; {a.repeats} runs of each, "
              f"alternating ==")
        print(f"  bounded by this machine's {os.cpu_count()} cores: the front and the workers share them, so 2 "
              f"one-threaded workers can at best match one two-threaded process here, not double it")
        if len(workers) < 2:
            workers.append(start_worker(cport2, next(names)))
        single2, sport2 = start_single(ports, 2)
        configs = [("1 process, 2 engine threads ", sport2, 1), ("front + 1 worker (1 thread) ", port1, 1),
                   ("front + 2 workers (1 thread)", port2, 2)]
        runs = {label: [] for label, _, _ in configs}
        for _ in range(a.repeats):
            for label, port, warm in configs:
                _, r = measure(port, c_prompts, a.tokens, a.timeout, warm=warm)
                runs[label].append(r)
        med = {label: median_row(rs) for label, rs in runs.items()}
        for label, _, _ in configs:
            print(f"  {label} (median run): {fmt(med[label])}; runs {tps_list(runs[label])}")
        s2, f1c, f2c = (med[label] for label, _, _ in configs)
        print(f"  2 workers / 1 worker: {f2c['tps'] / f1c['tps']:.2f}x; 2 workers / 1 two-threaded process: "
              f"{f2c['tps'] / s2['tps']:.2f}x; 1 two-threaded process / 1 worker: {s2['tps'] / f1c['tps']:.2f}x")
        ok = ok and all(r["failed"] == 0 for rs in runs.values() for r in rs)
        single2.stop()

    for p in [*workers, worker1, front1, front2]:
        p.stop()
    print(f"\ndone in {time.monotonic() - t_start:.0f} s; load average after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {'all checks passed' if ok else 'SOME CHECKS FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
