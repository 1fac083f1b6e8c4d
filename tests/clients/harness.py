"""Harness of the real-client tests (tests/clients): starts `troupe serve` on a free loopback
port with the real model, waits for /health, and stops it again; WebSocket frame helpers.

Run by ctest (label `clients`) through the venv of scripts/test-venv.sh; by hand:
    .cache/test-venv/bin/python -m pytest tests/clients -v
TROUPE_BIN and TROUPE_MODEL override the binary (default build/troupe) and the model file.
"""
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TROUPE_BIN = Path(os.environ.get("TROUPE_BIN", ROOT / "build" / "troupe")).resolve()
TROUPE_MODEL = Path(os.environ.get("TROUPE_MODEL", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")).resolve()
MODEL_NAME = TROUPE_MODEL.name[: -len(".gguf")] if TROUPE_MODEL.name.endswith(".gguf") else TROUPE_MODEL.name

# Generous: these tests share 2 loaded cores with compilers and other test suites.
READY_TIMEOUT_S = 300
FRAME_TIMEOUT_S = 180


class Server:
    """A `troupe serve` child process on 127.0.0.1 with an OS-chosen port."""

    def __init__(self, *extra_args):
        # A fresh working directory per server: what the server keeps on disk (the semantic
        # cache's data/) starts empty and goes away with it. models/ is linked in, since the
        # default config names its files relative to the working directory.
        self.workdir = Path(tempfile.mkdtemp(prefix="troupe-clients-"))
        (self.workdir / "models").symlink_to(ROOT / "models")
        cmd = [str(TROUPE_BIN), "serve", "--listen", "127.0.0.1:0", "--model", str(TROUPE_MODEL), *extra_args]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self.log = []
        self._port_found = threading.Event()
        self.port = None
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _pump(self):
        for line in self.proc.stdout:
            self.log.append(line.rstrip("\n"))
            # run_serve prints: "troupe serve: listening on http://HOST:PORT, loading ..."
            m = re.search(r"listening on http://[^\s,]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._port_found.set()

    def _wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._port_found.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"troupe serve exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"troupe serve printed no port in {READY_TIMEOUT_S} s:\n{self.output()}")
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=10) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass  # 503 while loading (HTTPError is an OSError), or not accepting yet
            if self.proc.poll() is not None:
                raise RuntimeError(f"troupe serve exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"/health not ready within {READY_TIMEOUT_S} s:\n{self.output()}")
            time.sleep(0.2)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self):
        return f"ws://127.0.0.1:{self.port}/v1/ws"

    def output(self):
        return "\n".join(self.log[-50:])

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)
        return self.proc.returncode


@contextmanager
def running_server(*extra_args):
    s = Server(*extra_args)
    try:
        yield s
    finally:
        code = s.stop()
        # A crash (signal) or an error exit while stopping is a server bug worth failing on.
        assert code == 0, f"troupe serve exited with {code}:\n{s.output()}"


# ---- WebSocket helpers (the `websockets` package) -----------------------------------------------

async def recv_json(ws, timeout=FRAME_TIMEOUT_S):
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def read_until_end(ws, rid, timeout=FRAME_TIMEOUT_S, first=()):
    """Frames for `rid` until its done/error frame: (token frames, final frame). Frames for other
    ids are an error here (use read_streams for several)."""
    tokens = [f for f in first if f.get("type") == "token"]
    while True:
        f = await recv_json(ws, timeout)
        assert f.get("id") == rid, f"unexpected frame {f} while reading stream {rid}"
        if f["type"] == "token":
            tokens.append(f)
        else:
            return tokens, f


def token_text(tokens, final=None):
    return "".join(t["text"] for t in tokens) + ((final or {}).get("text") or "")


def assert_consecutive(tokens, start=0):
    assert [t["index"] for t in tokens] == list(range(start, start + len(tokens))), \
        f"token indexes are not consecutive from {start}: {[t['index'] for t in tokens]}"


# ---- Cluster helpers: `troupe worker` processes, free ports, streaming with timings -------------

def free_port(host="127.0.0.1"):
    """A port the OS says is free now (for cluster.listen, which does not print the port it got)."""
    import socket
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Worker:
    """A `troupe worker --join HOST:PORT` child process. `prefix` runs it under another command
    (e.g. `ip netns exec NS`). Its output is collected; `replica` is the id it printed on joining."""

    def __init__(self, join, *extra_args, name=None, prefix=(), threads=1, wait=True):
        cmd = [*prefix, str(TROUPE_BIN), "worker", "--join", join, "--set", f'model.path="{TROUPE_MODEL}"',
               "--set", f"model.threads={threads}"]
        if name:
            cmd += ["--name", name]
        cmd += list(extra_args)
        self.cmd = cmd
        self.name = name
        self.workdir = Path(tempfile.mkdtemp(prefix="troupe-worker-"))
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self.log = []
        self.replica = None
        self.joins = 0  # how many times it printed "joined" (a rejoin after a partition counts again)
        self._joined = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        if wait:
            try:
                self.wait_joined()
            except BaseException:
                self.kill()
                raise

    def _pump(self):
        for line in self.proc.stdout:
            self.log.append(line.rstrip("\n"))
            # run_worker prints: "troupe worker: joined HOST:PORT as replica N"
            m = re.search(r"troupe worker: joined \S+ as replica (\d+)", line)
            if m:
                self.replica = int(m.group(1))
                self.joins += 1
                self._joined.set()

    def wait_joined(self, timeout=READY_TIMEOUT_S, joins=1):
        deadline = time.monotonic() + timeout
        while self.joins < joins:
            if self.proc.poll() is not None:
                raise RuntimeError(f"troupe worker exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"troupe worker did not join within {timeout} s:\n{self.output()}")
            time.sleep(0.05)
        return self.replica

    def output(self):
        return "\n".join(self.log[-50:])

    def kill(self):
        """kill -9 (and reap)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout):
        return self.proc.wait(timeout)


def get_json(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def metric_values(base_url, name):
    """{labels string: value} of one /metrics series (labels "" for an unlabelled one)."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)$", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def metric(server, series):
    """The value of one /metrics series named with its labels as /metrics prints them
    ('troupe_requests_total{endpoint="completions",status="499"}'); 0 when absent."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return 0.0


def replica_metric(base_url, name):
    """{replica id: value} of a troupe_replica_* series."""
    return {int(re.search(r'replica="(\d+)"', k).group(1)): v for k, v in metric_values(base_url, name).items()}


class Stream:
    """One streamed /v1/chat/completions request read chunk by chunk over a raw HTTP connection, with
    the arrival time of each content chunk. After run(): status, chunks [(t, text)], finish_reason,
    error (an SSE error payload or a non-200 body), usage, retry_after."""

    def __init__(self, port, prompt, max_tokens, host="127.0.0.1", **params):
        self.port, self.host, self.prompt, self.max_tokens, self.params = port, host, prompt, max_tokens, params
        self.status = None
        self.chunks = []
        self.finish_reason = None
        self.error = None
        self.usage = None
        self.retry_after = None
        self.first_chunk = threading.Event()
        self.done = threading.Event()
        self.hang_up_after = None  # close the connection after this many chunks (a client going away)

    @property
    def text(self):
        return "".join(t for _, t in self.chunks)

    def run(self, timeout=FRAME_TIMEOUT_S):
        import http.client
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": self.prompt}],
                "max_tokens": self.max_tokens, "stream": True, "stream_options": {"include_usage": True},
                **self.params}
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            self.status = r.status
            self.retry_after = r.getheader("Retry-After")
            if r.status != 200:
                self.error = r.read().decode(errors="replace")
                return self
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode().rstrip("\r\n")
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                d = json.loads(data)
                if "error" in d:
                    self.error = d["error"]
                    continue
                if d.get("usage"):
                    self.usage = d["usage"]
                for c in d.get("choices", []):
                    content = c.get("delta", {}).get("content")
                    if content:
                        self.chunks.append((time.monotonic(), content))
                        self.first_chunk.set()
                    if c.get("finish_reason"):
                        self.finish_reason = c["finish_reason"]
                if self.hang_up_after is not None and len(self.chunks) >= self.hang_up_after:
                    break
            conn.close()
        except Exception as e:  # noqa: BLE001 - a broken connection is a result the tests check
            self.error = self.error or f"{type(e).__name__}: {e}"
        finally:
            self.first_chunk.set()
            self.done.set()
        return self

    def start(self):
        threading.Thread(target=self.run, daemon=True).start()
        return self

    def pause_after(self, t):
        """The longest wait between consecutive chunks that ended after t (seconds): the pause this
        stream saw around an event at t. None when no chunk came after t or none before it."""
        times = [c for c, _ in self.chunks]
        gaps = [b - a for a, b in zip(times, times[1:]) if b > t]
        if not gaps or times[0] > t:
            return None
        return max(gaps)
