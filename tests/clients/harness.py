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
