"""The WebSocket protocol of docs/protocol.md driven by the `websockets` package against
`troupe serve` with the real model: generate, two requests multiplexed on one socket, cancel,
resume after a reconnect (with the generate's resume_key, and only with it), a resume that
displaces a socket still open, cancel kept to its own socket, a cancel after or racing a stream's
end, bad frames, an oversized message, authentication by frame, and the idle close timed from the
last stream's end.

The server runs without the response cache, so that every request here is really generated."""
import asyncio
import json
import secrets
import time

import pytest
import websockets
from websockets.asyncio.client import connect

from harness import FRAME_TIMEOUT_S, assert_consecutive, read_until_end, recv_json, running_server, token_text

MAX_WS_MESSAGE = 64 * 1024


@pytest.fixture(scope="module")
def server():
    with running_server("--no-cache", "--max-ws-message", str(MAX_WS_MESSAGE), "--resume-window", "120") as s:
        yield s


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 3 * FRAME_TIMEOUT_S))


def chat(content):
    return [{"role": "user", "content": content}]


def generate(rid, content, max_tokens, **extra):
    return json.dumps({"type": "generate", "id": rid, "messages": chat(content), "max_tokens": max_tokens,
                       "temperature": 0, **extra})


async def isolated(url, content, max_tokens, **extra):
    """The text of one request alone on its own socket (the greedy reference)."""
    async with connect(url) as ws:
        await ws.send(generate("ref", content, max_tokens, **extra))
        tokens, done = await read_until_end(ws, "ref")
        assert done["type"] == "done", done
        return token_text(tokens, done)


def test_generate_streams_indexed_tokens_then_done(server):
    async def body():
        async with connect(server.ws_url) as ws:
            await ws.send(generate("g1", "Count from one to ten.", 12, ignore_eos=True))
            tokens, done = await read_until_end(ws, "g1")
            assert_consecutive(tokens)
            assert len(tokens) == 12
            assert done["type"] == "done"
            assert done["finish_reason"] == "length"
            assert done["cached"] is False
            assert done["usage"]["completion_tokens"] == 12
            assert done["usage"]["prompt_tokens"] > 0
            t = done["timings"]
            assert 0 <= t["ttft_ms"] <= t["total_ms"]
            assert token_text(tokens, done).strip()
            # An integer id comes back as a string; a prompt works as well as messages.
            await ws.send(json.dumps({"type": "generate", "id": 7, "prompt": "Once upon a time", "max_tokens": 3}))
            tokens, done = await read_until_end(ws, "7")
            assert done["type"] == "done" and len(tokens) == done["usage"]["completion_tokens"] <= 3
            # The id of an ended stream may be used again.
            await ws.send(generate("g1", "Say yes.", 2))
            _, done = await read_until_end(ws, "g1")
            assert done["type"] == "done"
    run(body())


def test_two_requests_multiplexed_on_one_socket(server):
    prompts = {"a": ("Describe the sea in one paragraph.", 40), "b": ("List some fruits.", 30)}

    async def body():
        refs = {rid: await isolated(server.ws_url, p, n, ignore_eos=True) for rid, (p, n) in prompts.items()}
        async with connect(server.ws_url) as ws:
            for rid, (p, n) in prompts.items():
                await ws.send(generate(rid, p, n, ignore_eos=True))
            order = []
            tokens = {"a": [], "b": []}
            final = {}
            while len(final) < 2:
                f = await recv_json(ws)
                assert f["id"] in tokens, f
                order.append((f["id"], f["type"]))
                if f["type"] == "token":
                    assert f["id"] not in final, "a token after its stream's done frame"
                    tokens[f["id"]].append(f)
                else:
                    final[f["id"]] = f
            for rid, (_, n) in prompts.items():
                assert final[rid]["type"] == "done", final[rid]
                assert final[rid]["finish_reason"] == "length"
                assert_consecutive(tokens[rid])
                assert len(tokens[rid]) == n
                # Batched together, each answer is still the one it gets alone (greedy).
                assert token_text(tokens[rid], final[rid]) == refs[rid], rid
            # Both streams were live at once: b's first token came before a's done frame.
            first_b = order.index(("b", "token"))
            done_a = order.index(("a", "done"))
            assert first_b < done_a, f"not interleaved: {order}"
    run(body())


