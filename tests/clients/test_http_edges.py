"""HTTP at the edges, over raw sockets against `troupe serve` (real model): HEAD answers GET's
status and headers without a body (a keep-alive connection then reads the next response
cleanly), and senders that stall (partial headers, a partial body, nothing at all) are cut off
after `server.http_read_timeout_s` while other clients are served meanwhile, a server out of
file descriptors waits for them instead of spinning on accept, and SIGTERM lets running streams
finish while refusing new requests."""
import os
import resource
import socket
import struct
import time
import urllib.request

import pytest

from harness import metric, running_server

READ_TIMEOUT_S = 2


@pytest.fixture(scope="module")
def server():
    with running_server("--no-cache", "--set", f"server.http_read_timeout_s={READ_TIMEOUT_S}") as s:
        yield s


def read_response(sock):
    """One HTTP/1.1 response: (status, headers, body), the body by Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed inside the headers: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return status, headers, rest


def test_head_is_get_without_the_body(server):
    for path in ("/health", "/metrics", "/", "/v1/models"):
        with urllib.request.urlopen(server.url + path, timeout=30) as r:
            get_body = r.read()
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            # HEAD then GET on one connection, pipelined: the GET's status line must come right
            # after the HEAD's headers (a body after HEAD would be read as the next response).
            s.sendall(f"HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            status, headers, rest = read_response(s)
            assert status == 200, path
            if path != "/metrics":  # the metrics text changes between two requests
                assert int(headers["content-length"]) == len(get_body), (path, headers)
            while b"\r\n\r\n" not in rest:
                rest += s.recv(65536)
            assert rest.startswith(b"HTTP/1.1 200"), (path, rest[:80])


def test_oversized_headers_are_431_and_a_post_to_the_websocket_path_is_405(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        status, _, body = read_response(s)
        assert status == 431, body
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
        status, headers, _ = read_response(s)
        assert status == 405
        assert headers["allow"] == "GET", headers  # a WebSocket upgrade is a GET (it read "POST")


def raw_request(server, head, body=b""):
    """Sends one request (head lines without the blank line) and reads its answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(head.encode() + b"\r\n\r\n" + body)
        status, headers, rest = read_response(s)
        while len(rest) < int(headers.get("content-length", "0")):
            rest += s.recv(65536)
        return status, rest


def test_checked_headers_come_once_and_json_is_utf8(server):
    body = b'{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1}'
    post = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Length: {len(body)}\r\n")
    # A second Host (Origin, Content-Type, Authorization) would be read by whatever reads the
    # last one, after the first passed the checks.
    for extra, name in (("Host: evil.example", "Host"), ("Origin: http://evil.example", "Origin"),
                        ("Content-Type: text/plain", "Content-Type")):
        status, answer = raw_request(server, post + "Content-Type: application/json\r\n"
                                     + ("Origin: http://127.0.0.1\r\n" if name == "Origin" else "") + extra, body)
        assert status == 400, (name, answer)
        assert f"'{name}' header lines" in answer.decode(), answer
    status, answer = raw_request(server, post + "Content-Type: application/json; charset=latin1", body)
    assert status == 415 and b"charset 'latin1'" in answer, answer
    status, answer = raw_request(server, post.replace("127.0.0.1", "127.0.0.1:99999x", 1)
                                 + "Content-Type: application/json", body)
    assert status == 400 and b"malformed" in answer, answer
    status, _ = raw_request(server, post + "Content-Type: application/json; charset=UTF-8", body)
    assert status == 200


def test_a_json_body_without_its_length_is_411_and_not_read_as_a_request(server):
    body = b'{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1}'
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n\r\n" + body)
        status, headers, rest = read_response(s)
        assert status == 411, (status, rest)
        assert headers.get("connection", "").lower() == "close", headers
        while len(rest) < int(headers["content-length"]):
            rest += s.recv(65536)
        assert b"Content-Length" in rest, rest
        # Nothing else comes back: the body's bytes were not read as a second request.
        tail = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            tail += chunk
        assert tail == b"", tail


