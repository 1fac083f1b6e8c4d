#!/usr/bin/env python3
"""Soak test: D minutes of mixed, hostile load against one `troupe serve` (the real model, on
loopback only), then checks that the server came back to where it started.

Load, all at once, chosen at random (seeded):
  - normal streams over WebSocket (token indexes checked) and over HTTP (server-sent events),
    and plain completions with repeated prompts (the response cache is on, so some are hits);
  - WebSocket cancels mid-stream, and abrupt disconnects mid-stream (WebSocket and HTTP);
  - slow readers (a few bytes at a time) and stalled readers (stop reading for seconds, then go);
  - malformed JSON (400), oversized bodies (413), garbage request lines (400), oversized
    WebSocket messages (close 1009);
  - POST /admin/reload (with the admin token) every 10 s.
At the end, and exiting 1 if any fails:
  - 0 crashes: the server is alive throughout and exits 0 on SIGTERM;
  - 0 token gaps or duplicates: every WebSocket stream's token indexes run 0, 1, 2, ... (cancelled
    and completed ones alike);
  - no unexpected answers (a status other than the one the input calls for);
  - KV back to idle: troupe_kv_blocks_used and troupe_running_sequences 0 (/metrics);
  - descriptors back to baseline: the server's sockets (/proc/PID/fd) as many as after warm-up
    (files are not counted: RocksDB opens and closes its own as it compacts);
  - memory: the server's private memory (RssAnon) at most 5% above its level after warm-up.
Memory is measured against what the server may legitimately still be filling, so that the check
sees retention and not a warm-up that outlasts the warm-up period:
  - the response cache is bounded here (CACHE_ENTRIES answers, and its vector index past
    FLAT_LIMIT is an hnswlib graph) and the warm-up lasts until it is full: with the default
    bound (100,000 answers, some KB each) every distinct prompt of the run would be stored, and
    a 30-minute run only fills a few thousand. Eviction and index rebuilds run under load instead;
  - file-backed pages (RssFile) are left out of the check and reported: they are the read-only
    weight files, mapped as first touched; MiniLM's word-embedding table (47 MB) gains a row (and
    the kernel's fault-around, up to 64 KB) for each wordpiece first seen in a question, so it
    grows with the vocabulary the load has used, up to the file's size, and the kernel may drop
    those clean pages at any time.
What is left that grows within a bound: RocksDB's memtable (the cache store's writes, up to its
64 MiB write buffer, then flushed to a table file) and CAF's pending request timeouts (every
scheduler step for step_timeout_ms, 120 s).
A curve of RSS (total, private, file-backed) and the cache's entries is printed every minute.
Figures go to stdout. Usage (the test venv has `websockets`; scripts/test-venv.sh makes it):
    .cache/test-venv/bin/python bench/soak.py --minutes 10
TROUPE_BIN / TROUPE_MODEL pick the binary and the model, as in tests/clients/harness.py.
"""
import argparse
import asyncio
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "clients"))
import harness  # noqa: E402  (starts the server as the client tests do)

import websockets  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

ADMIN_TOKEN = "soak-admin"
CACHE_ENTRIES = 64  # cache.max_entries: filled during the warm-up (see the docstring)
FLAT_LIMIT = 16     # cache.index.flat_limit: past it the hnswlib graph answers, so it is soaked too
MAX_BODY = 64 * 1024
MAX_WS_MESSAGE = 64 * 1024
PROMPTS = ["Count from one to ten.", "Name three colours.", "Say hello.", "What is two plus two?",
           "Write a haiku about the sea.", "List four animals."]