def test_cancel_mid_stream(server):
    async def body():
        async with connect(server.ws_url) as ws:
            await ws.send(generate("c1", "Write a long story about a lighthouse keeper.", 400, ignore_eos=True))
            seen = []
            while len(seen) < 3:
                f = await recv_json(ws)
                assert f["id"] == "c1" and f["type"] == "token", f
                seen.append(f)
            await ws.send(json.dumps({"type": "cancel", "id": "c1"}))
            tokens, done = await read_until_end(ws, "c1", first=seen)
            assert done["type"] == "done", done
            assert done["finish_reason"] == "cancelled"
            assert_consecutive(tokens)
            assert len(tokens) < 400
            assert done["usage"]["completion_tokens"] == len(tokens)
            # Nothing follows the done frame, and the socket still serves.
            await ws.send(json.dumps({"type": "ping"}))
            assert await recv_json(ws) == {"type": "pong"}
            # Cancelling the ended stream again is answered, with no second done frame.
            await ws.send(json.dumps({"type": "cancel", "id": "c1"}))
            await ws.send(json.dumps({"type": "ping"}))
            f = await recv_json(ws)
            assert (f["type"], f["id"], f["code"]) == ("error", "c1", "already_done"), f
            assert await recv_json(ws) == {"type": "pong"}
    run(body())


def test_a_cancel_after_the_end_is_answered_already_done(server):
    """A stream that ended on its own, then cancelled: `already_done`, after its done frame."""
    async def body():
        async with connect(server.ws_url) as ws:
            await ws.send(generate("e1", "Say hello.", 2))
            _, done = await read_until_end(ws, "e1")
            assert done["type"] == "done", done
            await ws.send(json.dumps({"type": "cancel", "id": "e1"}))
            f = await recv_json(ws, 10)
            assert (f["type"], f["id"], f["code"]) == ("error", "e1", "already_done"), f
            assert "ended" in f["message"] and f["param"] is None, f
            await ws.send(json.dumps({"type": "ping"}))
            assert await recv_json(ws) == {"type": "pong"}
    run(body())


def test_a_cancel_racing_the_end_gets_one_final_frame(server):
    """Cancels sent as short streams end: each stream has exactly one done frame (`cancelled` or
    its own reason), a cancel that came too late is `already_done`, never before that done frame,
    and a cancel sent after it always is."""
    async def body():
        async with connect(server.ws_url) as ws:
            for i in range(12):
                rid = f"race{i}"
                await ws.send(generate(rid, "Say hello.", 2 + i % 3, ignore_eos=True))
                first = [await recv_json(ws)] if i % 2 else []  # cancel as the stream is about to end
                await ws.send(json.dumps({"type": "cancel", "id": rid}))
                _, done = await read_until_end(ws, rid, first=first)
                assert done["type"] == "done" and done["finish_reason"] in ("cancelled", "length"), done
                await ws.send(json.dumps({"type": "cancel", "id": rid}))
                await ws.send(json.dumps({"type": "ping", "id": rid}))
                late = []
                while (f := await recv_json(ws, 30))["type"] != "pong":
                    late.append((f["type"], f["id"], f.get("code")))
                assert late in ([("error", rid, "already_done")], [("error", rid, "already_done")] * 2), late
    run(body())