def test_a_query_on_a_json_endpoint_is_refused_by_name(server):
    body = b'{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1}'
    status, answer = raw_request(server, "POST /v1/chat/completions?stream=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 f"Content-Type: application/json\r\nContent-Length: {len(body)}", body)
    assert status == 400, answer
    assert b"query parameter 'stream' is not read on POST /v1/chat/completions" in answer, answer


def test_options_without_an_origin_is_405_with_the_path_s_own_methods(server):
    # It said "GET, HEAD, POST" for every path; a preflight (with an allowed Origin) is still 204.
    for path, allow in (("/v1/chat/completions", "POST"), ("/health", "GET, HEAD"), ("/v1/ws", "GET")):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(f"OPTIONS {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n".encode())
            status, headers, _ = read_response(s)
            assert (status, headers.get("allow")) == (405, allow), (path, status, headers)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"OPTIONS /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
        assert read_response(s)[0] == 404


def test_an_http10_stream_is_not_chunked(server):
    """RFC 9112 6.1: chunked coding only for an HTTP/1.1 request. An HTTP/1.0 client used to get
    chunk-size lines in its body; now the events come as they are and the close ends the body."""
    body = b'{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"stream":true}'
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.0 200"), lines[0]
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    assert "transfer-encoding" not in headers and headers["connection"] == "close", headers
    assert rest.startswith(b"data: {"), rest[:40]  # an event, not a chunk size
    assert rest.rstrip().endswith(b"data: [DONE]"), rest[-40:]


def test_a_client_that_leaves_before_its_answer_is_counted_499(server):
    name = 'troupe_requests_total{endpoint="completions",status="499"}'
    before = metric(server, name)
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            body = b'{"prompt":"Write a long essay about rain.","max_tokens":400,"ignore_eos":true}'
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            time.sleep(0.3)
            # Leaves with a reset: a plain close (FIN) is a half-close, which HTTP/1.1 allows and
            # which still gets its answer (test_hostile_clients.py).
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    deadline = time.monotonic() + 10
    while metric(server, name) < before + 3:
        assert time.monotonic() < deadline, metric(server, name)
        time.sleep(0.2)


def test_a_415_is_counted_under_its_endpoint(server):
    # As a 400 of that endpoint is, not under "other": the refusal comes before routing.
    name = 'troupe_requests_total{endpoint="chat_completions",status="415"}'
    before = metric(server, name)
    body = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}'
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert read_response(s)[0] == 415
    assert metric(server, name) == before + 1


@pytest.mark.parametrize("stall", [
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # headers never end
    b"GET /health HTTP/1.1\r\n",  # a whole request line, then nothing
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100\r\n\r\n{\"prompt\":",  # body stops
    b"",  # connects and sends nothing
])
def test_stalled_senders_are_cut_off_and_others_are_served(server, stall):
    stalled = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(20)]
    t0 = time.monotonic()
    for s in stalled:
        if stall:
            s.sendall(stall)
    with urllib.request.urlopen(server.url + "/health", timeout=10) as r:  # served meanwhile
        assert r.status == 200
    for s in stalled:
        s.settimeout(READ_TIMEOUT_S + 10)
        if stall:
            # A request begun and left unfinished is told why (408, RFC 9110 15.5.9), then closed.
            status, headers, body = read_response(s)
            assert status == 408, body
            assert headers.get("connection", "").lower() == "close"
            assert b"server.http_read_timeout_s" in body
            assert s.recv(1024) == b""
        else:
            assert s.recv(1024) == b"", "the server should close a silent connection without an answer"
        s.close()
    took = time.monotonic() - t0
    assert READ_TIMEOUT_S - 1 <= took <= READ_TIMEOUT_S + 8, took


def test_a_keep_alive_connection_may_idle_up_to_the_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(s)[0] == 200
        time.sleep(READ_TIMEOUT_S / 2)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(s)[0] == 200
        s.settimeout(READ_TIMEOUT_S + 10)
        assert s.recv(1024) == b""  # then idle past it: closed


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_out_of_descriptors_the_server_waits_instead_of_spinning(server):
    """With its descriptors used up, accepting fails; the listener backs off (it used to retry at
    once, a core at 100%) and serves again once connections close."""
    pid = server.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    held = []
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (128, hard))
        for _ in range(160):  # more than the server can take: the rest wait in the backlog
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        time.sleep(0.5)
        c0 = cpu_seconds(pid)
        time.sleep(3)
        busy = (cpu_seconds(pid) - c0) / 3
        assert busy < 0.3, f"the server used {busy:.0%} of a core while out of descriptors"
    finally:
        for s in held:
            s.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=5) as r:
                assert r.status == 200
                break
        except OSError:
            assert time.monotonic() < deadline, "the server did not serve again after the connections closed"
            time.sleep(0.2)


