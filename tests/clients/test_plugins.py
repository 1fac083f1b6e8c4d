"""Plugins against a real `troupe serve` (issue 7), each loaded through the config file's `plugins`:
the daily_quota admission actor refuses a tenant past its quota with 429 rate_limited, and
still does after a restart; output filters (the built-in redact, the pattern_stop filter actor plugin)
swapped in by POST /admin/reload change the streamed text of the next stream, or end it with
finish_reason "filtered"; the tenant_affinity routing policy plugin chosen by router.policy serves,
and POST /admin/reload switches the router off it and back; a plugin built for another ABI, a name
registered twice and an unknown name each stop startup with a message naming what is wrong."""
import asyncio
import json
import re
import subprocess
import urllib.error
import urllib.request

import pytest
import websockets

from harness import TROUPE_BIN, TROUPE_MODEL, read_until_end, running_server, token_text

TOKEN = "admin-secret"
EXAMPLES = TROUPE_BIN.parent / "examples"
TEST_PLUGINS = TROUPE_BIN.parent / "tests" / "plugins"


def plugin(name):
    p = EXAMPLES / f"libtroupe_{name}.so"
    if not p.is_file():
        pytest.skip(f"{p} is not built (ninja -C build example_plugins)")
    return str(p)


def broken_plugin(name):
    p = TEST_PLUGINS / f"libtest_plugin_{name}.so"
    if not p.is_file():
        pytest.skip(f"{p} is not built (ninja -C build actors_tests)")
    return str(p)


def post(url, body=None, token=None):
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, method="POST", data=data, headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=180) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def complete(server, max_tokens):
    return post(server.url + "/v1/completions", {"prompt": "The capital of France is", "max_tokens": max_tokens,
                                                 "temperature": 0, "ignore_eos": True})


def test_daily_quota_refuses_past_the_quota_and_after_a_restart(tmp_path):
    quota = 200
    cfg = tmp_path / "troupe.toml"
    cfg.write_text(f"""
plugins = ["{plugin('daily_quota')}"]

[admission]
policy = "daily_quota"

[admission.policy_options]
path = "{tmp_path / 'quota' / 'use.tsv'}"
daily_tokens = {quota}

[cache]
enabled = false
""")
    with running_server("--config", str(cfg)) as s:
        status, first = complete(s, 8)
        assert status == 200, first
        used = first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"]
        prompt = first["usage"]["prompt_tokens"]
        # One token more than what is left: refused, and the message says how much was used.
        status, refused = complete(s, quota - used - prompt + 1)
        assert status == 429, refused
        assert refused["error"]["code"] == "rate_limited", refused
        assert f"has used {used} of its {quota} tokens today" in refused["error"]["message"], refused
        assert "troupe: plugin" in "\n".join(s.log) and "daily_quota" in "\n".join(s.log), s.output()
    assert (tmp_path / "quota" / "use.tsv").is_file()

    # A restarted server reads the day's use back: the same request is still refused, and one
    # that fits exactly what is left passes.
    with running_server("--config", str(cfg)) as s:
        status, refused = complete(s, quota - used - prompt + 1)
        assert status == 429, refused
        assert f"has used {used} of its {quota} tokens today" in refused["error"]["message"], refused
        status, fits = complete(s, quota - used - prompt)
        assert status == 200, fits


def write_filter_config(path, filters=""):
    path.write_text(f"""
plugins = ["{plugin('pattern_stop')}"]

[auth]
admin_token = "{TOKEN}"

[cache]
enabled = false

[streamer]
{filters}
""")


async def generate(server, rid):
    async with websockets.connect(server.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "generate", "id": rid, "prompt": "Once upon a time, in a small village,",
                                  "max_tokens": 40, "ignore_eos": True, "temperature": 0}))
        tokens, final = await read_until_end(ws, rid)
        return token_text(tokens, final), final


# Whole words as the redact filter sees them: letters, digits, '_' and any non-ASCII character.
WORD = r"0-9A-Za-z_\u0080-\U0010FFFF"