class Soak:
    def __init__(self, server, seed):
        self.s = server
        self.rng = random.Random(seed)
        self.counts = Counter()    # what ran, by kind
        self.failures = []         # (kind, what) of unexpected outcomes
        self.stop = False

    def cases(self):
        return sum(v for k, v in self.counts.items() if k.startswith(("http_", "ws_")) and k != "ws_tokens")

    def fail(self, kind, what):
        self.failures.append((kind, what))
        if len(self.failures) <= 20:
            print(f"soak: FAIL {kind}: {what}", flush=True)

    # ---- raw HTTP over asyncio streams (the cases a client library would not send) -----------
    async def http(self, method, path, body=b"", headers=None, read=True, slow=False, stall_s=0.0, drop_after=None):
        r, w = await asyncio.open_connection("127.0.0.1", self.s.port)
        try:
            h = {"Host": f"127.0.0.1:{self.s.port}", "Content-Length": str(len(body)), "Connection": "close"}
            if body:
                h["Content-Type"] = "application/json"
            h.update(headers or {})
            w.write(f"{method} {path} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in h.items()).encode()
                    + b"\r\n" + body)
            await w.drain()
            if not read:
                return None, b""
            got = b""
            while True:
                if drop_after is not None and len(got) >= drop_after:
                    return None, got  # the client goes away mid-answer
                if stall_s and len(got) > 0:
                    await asyncio.sleep(stall_s)
                    stall_s = 0.0
                chunk = await asyncio.wait_for(r.read(16 if slow else 65536), 300)
                if not chunk:
                    break
                got += chunk
                if slow:
                    await asyncio.sleep(0.01)
            m = re.match(rb"HTTP/1\.1 (\d{3})", got)
            return (int(m.group(1)) if m else None), got
        finally:
            w.close()

    def chat_body(self, stream, max_tokens, cacheable=False):
        prompt = self.rng.choice(PROMPTS) if cacheable else f"{self.rng.choice(PROMPTS)} ({self.rng.random():.6f})"
        return json.dumps({"model": harness.MODEL_NAME, "messages": [{"role": "user", "content": prompt}],
                           "max_tokens": max_tokens, "temperature": 0, "stream": stream}).encode()

    HTTP_KINDS = ["plain", "plain_cached", "sse", "sse_drop", "sse_slow", "sse_stall", "bad_json", "too_big", "garbage"]
    WS_KINDS = ["stream", "stream", "cancel", "drop", "stall", "too_big"]

    async def http_case(self, kind=None):
        kind = kind or self.rng.choice(self.HTTP_KINDS)
        self.counts[f"http_{kind}"] += 1
        if kind in ("plain", "plain_cached"):
            st, got = await self.http("POST", "/v1/chat/completions", self.chat_body(False, 8, kind == "plain_cached"))
            if st != 200 or b'"choices"' not in got:
                self.fail(kind, got[:200])
        elif kind.startswith("sse"):
            body = self.chat_body(True, self.rng.randint(4, 24))
            if kind == "sse_drop":
                await self.http("POST", "/v1/chat/completions", body, drop_after=self.rng.randint(1, 400))
                return
            st, got = await self.http("POST", "/v1/chat/completions", body, slow=kind == "sse_slow",
                                      stall_s=3.0 if kind == "sse_stall" else 0.0)
            if st != 200 or b"data: [DONE]" not in got:
                self.fail(kind, got[-200:])
        elif kind == "bad_json":
            st, got = await self.http("POST", "/v1/chat/completions", b'{"messages": [')
            if st != 400:
                self.fail(kind, got[:200])
        elif kind == "too_big":
            st, got = await self.http("POST", "/v1/chat/completions", b"x" * (MAX_BODY + 1))
            if st != 413:
                self.fail(kind, got[:200])
        else:
            st, got = await self.http("BREW", "/%%\x01", b"")
            if st not in (400, 404, 405):
                self.fail(kind, got[:200])

    # ---- WebSocket -------------------------------------------------------------------------
    async def ws_case(self, kind=None):
        kind = kind or self.rng.choice(self.WS_KINDS)
        self.counts[f"ws_{kind}"] += 1
        try:
            async with connect(self.s.ws_url, max_size=None, open_timeout=120, close_timeout=10) as ws:
                if kind == "too_big":
                    await ws.send("x" * (MAX_WS_MESSAGE + 1))
                    try:
                        await asyncio.wait_for(ws.recv(), 60)
                        self.fail(kind, "no close after an oversized message")
                    except websockets.ConnectionClosed as e:
                        if e.rcvd is None or e.rcvd.code != 1009:
                            self.fail(kind, f"closed with {e.rcvd}, not 1009")
                    return
                rid = f"s{self.rng.randrange(1 << 30)}"
                n = self.rng.randint(4, 32)
                await ws.send(json.dumps({"type": "generate", "id": rid, "max_tokens": n, "temperature": 0.7,
                                          "messages": [{"role": "user", "content": self.rng.choice(PROMPTS)}]}))
                cut = self.rng.randint(1, n)
                indexes = []
                while True:
                    f = json.loads(await asyncio.wait_for(ws.recv(), 300))
                    if f.get("id") != rid:
                        continue
                    if f["type"] == "token":
                        indexes.append(f["index"])
                        if kind == "drop" and len(indexes) >= cut:
                            break  # leaves without a word: the `async with` closes the socket
                        if kind == "stall" and len(indexes) == cut:
                            await asyncio.sleep(3)  # stops reading for a while, then goes on
                        if kind == "cancel" and len(indexes) == cut:
                            await ws.send(json.dumps({"type": "cancel", "id": rid}))
                        continue
                    if f["type"] != "done":
                        self.fail(kind, f)
                    elif kind != "cancel" and f.get("finish_reason") not in ("stop", "length"):
                        self.fail(kind, f)
                    break
                self.counts["ws_tokens"] += len(indexes)
                if indexes != list(range(len(indexes))):
                    self.counts["token_gaps_or_duplicates"] += 1
                    self.fail(kind, f"token indexes {indexes}")
        except (OSError, asyncio.TimeoutError, websockets.WebSocketException) as e:
            self.fail(kind, repr(e))

    async def client(self, case):
        while not self.stop:
            try:
                await case()
            except (OSError, asyncio.TimeoutError) as e:
                self.fail(case.__name__, repr(e))
            if self.s.proc.poll() is not None:
                return

    async def reloader(self):
        while not self.stop:
            await asyncio.sleep(10)
            req = urllib.request.Request(self.s.url + "/admin/reload", method="POST", data=b"",
                                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            try:
                status = (await asyncio.to_thread(urllib.request.urlopen, req, timeout=120)).status
            except OSError as e:
                status = repr(e)
            self.counts["reloads"] += 1
            if status != 200:
                self.fail("reload", status)


def metrics(server):
    with urllib.request.urlopen(server.url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+) ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def memory(pid):
    """RSS and its private (anonymous) and file-backed parts, in bytes (/proc/PID/status)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) * 1024
    return out.get("VmRSS", 0), out.get("RssAnon", 0), out.get("RssFile", 0)


def mib(n):
    return f"{n / 2**20:.1f} MiB"


def sockets(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def settle(server, base_sockets, timeout_s=120):
    """Waits until the KV is idle and the sockets are back (closing ones take up to the linger
    time); returns the last figures either way."""
    deadline = time.monotonic() + timeout_s
    while True:
        m = metrics(server)
        kv, running, sock = m.get("troupe_kv_blocks_used", -1), m.get("troupe_running_sequences", -1), sockets(server.proc.pid)
        if (kv == 0 and running == 0 and sock <= base_sockets) or time.monotonic() > deadline:
            return kv, running, sock
        time.sleep(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--clients", type=int, default=6, help="concurrent clients, half HTTP, half WebSocket")
    ap.add_argument("--warmup-s", type=float, default=None,
                    help="default: a tenth of the run, 20..120 s; it lasts until the response cache is full too")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    duration = a.minutes * 60
    warmup = a.warmup_s if a.warmup_s is not None else min(120, max(20, duration / 10))

    cfg = Path(tempfile.mkdtemp(prefix="troupe-soak-")) / "soak.toml"
    cfg.write_text(f'[auth]\nadmin_token = "{ADMIN_TOKEN}"\n\n[cache]\nenabled = true\nmax_entries = {CACHE_ENTRIES}\n\n'
                   f'[cache.index]\nflat_limit = {FLAT_LIMIT}\n')
    server = harness.Server("--config", str(cfg), "--max-body", str(MAX_BODY),
                            "--max-ws-message", str(MAX_WS_MESSAGE))
    pid = server.proc.pid
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
        print(f"soak: {a.minutes} min, {a.clients} clients, seed {a.seed}, warm-up {warmup:.0f} s, CPU {cpu} "
              f"({os.cpu_count()} cores), server pid {pid}", flush=True)
        soak = Soak(server, a.seed)

        async def run():
            cases = [soak.http_case if i % 2 == 0 else soak.ws_case for i in range(a.clients)]
            tasks = [asyncio.create_task(soak.client(c)) for c in cases] + [asyncio.create_task(soak.reloader())]
            start = time.monotonic()
            base = None
            peak_rss = 0
            next_curve = 0.0
            while time.monotonic() - start < duration and server.proc.poll() is None:
                await asyncio.sleep(5)
                t = time.monotonic() - start
                mem = memory(pid)
                peak_rss = max(peak_rss, mem[0])
                try:
                    entries = (await asyncio.to_thread(metrics, server)).get("troupe_response_cache_entries", -1)
                except OSError:
                    entries = -1  # a crash: the loop ends and the checks say so
                if t >= next_curve:
                    next_curve += 60
                    print(f"soak: t={t:5.0f} s: RSS {mib(mem[0])} (private {mib(mem[1])}, file-backed {mib(mem[2])}), "
                          f"cache entries {entries:.0f}, cases {soak.cases()}", flush=True)
                # The warm-up ends once its time is up and the cache is full; if the cache is still
                # not full at three times that, the load stores too little: the base is taken anyway.
                if base is None and t >= warmup and (entries >= CACHE_ENTRIES or t >= 3 * warmup):
                    base = mem
                    print(f"soak: after warm-up ({t:.0f} s, cache entries {entries:.0f} of {CACHE_ENTRIES}): "
                          f"RSS {mib(mem[0])} (private {mib(mem[1])}, file-backed {mib(mem[2])})", flush=True)
            soak.stop = True
            await asyncio.wait(tasks, timeout=600)
            return base, peak_rss

        # Baselines of what must come back: taken with the server idle, after one request of each
        # kind has run (the first ones allocate what stays: the cache, the thread pools).
        asyncio.run(asyncio.wait_for(soak.http_case(), 300))
        asyncio.run(asyncio.wait_for(soak.ws_case(), 300))
        base_kv, _, base_sockets = settle(server, 10**9)
        base_fds = fds(pid)
        print(f"soak: baseline: {base_sockets} sockets, {base_fds} descriptors, KV blocks used {base_kv:.0f}", flush=True)
        t0 = time.monotonic()
        rss_warm, peak_rss = asyncio.run(run())
        elapsed = time.monotonic() - t0
        crashed = server.proc.poll() is not None
        kv, running, sock = (None, None, None) if crashed else settle(server, base_sockets)
        mem_end = (0, 0, 0) if crashed else memory(pid)
        fds_end = 0 if crashed else fds(pid)
    finally:
        code = server.stop()
        shutil.rmtree(cfg.parent, ignore_errors=True)

    n = soak.cases()
    print(f"soak: ran {elapsed:.0f} s: {n} cases ({n / elapsed:.1f}/s), {soak.counts['ws_tokens']} WebSocket tokens, "
          f"{soak.counts['reloads']} reloads", flush=True)
    print("soak: cases: " + ", ".join(f"{k} {v}" for k, v in sorted(soak.counts.items())), flush=True)
    checks = [
        ("crashes", 0 if not crashed and code == 0 else 1, "0", not crashed and code == 0),
        ("token gaps or duplicates", soak.counts["token_gaps_or_duplicates"], "0", soak.counts["token_gaps_or_duplicates"] == 0),
        ("unexpected answers", len(soak.failures), "0", not soak.failures),
        ("KV blocks used / running sequences at the end", f"{kv} / {running}", "0 / 0", kv == 0 and running == 0),
        ("sockets at the end", f"{sock} (baseline {base_sockets}; all descriptors {fds_end}, baseline {base_fds})",
         f"<= {base_sockets}", sock is not None and sock <= base_sockets),
    ]
    if rss_warm:
        growth = (mem_end[1] - rss_warm[1]) / rss_warm[1] * 100
        checks.append(("private memory (RssAnon) at the end vs after warm-up",
                       f"{mib(mem_end[1])} vs {mib(rss_warm[1])} ({growth:+.1f}%); RSS {mib(mem_end[0])} vs "
                       f"{mib(rss_warm[0])} ({(mem_end[0] - rss_warm[0]) / rss_warm[0] * 100:+.1f}%, peak {mib(peak_rss)}), "
                       f"file-backed {mib(mem_end[2])} vs {mib(rss_warm[2])}",
                       "private <= +5%", growth <= 5.0))
    else:
        checks.append(("memory after warm-up", "not reached (the run was shorter than the warm-up)", "reached", False))
    ok = True
    for name, got, want, passed in checks:
        ok &= passed
        print(f"soak: {'ok  ' if passed else 'FAIL'} {name}: {got} (want {want})", flush=True)
    if crashed or code != 0:
        print(f"soak: server exited with {code}:\n{server.output()}", flush=True)
    print("soak: PASS" if ok else "soak: FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