def test_sigterm_ends_a_long_embeddings_list_within_the_grace():
    """A list of long texts is minutes of embedder time (2048 may be asked for): SIGTERM must not
    wait for it past server.shutdown_grace_s. The list stops at its next text, its client gets
    503 shutting_down, and the process exits 0."""
    import http.client
    import json
    import signal
    import threading

    text = "The tide came in over the flat grey sand while the gulls argued about the fish. " * 6
    with running_server("--no-cache", "--set", "server.shutdown_grace_s=2") as s:
        answer = {}

        def post():
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=300)
            try:
                c.request("POST", "/v1/embeddings", json.dumps({"input": [text] * 1000}),
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                answer["status"], answer["body"] = r.status, r.read()
            except (ConnectionError, http.client.HTTPException) as e:
                answer["error"] = e

        t = threading.Thread(target=post)
        t.start()
        time.sleep(3)  # the embedder loads on first use (about a second), then works through the list
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        code = s.proc.wait(timeout=60)
        took = time.monotonic() - t0
        t.join(30)
        assert code == 0, s.output()
        assert took < 2 + 8, f"exit {took:.1f} s after SIGTERM with a grace of 2 s"
        if "status" in answer:  # else the connection closed at exit, also an answer a client can act on
            assert answer["status"] == 503 and b"shutting_down" in answer["body"], answer


def test_sigterm_lets_running_streams_finish_and_takes_no_new_requests():
    """SIGTERM drains: a running SSE stream and a WebSocket stream end whole (usage, [DONE], done
    frame), a request on a connection opened before gets 503 shutting_down, /health says
    draining, new connections are refused, and the process exits 0 once the streams are done."""
    import contextlib
    import http.client
    import json
    import signal
    import threading

    from websockets.sync.client import connect as ws_connect

    # Streams long enough (~1000 tokens) to be running still when the signal and the probes come.
    with running_server("--no-cache", "--set", "server.shutdown_grace_s=60") as s, contextlib.ExitStack() as stack:
        body = json.dumps({"prompt": "Tell a long story about the sea.", "max_tokens": 1200,
                           "temperature": 0, "ignore_eos": True, "stream": True})
        sse = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        sse.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = sse.getresponse()
        assert resp.status == 200
        idle = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)  # opened before the signal
        idle.request("GET", "/health")
        assert idle.getresponse().read()
        ws = stack.enter_context(ws_connect(s.ws_url, open_timeout=30))
        ws.send(json.dumps({"type": "generate", "id": "w", "prompt": "Count to one hundred.", "max_tokens": 1000,
                            "temperature": 0, "ignore_eos": True}))
        first = json.loads(ws.recv(timeout=60))
        assert first["type"] == "token", first
        first_line = resp.readline()
        assert first_line.startswith(b"data: "), first_line

        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        idle.request("GET", "/health")
        h = idle.getresponse()
        assert h.status == 503 and json.loads(h.read())["status"] == "draining"
        late = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        try:
            late.request("POST", "/v1/completions", json.dumps({"prompt": "hi", "max_tokens": 2}),
                         {"Content-Type": "application/json"})
            r = late.getresponse()
            assert r.status == 503 and json.loads(r.read())["error"]["code"] == "shutting_down"
        except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
            pass  # the listener is closed (or closed as this connection queued): as good
        ws_frames = [first]
        while ws_frames[-1]["type"] == "token":
            ws_frames.append(json.loads(ws.recv(timeout=60)))
        assert ws_frames[-1]["type"] == "done", ws_frames[-1]
        assert ws_frames[-1]["usage"]["completion_tokens"] == 1000
        assert len(ws_frames) == 1001
        lines = [first_line] + [line for line in iter(resp.readline, b"")]
        data = [line[6:].strip() for line in lines if line.startswith(b"data: ")]
        assert data[-1] == b"[DONE]", data[-3:]
        chunks = [json.loads(d) for d in data[:-1]]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-1]
        s.proc.wait(30)
        assert s.proc.returncode == 0
        assert any("shutting down" in line for line in s.log), s.output()