def test_filters_swapped_by_reload_change_the_streamed_text(tmp_path):
    cfg = tmp_path / "troupe.toml"
    write_filter_config(cfg)
    with running_server("--config", str(cfg)) as s:
        plain, final = asyncio.run(generate(s, "a"))
        assert final["type"] == "done" and final["finish_reason"] == "length", final
        words = [w for w in re.findall(r"[A-Za-z]{3,}", plain)]
        assert words, plain
        word = max(words, key=len)

        write_filter_config(cfg, f"""
[[streamer.filters]]
name = "redact"
options = {{ words = ["{word}"], replacement = "[gone]" }}
""")
        status, answer = post(s.url + "/admin/reload", token=TOKEN)
        assert status == 200 and answer["ok"], answer
        assert "streamer" in answer["replaced"], answer
        redacted, final = asyncio.run(generate(s, "b"))
        want = re.sub(rf"(?<![{WORD}]){re.escape(word)}(?![{WORD}])", "[gone]", plain, flags=re.I)
        assert want != plain, (word, plain)
        assert redacted == want
        assert final["finish_reason"] == "length", final

        # The plugin's filter: the stream ends before the match, finish_reason "filtered".
        cut = plain.find(word)
        write_filter_config(cfg, f"""
[[streamer.filters]]
name = "pattern_stop"
options = {{ pattern = "{re.escape(word).replace(chr(92), chr(92) * 2)}", window = 32 }}
""")
        status, answer = post(s.url + "/admin/reload", token=TOKEN)
        assert status == 200 and answer["ok"], answer
        stopped, final = asyncio.run(generate(s, "c"))
        assert final["finish_reason"] == "filtered", final
        assert stopped == plain[:cut]
        assert final["usage"]["completion_tokens"] < 40, final
        assert "output filters swapped: redact -> pattern_stop" in "\n".join(s.log), s.output()

        # Options the filter refuses: the reload is rejected whole and the running filters stay.
        write_filter_config(cfg, """
[[streamer.filters]]
name = "pattern_stop"
options = { pattern = "(" }
""")
        status, answer = post(s.url + "/admin/reload", token=TOKEN)
        assert status == 400 and not answer["ok"], answer
        assert "streamer.filters[0].options" in answer["error"] and "regular expression" in answer["error"], answer
        again, final = asyncio.run(generate(s, "d"))
        assert final["finish_reason"] == "filtered" and again == stopped, final


def write_router_config(path, policy, options=""):
    path.write_text(f"""
plugins = ["{plugin('tenant_affinity')}"]

[auth]
admin_token = "{TOKEN}"

[router]
policy = "{policy}"

[router.policy_options]
{options}
""")


def test_a_routing_policy_plugin_serves_and_is_swapped_by_reload(tmp_path):
    cfg = tmp_path / "troupe.toml"
    write_router_config(cfg, "tenant_affinity", "max_queued_tokens = 4096")
    with running_server("--config", str(cfg)) as s:
        status, first = complete(s, 4)
        assert status == 200, first

        write_router_config(cfg, "least_loaded")
        status, answer = post(s.url + "/admin/reload", token=TOKEN)
        assert status == 200 and answer["ok"], answer
        assert "router" in answer["replaced"], answer
        assert "routing policy swapped: tenant_affinity -> least_loaded" in "\n".join(s.log), s.output()

        # Options the plugin's factory refuses: the reload is rejected whole, naming the key.
        write_router_config(cfg, "tenant_affinity", "max_queued_token = 10")
        status, answer = post(s.url + "/admin/reload", token=TOKEN)
        assert status == 400 and not answer["ok"], answer
        assert "router.policy_options.max_queued_token" in answer["error"], answer

        write_router_config(cfg, "tenant_affinity", "max_queued_tokens = 100")
        status, answer = post(s.url + "/admin/reload", token=TOKEN)
        assert status == 200 and answer["ok"], answer
        assert "routing policy swapped: least_loaded -> tenant_affinity" in "\n".join(s.log), s.output()
        status, again = complete(s, 4)
        assert status == 200, again
        assert again["choices"][0]["text"] == first["choices"][0]["text"], (first, again)


def serve_fails(tmp_path, body):
    """`troupe serve` on a config that must not start: its exit code and what it printed."""
    cfg = tmp_path / "troupe.toml"
    cfg.write_text(body)
    p = subprocess.run([str(TROUPE_BIN), "serve", "--listen", "127.0.0.1:0", "--model", str(TROUPE_MODEL),
                        "--config", str(cfg)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def test_a_plugin_built_for_another_abi_stops_startup(tmp_path):
    bad = broken_plugin("bad_abi")
    code, out = serve_fails(tmp_path, f'plugins = ["{bad}"]\n')
    assert code == 2, out
    assert re.search(rf"plugin {re.escape(bad)} was built for ABI \d+, this troupe has ABI \d+", out), out


def test_a_name_registered_twice_stops_startup_naming_both_plugins(tmp_path):
    first, second = plugin("fair_share"), broken_plugin("duplicate")
    code, out = serve_fails(tmp_path, f'plugins = ["{first}", "{second}"]\n')
    assert code == 2, out
    assert f"scheduling policy 'fair_share' of plugin {second} is already registered by plugin {first}" in out, out


def test_an_unknown_name_stops_startup_listing_the_known_ones(tmp_path):
    code, out = serve_fails(tmp_path, f"""
plugins = ["{plugin('fair_share')}"]
[scheduler]
policy = "fair_shares"
""")
    assert code == 2, out
    assert "unknown scheduling policy 'fair_shares'" in out, out
    assert re.search(r"known: [^)]*fair_share, fcfs", out), out
    assert "did you mean 'fair_share'" in out, out
