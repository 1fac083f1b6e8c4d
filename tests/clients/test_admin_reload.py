"""Hot reload against a real `troupe serve` (issue 7): the config file is edited while a stream
runs, then POST /admin/reload (admin token) or SIGHUP applies it. Checks the answer (what was
applied, which actors were replaced, what needs a restart), /admin/config, the config version in
/metrics, that an invalid file is rejected whole with file/line/key named and the running
config kept, and that the stream running across the swaps ends complete."""
import asyncio
import json
import re
import signal
import time
import urllib.error
import urllib.request

import pytest
import websockets

from harness import assert_consecutive, read_until_end, running_server

TOKEN = "admin-secret"


def write_config(path, policy, level="info", memory_mib=256, extra=""):
    path.write_text(f"""
[auth]
admin_token = "{TOKEN}"

[scheduler]
policy = "{policy}"
max_num_seqs = 16

[kv]
memory_mib = {memory_mib}

[cache]
enabled = false

[logging]
level = "{level}"
{extra}
""")


def call(url, method="GET", token=TOKEN):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def config_version(server):
    _, body = call(server.url + "/metrics", token=None)
    m = re.search(r"^troupe_config_version (\d+)$", body, re.M)
    assert m, "troupe_config_version missing from /metrics"
    return int(m.group(1))


def test_reload_swaps_policies_while_a_stream_runs(tmp_path):
    cfg = tmp_path / "troupe.toml"
    write_config(cfg, "fcfs")
    with running_server("--config", str(cfg)) as s:
        # Admin endpoints need the admin token.
        assert call(s.url + "/admin/reload", "POST", token=None)[0] == 401
        assert call(s.url + "/admin/reload", "POST", token="wrong")[0] == 401
        status, body = call(s.url + "/admin/config")
        assert status == 200, body
        doc = json.loads(body)
        assert doc["version"] == 1
        assert 'policy = "fcfs"' in doc["config"]
        assert TOKEN not in doc["config"], "the admin token must be redacted"
        assert config_version(s) == 1
        # A reload reads the server's own file: a query or a body is refused, not ignored.
        status, body = call(s.url + "/admin/reload?file=/etc/passwd", "POST")
        assert status == 400 and "query parameter 'file'" in body, body
        req = urllib.request.Request(s.url + "/admin/reload", method="POST", data=b'{"x":1}')
        req.add_header("Authorization", f"Bearer {TOKEN}")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=60)
        assert e.value.code == 400 and "takes no body" in e.value.read().decode()
        assert config_version(s) == 1
        # An empty file (a save caught half-way) is not a config to reload.
        saved = cfg.read_text()
        cfg.write_text("")
        status, body = call(s.url + "/admin/reload", "POST")
        assert status == 400 and "is empty" in body, body
        cfg.write_text(saved)
        assert config_version(s) == 1

        async def stream_across_reloads():
            async with websockets.connect(s.ws_url, max_size=None) as ws:
                await ws.send(json.dumps({"type": "generate", "id": "r1", "prompt": "Once upon a time",
                                          "max_tokens": 48, "ignore_eos": True}))
                first = json.loads(await asyncio.wait_for(ws.recv(), 180))
                assert first["type"] == "token", first

                def reload_to(policy, level):
                    write_config(cfg, policy, level)
                    return call(s.url + "/admin/reload", "POST")

                answers = []
                for policy, level in (("sjf", "debug"), ("priority", "info")):
                    answers.append(await asyncio.get_running_loop().run_in_executor(None, reload_to, policy, level))
                tokens, final = await read_until_end(ws, "r1", first=[first])
                return answers, tokens, final

        answers, tokens, final = asyncio.run(stream_across_reloads())
        for (status, body), policy in zip(answers, ("sjf", "priority")):
            assert status == 200, body
            doc = json.loads(body)
            assert doc["ok"], body
            assert "scheduler" in doc["replaced"], body
            assert any(c["key"] == "scheduler.policy" and c["new"] == f'"{policy}"' for c in doc["applied"]), body
        assert json.loads(answers[0][1])["version"] == 2
        assert any(c["key"] == "logging.level" for c in json.loads(answers[0][1])["applied"])
        # The stream that ran across both swaps: every token, in order, once.
        assert final["type"] == "done", final
        assert final["finish_reason"] == "length", final
        assert_consecutive(tokens)
        assert len(tokens) == 48
        assert config_version(s) == 3
        assert "scheduler swapped: sjf" in "\n".join(s.log), s.output()

        # An invalid file is rejected whole: the answer names the file, line and key.
        write_config(cfg, "sjf", extra="[scheduler.typo]\nx = 1\n")
        cfg.write_text(cfg.read_text().replace("max_num_seqs = 16", "max_num_seqs = 16\nmax_num_seq = 3"))
        status, body = call(s.url + "/admin/reload", "POST")
        assert status == 400, body
        doc = json.loads(body)
        assert not doc["ok"]
        assert str(cfg) in doc["error"] and "scheduler.max_num_seq" in doc["error"], doc["error"]
        assert re.search(r":\d+:\d+:", doc["error"]), doc["error"]
        assert config_version(s) == 3
        assert 'policy = "priority"' in json.loads(call(s.url + "/admin/config")[1])["config"]

        # An unknown policy name is refused and the known ones listed.
        write_config(cfg, "lottery")
        status, body = call(s.url + "/admin/reload", "POST")
        assert status == 400, body
        assert "lottery" in body and "fcfs" in body, body

        # A key that needs a restart is reported, never silently dropped.
        write_config(cfg, "priority", memory_mib=128)
        status, body = call(s.url + "/admin/reload", "POST")
        assert status == 200, body
        doc = json.loads(body)
        assert [c["key"] for c in doc["restart_needed"]] == ["kv.memory_mib"], body
        assert doc["applied"] == [] and doc["version"] == 3, body
        pending = json.loads(call(s.url + "/admin/config")[1])["pending_restart"]
        assert [c["key"] for c in pending] == ["kv.memory_mib"]

        # SIGHUP reloads too.
        write_config(cfg, "fcfs", memory_mib=128)
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 120
        while config_version(s) != 4:
            assert time.monotonic() < deadline, s.output()
            time.sleep(0.2)
        assert "scheduler swapped: priority" in "\n".join(s.log), s.output()


def test_admin_endpoints_are_off_without_a_token():
    with running_server() as s:
        status, body = call(s.url + "/admin/reload", "POST")
        assert status == 403, body
        assert "admin_token" in body
