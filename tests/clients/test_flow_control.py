"""Flow control on a stream's unread backlog (server.max_unread_kib, issue 24 item 6), over raw
sockets against `troupe serve` (real model): a client with a small receive buffer that stops
reading after the first chunk has its stream paused at the streamer (troupe_paused_sequences)
long before the kernel's send buffer would have filled, and once it reads again every token
arrives, in order, with none missing. For both SSE and WebSocket streams."""
import base64
import json
import os
import re
import socket
import time
import urllib.request

import pytest

from harness import running_server

MAX_TOKENS = 300
UNREAD_KIB = 8


@pytest.fixture(scope="module")
def server():
    # A small bound and token buffer so that the pause comes within a few dozen tokens; a long
    # slow-consumer timeout so that it does not end the stream while the test holds it.
    with running_server("--no-cache", "--set", f"server.max_unread_kib={UNREAD_KIB}",
                        "--set", "streamer.buffer_tokens=8",
                        "--set", "streamer.slow_consumer_timeout_ms=60000") as s:
        yield s


def paused_sequences(server):
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(r"^troupe_paused_sequences (\S+)$", text, re.M)
    # The pipeline's gauges come from a poller: absent until its first refresh.
    return float(m.group(1)) if m else 0.0


def small_socket(server):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Before connect, so that the advertised window stays small.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(60)
    s.connect(("127.0.0.1", server.port))
    return s


def wait_paused(server, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if paused_sequences(server) >= 1:
            return True
        time.sleep(0.1)
    return False


def read_until(sock, data, pred):
    while not pred(data):
        chunk = sock.recv(65536)
        assert chunk, f"connection closed early: {data[-300:]!r}"
        data += chunk
    return data


def request_body(**extra):
    return {"messages": [{"role": "user", "content": "Count from one to a thousand."}],
            "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0, **extra}


def test_an_sse_reader_that_stops_is_paused_and_loses_nothing(server):
    sock = small_socket(server)
    body = json.dumps(request_body(stream=True, logprobs=True,
                                   stream_options={"include_usage": True})).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    # The head and the first event, then nothing read.
    data = read_until(sock, b"", lambda d: b"\r\n\r\n" in d and b"data: " in d.split(b"\r\n\r\n", 1)[1])
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    assert wait_paused(server), "the stream of a client that stopped reading was not paused"
    time.sleep(0.5)
    assert paused_sequences(server) >= 1, "the pause did not hold while the client read nothing"
    # Reads again: the rest arrives.
    data = read_until(sock, data, lambda d: d.endswith(b"0\r\n\r\n"))
    sock.close()
    body = data.split(b"\r\n\r\n", 1)[1]
    # Undo the chunked encoding, then the SSE framing.
    raw, rest = b"", body
    while True:
        size_s, rest = rest.split(b"\r\n", 1)
        n = int(size_s, 16)
        if n == 0:
            break
        raw, rest = raw + rest[:n], rest[n + 2:]
    events = [e[len("data: "):] for e in raw.decode().split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    logprob_tokens = [t for c in chunks for ch in c["choices"] if ch.get("logprobs")
                      for t in ch["logprobs"]["content"]]
    usage = chunks[-1]["usage"]
    # With logprobs every token has its chunk: none missing, none twice.
    assert usage["completion_tokens"] == MAX_TOKENS
    assert len(logprob_tokens) == MAX_TOKENS
    assert [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch.get("finish_reason")] == ["length"]
    deadline = time.monotonic() + 10
    while paused_sequences(server) != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert paused_sequences(server) == 0


def ws_frame(text):
    """A masked client text frame."""
    payload = text.encode()
    mask = os.urandom(4)
    head = bytes([0x81])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    else:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_messages(data):
    """Complete server frames in `data` (unmasked, unfragmented): (texts, bytes left over)."""
    out = []
    while len(data) >= 2:
        n, at = data[1] & 0x7F, 2
        if n == 126:
            if len(data) < 4:
                break
            n, at = int.from_bytes(data[2:4], "big"), 4
        elif n == 127:
            if len(data) < 10:
                break
            n, at = int.from_bytes(data[2:10], "big"), 10
        if len(data) < at + n:
            break
        if data[0] & 0x0F == 0x1:
            out.append(data[at:at + n].decode())
        data = data[at + n:]
    return out, data


def test_a_websocket_reader_that_stops_is_paused_and_loses_nothing(server):
    sock = small_socket(server)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    data = read_until(sock, b"", lambda d: b"\r\n\r\n" in d)
    assert data.startswith(b"HTTP/1.1 101"), data[:200]
    data = data.split(b"\r\n\r\n", 1)[1]
    sock.sendall(ws_frame(json.dumps({"type": "generate", "id": "fc1", **request_body()})))
    frames = []
    while not frames:  # the first frame, then nothing read
        got, data = ws_messages(data + sock.recv(65536))
        frames += got
    assert wait_paused(server), "the stream of a client that stopped reading was not paused"
    time.sleep(0.5)
    assert paused_sequences(server) >= 1, "the pause did not hold while the client read nothing"
    while not frames or json.loads(frames[-1])["type"] == "token":
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the done frame"
        got, data = ws_messages(data + chunk)
        frames += got
    sock.close()
    parsed = [json.loads(f) for f in frames]
    tokens = [f for f in parsed if f["type"] == "token"]
    assert parsed[-1]["type"] == "done", parsed[-1]
    assert parsed[-1]["finish_reason"] == "length"
    assert [t["index"] for t in tokens] == list(range(MAX_TOKENS)), "token indexes have a gap or repeat"
    assert parsed[-1]["usage"]["completion_tokens"] == MAX_TOKENS