@pytest.mark.parametrize("away_s", [0.5, 4.0])
def test_resume_after_reconnect_loses_and_repeats_nothing(server, away_s):
    """Reads some tokens, drops the socket, stays away while the stream goes on (or, for the long
    pause, possibly ends), reconnects and resumes from the last index seen."""
    rid = f"r-{away_s}"
    n = 48
    prompt = "Explain how bread is made, step by step."

    async def body():
        ref = await isolated(server.ws_url, prompt, n, ignore_eos=True)
        ws = await connect(server.ws_url)
        key = secrets.token_hex(16)
        await ws.send(generate(rid, prompt, n, ignore_eos=True, resume_key=key))
        first = []
        while len(first) < 5:
            f = await recv_json(ws)
            assert f["id"] == rid and f["type"] == "token", f
            first.append(f)
        ws.transport.abort()  # as a dropped network would: no close handshake
        await asyncio.sleep(away_s)
        async with connect(server.ws_url) as ws2:
            last = first[-1]["index"]
            await ws2.send(json.dumps({"type": "resume", "id": rid, "from_index": last, "resume_key": key}))
            rest, done = await read_until_end(ws2, rid)
            assert done["type"] == "done", done
            assert done["finish_reason"] == "length"
            assert_consecutive(first + rest)
            assert len(first) + len(rest) == n == done["usage"]["completion_tokens"]
            assert token_text(first + rest, done) == ref
            # Resuming again from the start replays everything once more, then the final frame.
            await ws2.send(json.dumps({"type": "resume", "id": rid, "from_index": -1, "resume_key": key}))
            again, done2 = await read_until_end(ws2, rid)
            assert [t["index"] for t in again] == list(range(n))
            assert token_text(again, done2) == ref
    run(body())


def test_resume_unknown_id_is_an_error_frame(server):
    async def body():
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({"type": "resume", "id": "never-was", "from_index": 3,
                                      "resume_key": secrets.token_hex(16)}))
            f = await recv_json(ws)
            assert f["type"] == "error" and f["id"] == "never-was" and f["code"] == "unknown_id", f
    run(body())


def test_another_client_can_neither_resume_nor_cancel_a_stream(server):
    """A second client that knows only the id: its resume (wrong key, no key, or a stream started
    without one) is `unknown_id`, like an id that never was, and its cancel is `unknown_id` too;
    the owner's stream runs to its end untouched."""
    async def body():
        key = secrets.token_hex(16)
        async with connect(server.ws_url) as owner, connect(server.ws_url) as other:
            await owner.send(generate("mine", "Name three rivers.", 24, ignore_eos=True, resume_key=key))
            await owner.send(generate("keyless", "Name three lakes.", 8, ignore_eos=True))
            first = await recv_json(owner)
            assert first["type"] == "token", first
            await other.send(json.dumps({"type": "resume", "id": "mine", "from_index": -1,
                                         "resume_key": secrets.token_hex(16)}))
            await other.send(json.dumps({"type": "resume", "id": "mine", "from_index": -1}))
            await other.send(json.dumps({"type": "resume", "id": "keyless", "from_index": -1,
                                         "resume_key": key}))
            await other.send(json.dumps({"type": "cancel", "id": "mine"}))
            answers = [await recv_json(other) for _ in range(4)]
            assert [(a["type"], a["id"], a["code"]) for a in answers] == [
                ("error", "mine", "unknown_id"), ("error", "mine", "invalid_request"),
                ("error", "keyless", "unknown_id"), ("error", "mine", "unknown_id")], answers
            frames = {"mine": [first] if first["id"] == "mine" else [], "keyless": [] if first["id"] == "mine" else [first]}
            ends = {}
            while len(ends) < 2:
                f = await recv_json(owner)
                if f["type"] == "token":
                    frames[f["id"]].append(f)
                else:
                    ends[f["id"]] = f
            assert ends["mine"]["type"] == "done" and ends["mine"]["finish_reason"] == "length", ends
            assert_consecutive(frames["mine"])
            assert len(frames["mine"]) == 24
    run(body())


def ws_cancelled_count(server):
    import urllib.request
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('troupe_requests_total{endpoint="ws",status="cancelled"} '):
                return float(line.split()[-1])
    return 0.0


def ws_requests_count(server, status):
    import urllib.request
    prefix = 'troupe_requests_total{endpoint="ws",status="%s"} ' % status
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(prefix):
                return float(line.split()[-1])
    return 0.0


