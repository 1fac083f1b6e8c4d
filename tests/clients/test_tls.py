"""TLS (server.tls_cert, server.tls_key) driven by Python's ssl clients against `troupe serve`
with the real model: the `openai` client over https with a test CA, a server-sent-event stream
over https, a WSS stream (websockets with an SSLContext), a client that does not trust the CA is
refused by its own check, plain HTTP to the TLS port gets a plain 400 that says why, the
connection limits and the Origin check still apply under TLS, and bad TLS files are start-up
errors naming the key. The certificates are made here with openssl, as scripts/make-cluster-certs.sh
makes the cluster's."""
import asyncio
import json
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx2
import openai
import pytest
from websockets.asyncio.client import connect

import harness
from harness import FRAME_TIMEOUT_S, TROUPE_BIN, TROUPE_MODEL, assert_consecutive, read_until_end

TIMEOUT_S = 180
READ_TIMEOUT_S = 5  # server.http_read_timeout_s of the module's server


def make_certs(d):
    """A test CA and a server certificate for 127.0.0.1 / localhost signed by it."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test certificates (apt-get install openssl)")
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2", "-subj", "/CN=troupe test CA",
        "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", "/CN=localhost",
        "-keyout", f"{d}/server.key", "-out", f"{d}/server.csr")
    (Path(d) / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-sha256", "-days", "2", "-in", f"{d}/server.csr", "-CA", f"{d}/ca.pem",
        "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-extfile", f"{d}/ext.cnf", "-out", f"{d}/server.pem")


def tls_args(cert, key):
    return ["--set", f'server.tls_cert="{cert}"', "--set", f'server.tls_key="{key}"']


class TlsServer(harness.Server):
    """harness.Server over https: the port is read from the `https://` line, /health is polled
    through TLS with the test CA."""

    def __init__(self, ca, *extra_args):
        self.ctx = ssl.create_default_context(cafile=ca)
        super().__init__(*extra_args)

    def _pump(self):
        for line in self.proc.stdout:
            self.log.append(line.rstrip("\n"))
            m = re.search(r"listening on https://[^\s,]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._port_found.set()

    def _wait_ready(self):
        deadline = time.monotonic() + harness.READY_TIMEOUT_S
        while not self._port_found.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"troupe serve did not announce an https port:\n{self.output()}")
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=10, context=self.ctx) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"/health over https not ready:\n{self.output()}")
            time.sleep(0.2)

    @property
    def url(self):
        return f"https://127.0.0.1:{self.port}"

    @property
    def ws_url(self):
        return f"wss://127.0.0.1:{self.port}/v1/ws"


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="troupe-tls-")
    make_certs(d)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def server(certs):
    s = TlsServer(f"{certs}/ca.pem", "--no-cache", "--set", f"server.http_read_timeout_s={READ_TIMEOUT_S}", *tls_args(f"{certs}/server.pem", f"{certs}/server.key"))
    try:
        yield s
    finally:
        code = s.stop()
        assert code == 0, f"troupe serve exited with {code}:\n{s.output()}"


def client(server, certs):
    http = httpx2.Client(verify=ssl.create_default_context(cafile=f"{certs}/ca.pem"), timeout=TIMEOUT_S)
    return openai.OpenAI(api_key="none", base_url=server.url + "/v1", http_client=http, max_retries=0)


def test_openai_client_over_https(server, certs):
    c = client(server, certs)
    r = c.chat.completions.create(model=harness.MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}],
                                  max_tokens=8, temperature=0)
    assert r.choices[0].message.content
    assert r.usage.completion_tokens > 0
    # A stream (server-sent events) over TLS gives the same greedy text.
    chunks = c.chat.completions.create(model=harness.MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}],
                                       max_tokens=8, temperature=0, stream=True)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == r.choices[0].message.content
    # Keep-alive over TLS: both requests above and this one may share one connection.
    assert [m.id for m in c.models.list().data][0] == harness.MODEL_NAME


def test_client_without_the_ca_refuses_the_server(server):
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(api_key="none", base_url=server.url + "/v1", max_retries=0, timeout=30,
                      http_client=httpx2.Client(verify=ssl.create_default_context(), timeout=30)).models.list()


def test_wss_stream(server, certs):
    async def body():
        ctx = ssl.create_default_context(cafile=f"{certs}/ca.pem")
        async with connect(server.ws_url, ssl=ctx) as ws:
            await ws.send(json.dumps({"type": "generate", "id": "t1", "max_tokens": 10, "temperature": 0,
                                      "ignore_eos": True, "messages": [{"role": "user", "content": "Count."}]}))
            tokens, done = await read_until_end(ws, "t1")
            assert done["type"] == "done", done
            assert len(tokens) == 10
            assert_consecutive(tokens)
    asyncio.run(asyncio.wait_for(body(), 3 * FRAME_TIMEOUT_S))


def test_wss_upgrade_from_a_foreign_origin_is_403(server, certs):
    async def body():
        ctx = ssl.create_default_context(cafile=f"{certs}/ca.pem")
        with pytest.raises(Exception) as e:
            async with connect(server.ws_url, ssl=ctx, origin="https://evil.example"):
                pass
        assert "403" in str(e.value)
    asyncio.run(asyncio.wait_for(body(), 60))


def test_plain_http_to_the_tls_port_gets_a_400_saying_why(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), got
    err = json.loads(body)["error"]
    assert err["code"] == "plain_http_to_tls_port"
    assert "https://" in err["message"]
    # And a plain-HTTP client library sees the same error, not a hang or a reset.
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=30)
    assert e.value.code == 400


def test_a_stalled_handshake_is_closed_by_the_read_timeout(server):
    # server.http_read_timeout_s (READ_TIMEOUT_S here) bounds the TLS handshake too: a client
    # that connects and says nothing is closed, as a stalled plain-HTTP sender is.
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT_S + 30) as s:
        assert s.recv(4096) == b""
    assert time.monotonic() - start < READ_TIMEOUT_S + 30


def start_failure(*args):
    """Runs `troupe serve` expecting it to stop at start: its exit code and output."""
    p = subprocess.run([str(TROUPE_BIN), "serve", "--listen", "127.0.0.1:0", "--model", str(TROUPE_MODEL), *args],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def test_bad_tls_files_are_start_errors_naming_the_key(certs, tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    code, out = start_failure(*tls_args(garbage, f"{certs}/server.key"))
    assert code != 0 and "server.tls_cert" in out and str(garbage) in out, out
    code, out = start_failure(*tls_args(f"{certs}/server.pem", tmp_path / "missing.key"))
    assert code != 0 and "server.tls_key" in out and "missing.key" in out, out
    # The CA's key is a valid key, but not the certificate's.
    code, out = start_failure(*tls_args(f"{certs}/server.pem", f"{certs}/ca.key"))
    assert code != 0 and "server.tls_key" in out and "does not match" in out, out
    code, out = start_failure("--set", f'server.tls_cert="{certs}/server.pem"')
    assert code != 0 and "server.tls_key" in out, out