def test_refused_generate_frames_are_counted_as_requests(server):
    """A generate refused before the pipeline (a field out of range, an id in use) is a request
    answered with an error, counted in /metrics under its code as a pipeline error is; a refused
    ping is not a request."""
    async def body():
        invalid, duplicate = ws_requests_count(server, "invalid_request"), ws_requests_count(server, "duplicate_id")
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({"type": "generate", "id": "t", "prompt": "hi", "temperature": -1}))
            f = await recv_json(ws)
            assert (f["type"], f["code"], f["param"]) == ("error", "invalid_request", "temperature"), f
            await ws.send(json.dumps({"type": "ping", "bogus": 1}))
            assert (await recv_json(ws))["type"] == "error"
            await ws.send(generate("twice", "Write a long poem.", 200, ignore_eos=True))
            await ws.send(generate("twice", "Write a long poem.", 200, ignore_eos=True))
            while True:
                f = await recv_json(ws)
                if f["type"] == "error":
                    assert (f["id"], f["code"]) == ("twice", "duplicate_id"), f
                    break
            await ws.send(json.dumps({"type": "cancel", "id": "twice"}))
        assert ws_requests_count(server, "invalid_request") == invalid + 1
        assert ws_requests_count(server, "duplicate_id") == duplicate + 1
    run(body())


def test_a_stream_without_resume_key_ends_with_its_socket(server):
    """Nobody can resume a stream started without a resume_key: when its socket drops it is
    cancelled at once instead of generating on for the resumption window."""
    async def body():
        before = ws_cancelled_count(server)
        ws = await connect(server.ws_url)
        await ws.send(generate("orphan", "Write a very long poem.", 1000, ignore_eos=True))
        f = await recv_json(ws)
        assert f["type"] == "token", f
        ws.transport.abort()
        for _ in range(50):
            if ws_cancelled_count(server) >= before + 1:
                return
            await asyncio.sleep(0.2)
        raise AssertionError("the keyless stream was not cancelled when its socket went away")
    run(body())


def test_resume_on_a_new_socket_tells_the_old_one(server):
    """The client comes back on a new socket while the server still holds the old one open: the
    new socket gets the stream (replay, then live), the old one an error `resumed_elsewhere` as
    its last frame for the stream, and a cancel from the old socket no longer reaches it."""
    async def body():
        key = secrets.token_hex(16)
        async with connect(server.ws_url) as old, connect(server.ws_url) as new:
            await old.send(generate("moving", "Describe a sunrise over the sea.", 400, ignore_eos=True, resume_key=key))
            seen = []
            while len(seen) < 3:
                f = await recv_json(old)
                assert f["type"] == "token", f
                seen.append(f)
            await new.send(json.dumps({"type": "resume", "id": "moving", "from_index": seen[-1]["index"],
                                       "resume_key": key}))
            while True:  # tokens already on their way to the old socket, then the notice
                f = await recv_json(old)
                if f["type"] != "token":
                    break
            assert f["type"] == "error" and f["id"] == "moving" and f["code"] == "resumed_elsewhere", f
            await old.send(json.dumps({"type": "cancel", "id": "moving"}))
            f = await recv_json(old)
            assert (f["type"], f["id"], f["code"]) == ("error", "moving", "unknown_id"), f
            rest, done = await read_until_end(new, "moving")
            assert done["type"] == "done" and done["finish_reason"] == "length", done
            assert_consecutive(seen + rest)
            assert len(seen) + len(rest) == 400
    run(body())


def test_bad_frames_get_error_frames_and_the_connection_goes_on(server):
    bad = [
        ("{not json", None, "invalid_json"),
        ("[1,2,3]", None, "invalid_json"),  # JSON, but not an object
        (json.dumps({"type": "teleport", "id": "x1"}), "x1", "unknown_type"),
        (json.dumps({"id": "x2"}), "x2", "unknown_type"),  # no type at all
        (json.dumps({"type": "generate", "id": "x3", "prompt": 42}), "x3", "invalid_request"),
        (json.dumps({"type": "generate", "id": "x4", "messages": "hello"}), "x4", "invalid_request"),
        (json.dumps({"type": "generate", "id": "x5", "prompt": "a", "messages": chat("b")}), "x5",
         "invalid_request"),
        (json.dumps({"type": "generate", "id": "x6", "prompt": "a", "max_tokens": "many"}), "x6",
         "invalid_request"),
        (json.dumps({"type": "generate", "id": "x7", "prompt": "a", "temperature": -2}), "x7", "invalid_request"),
        (json.dumps({"type": "generate", "prompt": "no id"}), None, "invalid_request"),
        (json.dumps({"type": "cancel", "id": "nobody"}), "nobody", "unknown_id"),
        (json.dumps({"type": "resume", "id": "live", "from_index": "x"}), "live", "invalid_request"),
        (json.dumps({"type": "resume", "id": "live", "from_index": 1}), "live", "invalid_request"),  # no key
        (json.dumps({"type": "generate", "id": "x9", "prompt": "a", "resume_key": "short"}), "x9", "invalid_request"),
        (b"\x00\x01binary", None, "invalid_request"),  # a binary frame
        ('{"type":"generate","id":"x8","prompt":"\\ud800"}', None, "invalid_json"),  # a lone surrogate
    ]

    async def body():
        async with connect(server.ws_url) as ws:
            # A stream runs on this socket while the bad frames arrive; it must not notice them.
            await ws.send(generate("live", "Tell me about mountains.", 30, ignore_eos=True))
            for frame, _, _ in bad:
                await ws.send(frame)
            await ws.send(generate("live", "duplicate while running", 4))
            errors = []
            tokens = []
            done = None
            expected_errors = len(bad) + 1
            while done is None or len(errors) < expected_errors:
                f = await recv_json(ws)
                if f["type"] == "token" and f["id"] == "live":
                    assert done is None
                    tokens.append(f)
                elif f["type"] == "done" and f["id"] == "live":
                    done = f
                else:
                    assert f["type"] == "error", f
                    assert f["message"], f
                    errors.append(f)
            got = [(frame, err["id"], err["code"]) for (frame, _, _), err in zip(bad, errors)]
            assert got == bad, "\n".join(str(e) for e in errors)
            assert errors[-1]["code"] == "duplicate_id" and errors[-1]["id"] == "live"
            assert done["finish_reason"] == "length"
            assert_consecutive(tokens)
            assert len(tokens) == 30
            await ws.send(json.dumps({"type": "ping"}))
            assert await recv_json(ws) == {"type": "pong"}
    run(body())


def test_error_frames_name_the_field_and_echo_a_readable_id(server):
    """A refusal names the field in `param` as the client spelt it (the server's max_tokens cap
    named as `max_completion_tokens` when that was sent), and a frame with a key twice still gets
    its id back, so that a client waiting on that id hears the refusal."""
    cases = [
        (json.dumps({"type": "generate", "id": "cap1", "prompt": "a", "max_completion_tokens": 99999}),
         "cap1", "invalid_request", "max_completion_tokens", "max_completion_tokens 99999 exceeds"),
        (json.dumps({"type": "generate", "id": "cap2", "prompt": "a", "max_tokens": 99999}),
         "cap2", "invalid_request", "max_tokens", "max_tokens 99999 exceeds"),
        ('{"type":"generate","id":"u2","prompt":"a","max_tokens":1,"max_tokens":2}',
         "u2", "duplicate_key", "max_tokens", "duplicate key 'max_tokens'"),
        ('{"type":"generate","id":"u3","id":"u4","prompt":"a"}', None, "duplicate_key", "id", "duplicate key 'id'"),
        (json.dumps({"type": "generate", "id": "t1", "prompt": "a", "temperature": "hot"}),
         "t1", "invalid_request", "temperature", None),
        (json.dumps({"type": "generate", "id": "x" * 300, "prompt": "a"}), None, "invalid_request", "id",
         "'id' is 300 bytes"),
    ]

    async def body():
        async with connect(server.ws_url) as ws:
            for frame, rid, code, param, lead in cases:
                await ws.send(frame)
                f = await recv_json(ws)
                assert (f["type"], f["id"], f["code"], f["param"]) == ("error", rid, code, param), f
                if lead:
                    assert f["message"].startswith(lead), f
            await ws.send(json.dumps({"type": "cancel", "id": "nobody"}))
            f = await recv_json(ws)
            assert f["code"] == "unknown_id" and f["param"] is None, f
    run(body())


@pytest.mark.parametrize("violation, close_code", [
    ("oversized", 1009),     # over --max-ws-message: Beast fails the read, no error frame possible
    ("invalid_utf8", 1007),  # a text frame that is not UTF-8 (RFC 6455 says: fail the connection)
])
def test_protocol_violations_close_only_that_socket(server, violation, close_code):
    async def body():
        async with connect(server.ws_url) as bystander:
            await bystander.send(generate("by", "Describe a forest.", 24, ignore_eos=True))
            async with connect(server.ws_url, max_size=None) as ws:
                if violation == "oversized":
                    await ws.send(json.dumps({"type": "generate", "id": "big",
                                              "prompt": "x" * (MAX_WS_MESSAGE + 1000)}))
                else:
                    await ws.send(b'{"type":"generate","id":"u","prompt":"\xff\xfe"}', text=True)
                with pytest.raises(websockets.ConnectionClosed) as e:
                    while True:
                        await recv_json(ws)
                assert e.value.rcvd is not None and e.value.rcvd.code == close_code, e.value
            tokens, done = await read_until_end(bystander, "by")
            assert done["type"] == "done" and done["finish_reason"] == "length"
            assert_consecutive(tokens)
            assert len(tokens) == 24
        # Just under the limit is fine.
        async with connect(server.ws_url) as ws:
            # Padded with whitespace: a frame's unknown fields are refused by name.
            await ws.send('{"type": "ping"' + " " * (MAX_WS_MESSAGE - 100) + "}")
            assert await recv_json(ws) == {"type": "pong"}
    run(body())


def test_auth_by_header_or_first_frame():
    async def body(s):
        # Header on the upgrade request.
        async with connect(s.ws_url, additional_headers={"Authorization": "Bearer k1"}) as ws:
            await ws.send(generate("h", "Hi", 2))
            _, done = await read_until_end(ws, "h")
            assert done["type"] == "done"
        # A wrong key in the header is refused before the upgrade.
        with pytest.raises(websockets.InvalidStatus) as e:
            async with connect(s.ws_url, additional_headers={"Authorization": "Bearer nope"}):
                pass
        assert e.value.response.status_code == 401
        # No header: generate is refused until an auth frame with a good key.
        async with connect(s.ws_url) as ws:
            await ws.send(generate("f", "Hi", 2))
            f = await recv_json(ws)
            assert f["type"] == "error" and f["code"] == "unauthorized", f
            await ws.send(json.dumps({"type": "auth", "key": "wrong"}))
            f = await recv_json(ws)
            assert f["type"] == "error" and f["code"] == "unauthorized", f
            await ws.send(json.dumps({"type": "auth", "key": "k1"}))
            f = await recv_json(ws)
            assert f == {"type": "authed"}, f
            await ws.send(generate("f", "Hi", 2))
            _, done = await read_until_end(ws, "f")
            assert done["type"] == "done"

    with running_server("--api-key", "k1") as s:
        run(body(s))


def test_the_idle_time_counts_from_the_end_of_the_last_stream():
    """A socket is idle only while none of its streams runs (docs/protocol.md): the close (1001)
    comes no sooner than the idle time after the last done frame. Sockets opened a third of a
    second apart run streams that end together, so that a clock that noticed a stream's end only
    at a once-a-second check, timed from each socket's opening, would show on one of them."""
    idle_s = 2

    async def one(url, opened_after, start):
        await asyncio.sleep(opened_after)
        async with connect(url, ping_interval=None) as ws:  # client pings would count as activity
            await start.wait()
            for k in range(2):
                await ws.send(generate(f"idle{opened_after:.2f}-{k}", "Write about the sea.", 64, ignore_eos=True))
            ended = 0
            while ended < 2:
                f = await recv_json(ws)
                assert f["type"] in ("token", "done"), f
                ended += f["type"] == "done"
            last_done = time.monotonic()
            with pytest.raises(websockets.ConnectionClosed) as e:
                await asyncio.wait_for(ws.recv(), idle_s + 10)
            assert e.value.rcvd.code == 1001 and "idle" in e.value.rcvd.reason, e.value
            return time.monotonic() - last_done

    async def body(s):
        start = asyncio.Event()
        sockets = [asyncio.create_task(one(s.ws_url, k / 3, start)) for k in range(3)]
        await asyncio.sleep(0.8)
        start.set()
        quiet = await asyncio.gather(*sockets)
        # The server's clock starts as it sends the last done frame, a little before it arrives
        # here; a once-a-second check would have closed one of them about half a second early.
        assert all(idle_s - 0.25 <= q <= idle_s + 1.5 for q in quiet), quiet

    with running_server("--no-cache", "--ws-idle", str(idle_s)) as s:
        run(body(s))
