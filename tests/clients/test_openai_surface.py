"""More of the API surface that OpenAI-client users and llama-server users expect, against a real
`troupe serve` (real model, an API key, the default semantic response cache):
- `cache: false` bypasses the response cache for any request, greedy too (HTTP and WebSocket);
- `POST /tokenize` and `POST /detokenize` in llama-server's shapes;
- `POST /v1/embeddings` through the official `openai` client (the cache's MiniLM embedder);
- the fields of docs/protocol.md's table: logprobs (chat and completions, streamed and not),
  n > 1, echo, logit_bias, stop arrays, include_usage, unknown fields and unknown paths."""
import asyncio
import base64
import json
import math
import secrets
import struct
import subprocess
import time
import urllib.error
import urllib.request

import openai
import pytest
from websockets.asyncio.client import connect

from harness import FRAME_TIMEOUT_S, MODEL_NAME, TROUPE_BIN, TROUPE_MODEL, read_until_end, running_server

KEY = "surface-key"
TIMEOUT_S = 180
DIM = 384  # all-MiniLM-L6-v2


@pytest.fixture(scope="module")
def server():
    with running_server("--api-key", KEY) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", timeout=TIMEOUT_S, max_retries=0)


def post(server, path, body, key=KEY, method="POST"):
    """(status, parsed JSON body) of a request with a JSON body."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def cache_counts(server):
    """The response cache's lookups and hits as /health shows them (gathered when asked)."""
    with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
        c = json.loads(r.read())["cache"]
    return c["lookups"], c["hits"]


# ---- cache: false --------------------------------------------------------------------------------

def test_cache_false_bypasses_the_cache_for_a_greedy_request_over_websocket(server):
    question = f"Repeat the code word {secrets.token_hex(4)} once."

    async def ask(rid, **extra):
        async with connect(server.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(json.dumps({"type": "generate", "id": rid, "temperature": 0, "max_tokens": 6,
                                      "messages": [{"role": "user", "content": question}], **extra}))
            _, done = await read_until_end(ws, rid)
            assert done["type"] == "done", done
            return done

    async def body():
        rid = secrets.token_hex(6)
        fresh = [await ask(f"{rid}-f{i}", cache=False) for i in range(2)]
        assert [d["cached"] for d in fresh] == [False, False]
        # Nor were those answers stored: the first request with the default rule is generated.
        default = [await ask(f"{rid}-d{i}") for i in range(2)]
        assert [d["cached"] for d in default] == [False, True]
        again = await ask(f"{rid}-f2", cache=False)  # a stored answer is not served either
        assert again["cached"] is False

    asyncio.run(asyncio.wait_for(body(), 3 * FRAME_TIMEOUT_S))


def test_cache_false_bypasses_the_cache_over_http(server, client):
    messages = [{"role": "user", "content": f"Spell the word {secrets.token_hex(3)} backwards."}]
    lookups0, hits0 = cache_counts(server)
    kw = dict(model=MODEL_NAME, messages=messages, max_tokens=6, temperature=0)
    first = client.chat.completions.create(**kw)
    second = client.chat.completions.create(**kw)  # the default: greedy answers are cached
    fresh = client.chat.completions.create(**kw, extra_body={"cache": False})
    assert first.choices[0].message.content == second.choices[0].message.content == fresh.choices[0].message.content
    lookups, hits = cache_counts(server)
    assert (lookups - lookups0, hits - hits0) == (2, 1), "cache: false must neither look up nor hit"


def test_a_bad_speculative_method_is_refused_on_a_cache_hit_as_on_a_miss(server):
    """adv6 F7: validity must not depend on the cache; admission checks the method before it."""
    body = {"model": MODEL_NAME, "prompt": f"Name a color, {secrets.token_hex(3)}.", "max_tokens": 4, "temperature": 0}
    assert post(server, "/v1/completions", body)[0] == 200  # stored
    miss = post(server, "/v1/completions", {**body, "speculative": "bogus", "cache": False})
    hit = post(server, "/v1/completions", {**body, "speculative": "bogus"})
    assert miss[0] == hit[0] == 400, (miss, hit)
    assert miss[1]["error"]["param"] == hit[1]["error"]["param"] == "speculative"
    assert miss[1]["error"]["message"] == hit[1]["error"]["message"]
    assert "unknown speculative method 'bogus'" in hit[1]["error"]["message"]

    async def ws_ask(rid, **extra):
        async with connect(server.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(json.dumps({"type": "generate", "id": rid, "temperature": 0, "max_tokens": 4,
                                      "prompt": body["prompt"], **extra}))
            return (await read_until_end(ws, rid))[1]

    async def ws_body():
        rid = secrets.token_hex(6)
        assert (await ws_ask(rid + "-ok"))["cached"] is True
        for i, extra in enumerate([{"cache": False}, {}]):
            f = await ws_ask(f"{rid}-{i}", speculative="bogus", **extra)
            assert (f["type"], f["code"], f["param"]) == ("error", "invalid_request", "speculative"), f

    asyncio.run(asyncio.wait_for(ws_body(), 3 * FRAME_TIMEOUT_S))


def test_a_negated_question_is_not_answered_from_the_cache(server):
    """adv6 F1: the semantic cache served "... not red" the answer stored for "... red"."""
    async def ask(rid, question):
        async with connect(server.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(json.dumps({"type": "generate", "id": rid, "temperature": 0, "max_tokens": 6,
                                      "messages": [{"role": "user", "content": question}]}))
            _, done = await read_until_end(ws, rid)
            assert done["type"] == "done", done
            return done["cached"]

    async def body():
        rid = secrets.token_hex(6)
        a, b = "Name a fruit that is red", "Name a fruit that is not red"  # the server's cache starts empty
        assert [await ask(rid + "-a0", a), await ask(rid + "-a1", a)] == [False, True]
        assert await ask(rid + "-b", b) is False
        assert await ask(rid + "-b1", b) is True  # stored under its own question

    asyncio.run(asyncio.wait_for(body(), 4 * FRAME_TIMEOUT_S))


def test_cache_must_be_a_boolean(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       extra_body={"cache": "no"})
    assert e.value.body["param"] == "cache"


# ---- /tokenize and /detokenize ---------------------------------------------------------------------

UNICODE_TEXT = "Grüße aus Zürich, 東京 и Москва! 🎉🧪 naïve café — done.\n\tTabs too."


def troupe_tokenize(text):
    out = subprocess.run([str(TROUPE_BIN), "tokenize", "-m", str(TROUPE_MODEL), text], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    return [int(x) for x in out.split()]


def test_tokenize_round_trips_unicode_text_and_agrees_with_troupe_tokenize(server):
    status, tok = post(server, "/tokenize", {"content": UNICODE_TEXT})
    assert status == 200, tok
    assert tok["tokens"] == troupe_tokenize(UNICODE_TEXT)
    status, detok = post(server, "/detokenize", {"tokens": tok["tokens"]})
    assert status == 200, detok
    assert detok == {"content": UNICODE_TEXT}


def test_tokenize_with_pieces_spells_the_text(server):
    status, plain = post(server, "/tokenize", {"content": UNICODE_TEXT})
    status, tok = post(server, "/tokenize", {"content": UNICODE_TEXT, "with_pieces": True, "add_special": False})
    assert status == 200, tok
    assert [t["id"] for t in tok["tokens"]] == plain["tokens"]
    # A piece is a string, or (part of a UTF-8 sequence) the list of its byte values.
    joined = b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in (t["piece"] for t in tok["tokens"]))
    assert joined.decode() == UNICODE_TEXT
    assert any(isinstance(t["piece"], list) for t in tok["tokens"]), "the emoji should split into byte pieces"


def test_tokenize_parses_special_tokens_unless_told_not_to(server):
    text = "<|im_start|>user"
    _, special = post(server, "/tokenize", {"content": text})
    _, plain = post(server, "/tokenize", {"content": text, "parse_special": False})
    assert len(special["tokens"]) < len(plain["tokens"])
    assert plain["tokens"] == troupe_tokenize(text)
    _, empty = post(server, "/tokenize", {"content": ""})
    assert empty == {"tokens": []}


@pytest.mark.parametrize("path, body, param", [
    ("/tokenize", {}, "content"),
    ("/tokenize", {"content": 5}, "content"),
    ("/tokenize", {"content": "x", "add_special": "yes"}, "add_special"),
    ("/tokenize", {"content": "x", "with_pieces": 1}, "with_pieces"),
    ("/detokenize", {}, "tokens"),
    ("/detokenize", {"tokens": "1 2"}, "tokens"),
    ("/detokenize", {"tokens": [1, "2"]}, "tokens[1]"),
    ("/detokenize", {"tokens": [1, 2.5]}, "tokens[1]"),
    ("/detokenize", {"tokens": [1, -1]}, "tokens[1]"),
    ("/detokenize", {"tokens": [1, 2, 10_000_000]}, "tokens[2]"),
])
def test_bad_tokenize_input_is_400_naming_the_field(server, path, body, param):
    status, r = post(server, path, body)
    assert status == 400, r
    assert r["error"]["param"] == param, r
    assert param.split("[")[0] in r["error"]["message"]


def test_tokenize_needs_the_api_key_and_post(server):
    status, r = post(server, "/tokenize", {"content": "x"}, key=None)
    assert status == 401 and r["error"]["code"] == "invalid_api_key"
    status, r = post(server, "/detokenize", {"tokens": [1]}, key="wrong")
    assert status == 401
    req = urllib.request.Request(server.url + "/tokenize", headers={"Authorization": f"Bearer {KEY}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 405


# ---- /v1/embeddings --------------------------------------------------------------------------------

def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def test_embedding_of_a_string(client):
    r = client.embeddings.create(model=MODEL_NAME, input="The cat sat on the mat.")
    assert r.object == "list"
    assert r.model == MODEL_NAME
    assert len(r.data) == 1 and r.data[0].index == 0 and r.data[0].object == "embedding"
    v = r.data[0].embedding
    assert len(v) == DIM
    assert math.isclose(math.sqrt(dot(v, v)), 1.0, abs_tol=1e-4)
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens


def test_embeddings_of_a_list_put_a_paraphrase_closer_than_an_unrelated_sentence(client):
    texts = ["How do I reset my password?", "What are the steps to change my password?",
             "The volcano erupted last night near the coast."]
    r = client.embeddings.create(model="minilm", input=texts)
    assert r.model == "minilm"
    assert [d.index for d in r.data] == [0, 1, 2]
    a, b, c = (d.embedding for d in r.data)
    for v in (a, b, c):
        assert math.isclose(math.sqrt(dot(v, v)), 1.0, abs_tol=1e-4)
    assert dot(a, b) > dot(a, c) + 0.2, (dot(a, b), dot(a, c))
    # One at a time gives the same vectors as the list.
    single = client.embeddings.create(model="minilm", input=texts[2]).data[0].embedding
    assert max(abs(x - y) for x, y in zip(single, c)) < 1e-6


def test_float_and_base64_encodings_agree(client, server):
    text = "Vectors travel as floats or as base64."
    floats = client.embeddings.create(model="all-MiniLM-L6-v2", input=text, encoding_format="float").data[0].embedding
    status, r = post(server, "/v1/embeddings", {"input": text, "encoding_format": "base64"})
    assert status == 200, r
    raw = base64.b64decode(r["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert len(decoded) == DIM
    assert max(abs(x - y) for x, y in zip(decoded, floats)) < 1e-6
    assert r["model"] == "minilm"  # no model asked: the embedder's name


def test_dimensions_must_be_the_embedders(client):
    ok = client.embeddings.create(model=MODEL_NAME, input="x", dimensions=DIM)
    assert len(ok.data[0].embedding) == DIM
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=MODEL_NAME, input="x", dimensions=64)
    assert e.value.body["param"] == "dimensions" and str(DIM) in e.value.message


@pytest.mark.parametrize("kwargs, param", [
    (dict(input=[[1, 2, 3]]), "input"),
    (dict(input=[1, 2, 3]), "input"),
    (dict(input=""), "input"),
    (dict(input=[]), "input"),
    (dict(input=["ok", 7]), "input"),
    (dict(input=["ok", ""]), "input[1]"),
    (dict(input="x", encoding_format="int8"), "encoding_format"),
])
def test_bad_embedding_requests_are_400_naming_the_field(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=MODEL_NAME, **kwargs)
    assert e.value.body["param"] == param, e.value.body


def test_an_embedding_input_over_the_embedder_s_window_is_refused_not_cut(client):
    long_text = "The tide came in over the flat grey sand while the gulls argued about the fish. " * 30
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=MODEL_NAME, input=["short", long_text])
    assert e.value.body["param"] == "input[1]", e.value.body
    assert e.value.body["code"] == "context_length_exceeded", e.value.body
    assert "over the 256 tokens" in e.value.message, e.value.message
    # At the window itself it is embedded.
    assert len(client.embeddings.create(model=MODEL_NAME, input=long_text[:600]).data[0].embedding) == 384


def test_an_unknown_embedding_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.embeddings.create(model="text-embedding-3-small", input="x")
    assert e.value.body["param"] == "model"
    assert "minilm" in e.value.message


def test_embeddings_need_the_api_key(server):
    status, r = post(server, "/v1/embeddings", {"input": "x"}, key=None)
    assert status == 401


# ---- the fields of the OpenAI table (docs/protocol.md) ----------------------------------------------

ASK = [{"role": "user", "content": "Name three colours."}]


def chat(client, **kw):
    kw.setdefault("max_tokens", 8)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=MODEL_NAME, messages=kw.pop("messages", ASK), **kw)


def test_unknown_field_is_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, extra_body={"frobnicate": 1})
    assert e.value.body["param"] == "frobnicate"
    assert "unknown field 'frobnicate'" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, reasoning_effort="low")
    assert e.value.body["param"] == "reasoning_effort"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, max_tokens=0)
    assert e.value.body["param"] == "max_tokens"
    # Ignored on purpose: changes nothing the server does.
    assert chat(client, user="someone", max_tokens=2).choices[0].message.content is not None


def test_duplicate_keys_are_400(server):
    body = b'{"model":"%s","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"max_tokens":900}' % \
        MODEL_NAME.encode()
    status, r = post(server, "/v1/chat/completions", body)
    assert status == 400, r
    assert r["error"]["param"] == "max_tokens" and "duplicate key" in r["error"]["message"], r


def test_unknown_path_is_404_listing_the_endpoints(server):
    status, r = post(server, "/v1/assistants", {"model": MODEL_NAME})
    assert status == 404, r
    message = r["error"]["message"]
    assert "/v1/assistants" in message and "POST /v1/chat/completions" in message, r
    assert "POST /v1/responses" in message, r


def check_chat_logprobs(content, entries, top):
    """Each entry's bytes are its token's exact bytes; together they spell the content."""
    assert entries, "no logprobs"
    joined = b"".join(bytes(e.bytes) for e in entries)
    assert joined.decode() == content
    for e in entries:
        assert e.logprob <= 0
        if "\ufffd" not in e.token:
            assert bytes(e.bytes) == e.token.encode()
        assert len(e.top_logprobs) == top
        if top:
            # Greedy: the chosen token is the most likely one.
            assert e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-5)
            assert bytes(e.top_logprobs[0].bytes) == bytes(e.bytes)
            assert all(a.logprob >= b.logprob for a, b in zip(e.top_logprobs, e.top_logprobs[1:]))


def test_chat_logprobs(client):
    r = chat(client, logprobs=True, top_logprobs=3, extra_body={"cache": False})
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens
    check_chat_logprobs(r.choices[0].message.content, entries, 3)
    # Not asked: null.
    assert chat(client, max_tokens=2).choices[0].logprobs is None


def test_chat_logprobs_streamed_match_the_plain_answer(client):
    plain = chat(client, logprobs=True, top_logprobs=2, extra_body={"cache": False})
    chunks = list(chat(client, logprobs=True, top_logprobs=2, stream=True, stream_options={"include_usage": True},
                       extra_body={"cache": False}))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    check_chat_logprobs(text, entries, 2)
    assert [e.token for e in entries] == [e.token for e in plain.choices[0].logprobs.content]
    for a, b in zip(entries, plain.choices[0].logprobs.content):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
    assert chunks[-1].usage.completion_tokens == len(entries)


def check_completion_logprobs(text, lp, top, offset=0):
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) > 0
    assert "".join(lp.tokens) == text
    assert lp.text_offset[0] == offset
    assert all(b - a == len(t.encode()) for a, b, t in zip(lp.text_offset, lp.text_offset[1:], lp.tokens))
    for tok, v, alts in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert v <= 0 and len(alts) == top
        assert max(alts.values()) == pytest.approx(v, abs=1e-5)  # greedy: the best one


def test_completion_top_logprobs_hold_the_sampled_token(client):
    # OpenAI's legacy API: "the API will always return the logprob of the sampled token, so there
    # may be up to logprobs+1 elements".
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=12, temperature=1.5, seed=7,
                                  logprobs=1, extra_body={"cache": False})
    lp = r.choices[0].logprobs
    for v, alts in zip(lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(alts) <= 2
        assert any(a == pytest.approx(v, abs=1e-5) for a in alts.values()), (v, alts)


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=6, temperature=0,
                                  logprobs=2, extra_body={"cache": False})
    check_completion_logprobs(r.choices[0].text, r.choices[0].logprobs, 2)
    chunks = list(client.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=6,
                                            temperature=0, logprobs=2, stream=True, extra_body={"cache": False}))
    toks = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    assert toks == r.choices[0].logprobs.tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=2, logprobs=6)
    assert e.value.body["param"] == "logprobs"


def test_logprobs_cover_exactly_the_text_a_stop_string_left(client):
    """The tokens of a stop string (held back by the streamer, then cut) are not in the logprobs:
    they used to be, so the tokens ran past the text and text_offset past its end."""
    # The output held to a choice (it does not depend on what the model would write).
    kw = dict(model=MODEL_NAME, prompt="1, 2, 3, 4, 5, 6,", max_tokens=20, temperature=0, logprobs=1, stop=[" 9"],
              extra_body={"cache": False, "guided_choice": [" 7, 8, 9, 10, 11"]})
    r = client.completions.create(**kw)
    ch = r.choices[0]
    assert ch.finish_reason == "stop" and ch.text == " 7, 8,", ch
    assert "".join(ch.logprobs.tokens) == ch.text
    assert all(o < len(ch.text) for o in ch.logprobs.text_offset)
    chunks = list(client.completions.create(stream=True, **kw))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    assert streamed == ch.logprobs.tokens
    msg = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Count: 1, 2, 3, 4, 5, 6,"}],
                                         max_tokens=20, temperature=0, logprobs=True, stop=[" 9"],
                                         extra_body={"cache": False, "guided_choice": [" 7, 8, 9, 10, 11"]}).choices[0]
    assert msg.message.content == " 7, 8," and "".join(t.token for t in msg.logprobs.content) == msg.message.content


def test_completion_text_offset_counts_characters(client):
    """text_offset indexes the text as a string (characters), as OpenAI's and vLLM's do: after a
    character of several UTF-8 bytes it used to run ahead. The output is held to a choice of
    non-ASCII text, so that it does not depend on what the model would write."""
    r = client.completions.create(model=MODEL_NAME, prompt="Say it:", max_tokens=80, temperature=0, logprobs=1,
                                  extra_body={"cache": False, "guided_choice": ["猫と犬が大好き, très café ☕"]})
    ch = r.choices[0]
    assert ch.text == "猫と犬が大好き, très café ☕", ch.text
    checked = 0
    for offset, tok in zip(ch.logprobs.text_offset, ch.logprobs.tokens):
        if "\ufffd" in tok:  # part of a character: no whole text to find
            continue
        assert ch.text[offset:].startswith(tok), (offset, tok, ch.text)
        checked += 1
    assert checked >= 4, ch.logprobs


def test_a_deadline_that_passes_before_the_first_token_is_504(client):
    """Passed during the prompt's prefill (1,500 words in 5 ms), not only in the queue: it used to
    be a 200 with empty content and finish_reason "deadline"."""
    prompt = " ".join(["word"] * 1500)
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as e:
            r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": prompt}],
                                               max_tokens=8, stream=stream, extra_body={"cache": False, "deadline_ms": 5})
            if stream:
                list(r)
        assert e.value.status_code == 504, e.value
        assert e.value.body["code"] == "deadline"
        # OpenAI's SDKs retry a 5xx unless told not to: a retry would wait past the client's own deadline.
        assert e.value.response.headers.get("x-should-retry") == "false", e.value.response.headers


def test_participant_names_reach_the_prompt(client):
    """A message's `name` on any role (LangChain's HumanMessage(name=...), LangGraph's named agents)
    was a 400; ChatML now writes it in the turn's header, so the prompt grows by it."""
    def prompt_tokens(**names):
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
        for i, key in ((1, "user"), (2, "assistant")):
            if key in names:
                messages[i]["name"] = names[key]
        r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=1,
                                           extra_body={"cache": False})
        return r.usage.prompt_tokens
    plain = prompt_tokens()
    assert prompt_tokens(user="alice") > plain
    assert prompt_tokens(user="alice", assistant="researcher") > prompt_tokens(user="alice")
    with pytest.raises(openai.BadRequestError) as e:
        prompt_tokens(user="alice smith")
    assert e.value.body["param"] == "messages[1].name", e.value.body


def test_ids_are_not_reused_across_restarts_and_models_created_is_stable(client):
    """Ids were "chatcmpl-1", "chatcmpl-2", ... again after every restart (a client keying on
    them collides); /v1/models' `created` was the time of each call."""
    a = chat(client, max_tokens=1).id
    b = chat(client, max_tokens=1).id
    assert a != b and a.startswith("chatcmpl-") and len(a) > len("chatcmpl-") + 12, (a, b)
    assert a.rsplit("-", 1)[0] == b.rsplit("-", 1)[0]  # this process's random part, then a count
    first = client.models.list().data[0].created
    time.sleep(1.1)
    assert client.models.list().data[0].created == first
    assert client.models.retrieve(MODEL_NAME).created == first


def test_n_two_greedy_gives_two_equal_choices_and_sums_usage(client):
    one = chat(client, extra_body={"cache": False})
    r = chat(client, n=2, extra_body={"cache": False})
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].message.content == r.choices[1].message.content == one.choices[0].message.content
    assert r.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counted once
    assert r.usage.completion_tokens == 2 * one.usage.completion_tokens


def test_n_two_sampled_streamed_carries_each_index(client):
    chunks = list(chat(client, n=2, temperature=1.0, seed=7, max_tokens=12, stream=True,
                       stream_options={"include_usage": True}, extra_body={"cache": False}))
    texts, finished = {0: "", 1: ""}, set()
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finished.add(ch.index)
    assert finished == {0, 1}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    # Choice i is sampled with seed + i: choice 1 is what a single request with seed 8 gives.
    alone = chat(client, temperature=1.0, seed=8, max_tokens=12, extra_body={"cache": False})
    assert texts[1] == alone.choices[0].message.content
    alone0 = chat(client, temperature=1.0, seed=7, max_tokens=12, extra_body={"cache": False})
    assert texts[0] == alone0.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == alone.usage.completion_tokens + alone0.usage.completion_tokens


def test_include_usage_only_when_asked(client):
    plain = list(chat(client, stream=True, max_tokens=3))
    assert all(c.usage is None for c in plain)
    with_usage = list(chat(client, stream=True, max_tokens=3, stream_options={"include_usage": True}))
    assert with_usage[-1].choices == [] and with_usage[-1].usage.completion_tokens == 3
    assert all(c.usage is None for c in with_usage[:-1])


def test_a_batch_of_prompts_answers_each_with_its_n_choices(client):
    """OpenAI's legacy completions take several prompts in one request (LangChain's OpenAI LLM
    sends its batches so): prompt p's choices are p * n .. p * n + n - 1, each greedy one what the
    prompt alone gets; usage counts each prompt once."""
    prompts = ["The capital of France is", "Two plus two is", "The sky is"]
    alone = [client.completions.create(model=MODEL_NAME, prompt=p, max_tokens=6, temperature=0,
                                       extra_body={"cache": False}) for p in prompts]
    r = client.completions.create(model=MODEL_NAME, prompt=prompts, max_tokens=6, temperature=0, n=2, echo=True,
                                  extra_body={"cache": False})
    assert [c.index for c in r.choices] == list(range(6))
    for c in r.choices:
        p = c.index // 2
        assert c.text == prompts[p] + alone[p].choices[0].text, (c.index, c.text)
    assert r.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert r.usage.completion_tokens == sum(2 * a.usage.completion_tokens for a in alone)
    streamed = {}
    for chunk in client.completions.create(model=MODEL_NAME, prompt=prompts, max_tokens=6, temperature=0,
                                           stream=True, extra_body={"cache": False}):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert streamed == {p: alone[p].choices[0].text for p in range(3)}
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt=["a", ""], max_tokens=2)
    assert e.value.body["param"] == "prompt[1]"


def test_echo(client):
    prompt = "Once upon a time"
    r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=4, temperature=0, echo=True,
                                  extra_body={"cache": False})
    plain = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=4, temperature=0,
                                      extra_body={"cache": False})
    assert r.choices[0].text == prompt + plain.choices[0].text
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=4, temperature=0, echo=True,
                                            stream=True, extra_body={"cache": False}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=2, echo=True, logprobs=1)
    assert e.value.body["param"] == "echo"


def test_a_token_id_prompt_answers_as_its_text_does(client, server):
    prompt = "Once upon a time"
    _, tok = post(server, "/tokenize", {"content": prompt, "add_special": False})
    ids = tok["tokens"]
    by_text = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=6, temperature=0,
                                        extra_body={"cache": False})
    for form in (ids, [ids]):
        by_ids = client.completions.create(model=MODEL_NAME, prompt=form, max_tokens=6, temperature=0,
                                           extra_body={"cache": False})
        assert by_ids.choices[0].text == by_text.choices[0].text
        assert by_ids.usage.prompt_tokens == len(ids)
    echoed = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=6, temperature=0, echo=True,
                                       extra_body={"cache": False})
    assert echoed.choices[0].text == prompt + by_text.choices[0].text
    batch = client.completions.create(model=MODEL_NAME, prompt=[ids, ids], max_tokens=6, temperature=0,
                                      extra_body={"cache": False})  # a batch of two token-id prompts
    assert [c.text for c in batch.choices] == [by_text.choices[0].text] * 2
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt=[ids, [10**8]], max_tokens=2)
    assert "outside the vocabulary" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt=[10**8], max_tokens=2)
    assert "outside the vocabulary" in e.value.message


def test_logit_bias_bans_and_forces_tokens(client, server):
    first = chat(client, logprobs=True, extra_body={"cache": False})
    chosen = first.choices[0].logprobs.content[0]
    _, tok = post(server, "/tokenize", {"content": bytes(chosen.bytes).decode(errors="ignore"), "add_special": False})
    assert len(tok["tokens"]) == 1, tok
    banned = tok["tokens"][0]
    r = chat(client, logprobs=True, logit_bias={str(banned): -100}, extra_body={"cache": False})
    assert bytes(r.choices[0].logprobs.content[0].bytes) != bytes(chosen.bytes)
    _, banana = post(server, "/tokenize", {"content": " banana", "add_special": False})
    assert len(banana["tokens"]) == 1, banana
    forced = chat(client, max_tokens=3, logit_bias={str(banana["tokens"][0]): 100}, extra_body={"cache": False})
    assert forced.choices[0].message.content.split() == ["banana"] * 3, forced.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, logit_bias={"49152": 1})
    assert e.value.body["param"] == "logit_bias.49152"


def test_stop_array(client):
    free = chat(client, max_tokens=16, extra_body={"cache": False}).choices[0].message.content
    word = free.split()[1] if len(free.split()) > 1 else free[:3]
    r = chat(client, max_tokens=16, stop=["zzzq", word, "qqqz", "\n\n\n"], extra_body={"cache": False})
    assert r.choices[0].finish_reason == "stop"
    assert word not in r.choices[0].message.content
    assert free.startswith(r.choices[0].message.content)
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, stop=["a", "b", "c", "d", "e"])
    assert e.value.body["param"] == "stop"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, stop="\u0000")
    assert e.value.body["param"] == "stop"


def metric(server, name):
    # /metrics gathers its figures after it is asked: no waiting for a poller's round.
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def test_n_choices_share_the_prompt_through_the_prefix_cache(client, server):
    # Choice 0 computes the prompt; the others start once its first token is out and find the
    # prompt's KV blocks (whole 16-token blocks) in the prefix cache.
    long_prompt = "Tell me a story about " + " and ".join(f"a cat named {secrets.token_hex(3)}" for _ in range(30))
    before = metric(server, "troupe_prefix_cache_hit_tokens_scheduler_total")
    r = chat(client, n=3, temperature=1.0, max_tokens=4, messages=[{"role": "user", "content": long_prompt}],
             extra_body={"cache": False})
    assert len(r.choices) == 3
    hits = metric(server, "troupe_prefix_cache_hit_tokens_scheduler_total") - before
    assert hits >= 2 * (r.usage.prompt_tokens - 16), (hits, r.usage)


def test_a_client_hanging_up_cancels_every_choice(client, server):
    stream = chat(client, n=3, temperature=1.0, max_tokens=2000, stream=True, extra_body={"cache": False,
                                                                                          "ignore_eos": True})
    seen = set()
    for c in stream:
        seen.update(ch.index for ch in c.choices if ch.delta.content)
        if len(seen) == 3:
            break
    stream.close()
    deadline = time.monotonic() + 5  # the hang-up reaches the scheduler as a cancel
    while metric(server, "troupe_running_sequences") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(server, "troupe_running_sequences") == 0


def test_metrics_right_after_an_answer_show_its_sequence_and_kv_blocks_gone(client, server):
    # The answer is out only once the scheduler has let the sequence go: /metrics read at once
    # must say so (it once served a poller's figures up to 2 s old: 1 in ~20 reads showed a
    # sequence and its KV blocks still held).
    for i in range(12):
        chat(client, max_tokens=6, temperature=1.0, seed=i, messages=[{"role": "user", "content": f"Count to {i}"}],
             extra_body={"cache": False})
        assert metric(server, "troupe_running_sequences") == 0, i
        assert metric(server, "troupe_kv_blocks_used") == 0, i
        # The router's view of the replica too (/health's and troupe_replica_*): it showed the
        # replica's last load report, up to cluster.report_ms old, beside the pipeline's zeros.
        assert metric(server, 'troupe_replica_running_sequences{replica="0",name="local"}') == 0, i
        with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
            replica = json.loads(r.read())["router"]["replicas"][0]
        assert (replica["running"], replica["waiting"]) == (0, 0), (i, replica)


# ---- speculative decoding ------------------------------------------------------------------------

COPY = [{"role": "user", "content": "Copy this exactly: The river runs past the old mill, where the water turns "
                                    "the wheel day and night. The river runs past the old mill, where the water "
                                    "turns the wheel day and night."}]


def test_speculative_per_request_keeps_greedy_output_and_reports_usage_and_metrics(client, server):
    proposed0 = metric(server, "troupe_spec_proposed_total")
    accepted0 = metric(server, "troupe_spec_accepted_total")
    plain = chat(client, messages=COPY, max_tokens=48, extra_body={"cache": False, "speculative": False})
    assert "speculative" not in (plain.usage.model_extra or {})
    total_proposed = total_accepted = 0
    for method in ("ngram", "suffix"):
        r = chat(client, messages=COPY, max_tokens=48, extra_body={"cache": False, "speculative": method})
        assert r.choices[0].message.content == plain.choices[0].message.content, method  # greedy: identical
        spec = r.usage.model_extra["speculative"]
        assert 0 < spec["accepted"] <= spec["proposed"], (method, spec)
        total_proposed += spec["proposed"]
        total_accepted += spec["accepted"]
    assert metric(server, "troupe_spec_proposed_total") - proposed0 == total_proposed
    assert metric(server, "troupe_spec_accepted_total") - accepted0 == total_accepted

    async def ws_done():
        async with connect(server.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(json.dumps({"type": "generate", "id": "spec", "temperature": 0, "max_tokens": 48,
                                      "messages": COPY, "cache": False, "speculative": "ngram"}))
            _, done = await read_until_end(ws, "spec")
            return done

    done = asyncio.run(asyncio.wait_for(ws_done(), FRAME_TIMEOUT_S))
    assert done["type"] == "done", done
    assert done["usage"]["speculative"]["accepted"] > 0, done


def test_speculative_with_logprobs_gives_each_tokens_own(client):
    def run(method):
        return chat(client, messages=COPY, max_tokens=48, logprobs=True, top_logprobs=3,
                    extra_body={"cache": False, "speculative": method})

    plain, spec = run(False), run("ngram")
    assert spec.choices[0].message.content == plain.choices[0].message.content
    assert spec.usage.model_extra["speculative"]["accepted"] > 0, "the logprobs request speculated"
    a, b = plain.choices[0].logprobs.content, spec.choices[0].logprobs.content
    assert len(a) == len(b) == plain.usage.completion_tokens
    for x, y in zip(a, b):
        assert (x.token, x.logprob) == (y.token, y.logprob)
        assert [(t.token, t.logprob) for t in x.top_logprobs] == [(t.token, t.logprob) for t in y.top_logprobs]
        assert len(y.top_logprobs) == 3


def test_speculative_must_be_a_known_method_or_false(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, extra_body={"speculative": True})
    assert e.value.body["param"] == "speculative"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, extra_body={"speculative": "eagle", "cache": False})
    assert "eagle" in e.value.body["message"] and "ngram" in e.value.body["message"], e.value.body


def test_websocket_token_frames_carry_logprobs_like_http(server, client):
    """The same greedy request over HTTP and the WebSocket: the same tokens and logprobs."""
    messages = [{"role": "user", "content": "Name a colour."}]
    http = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=6, temperature=0,
                                          logprobs=True, top_logprobs=2)
    want = [(c.token, c.logprob) for c in http.choices[0].logprobs.content]

    async def run():
        async with connect(server.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(json.dumps({"type": "generate", "id": "lp", "messages": messages, "max_tokens": 6,
                                      "temperature": 0, "logprobs": True, "top_logprobs": 2}))
            return await read_until_end(ws, "lp")
    toks, done = asyncio.run(run())
    assert done["type"] == "done", done
    got = [(t["token"], t["logprob"]) for t in toks]
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, a), (_, b) in zip(got, want):
        assert math.isclose(a, b, abs_tol=1e-4)
    for t in toks:
        assert len(t["top_logprobs"]) == 2
        assert t["logprob"] >= max(x["logprob"] for x in t["top_logprobs"]) - 1e-6, "greedy: the best token"


def test_models_retrieve_describes_the_served_model_and_404s_another(client, server):
    m = client.models.retrieve(MODEL_NAME)
    assert m.id == MODEL_NAME and m.object == "model" and m.owned_by == "troupe"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4o")
    assert e.value.code == "unknown_model" and e.value.param == "model", e.value.body
    status, body = post(server, "/v1/models/" + MODEL_NAME.replace(".", "%2E"), None, method="GET")
    assert status == 200 and body["id"] == MODEL_NAME, body
    status, _ = post(server, "/v1/models/" + MODEL_NAME, None, key=None, method="GET")
    assert status == 401


def test_a_wrong_method_is_405_with_allow(server):
    req = urllib.request.Request(server.url + "/v1/chat/completions", method="GET",
                                 headers={"Authorization": f"Bearer {KEY}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=TIMEOUT_S)
    assert e.value.code == 405 and e.value.headers["Allow"] == "POST"
    assert json.loads(e.value.read())["error"]["code"] == "method_not_allowed"
    status, _ = post(server, "/v1/models", {})
    assert status == 405


def test_an_answer_sent_back_as_history_is_accepted(client):
    """The agent habit `messages.append(answer.model_dump())` sends the answer's null fields
    (refusal, annotations, audio, function_call, tool_calls) back."""
    messages = [{"role": "user", "content": "Say hi."}]
    first = chat(client, messages=messages)
    messages += [first.choices[0].message.model_dump(), {"role": "user", "content": "Again."}]
    assert "refusal" in messages[1]
    again = chat(client, messages=messages)
    assert again.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages=[{"role": "user", "content": "x"},
                               {"role": "assistant", "content": "a", "refusal": "I can't"}])
    assert e.value.param == "messages[1].refusal"


def test_an_image_part_is_refused_by_name(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}])
    assert e.value.param == "messages[0].content[1].type" and "image_url" in e.value.message, e.value.body


def test_an_empty_prompt_is_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="", max_tokens=4)
    assert e.value.param == "prompt", e.value.body


def test_sampled_requests_without_a_seed_differ_and_with_one_repeat(client):
    """As at OpenAI: a sampled request with no seed draws one (asking again gives another answer);
    the same seed gives the same answer."""
    def sample(**kw):
        return chat(client, messages=[{"role": "user", "content": "Invent a name for a cat."}], max_tokens=16,
                    temperature=1.5, **kw).choices[0].message.content
    unseeded = {sample() for _ in range(3)}
    assert len(unseeded) > 1, unseeded
    assert sample(seed=11) == sample(seed=11)


def test_a_prompt_over_the_context_names_its_field(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, messages=[{"role": "user", "content": "hello " * 9000}])
    assert e.value.code == "context_length_exceeded" and e.value.param == "messages", e.value.body
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="hello " * 9000, max_tokens=4)
    assert e.value.code == "context_length_exceeded" and e.value.param == "prompt", e.value.body


def test_websocket_pong_echoes_the_ping_id_and_auth_names_a_missing_key(server):
    async def run():
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({"type": "ping", "id": "p7"}))
            pong = json.loads(await asyncio.wait_for(ws.recv(), FRAME_TIMEOUT_S))
            await ws.send(json.dumps({"type": "auth"}))
            no_key = json.loads(await asyncio.wait_for(ws.recv(), FRAME_TIMEOUT_S))
            await ws.send(json.dumps({"type": "auth", "key": KEY}))
            authed = json.loads(await asyncio.wait_for(ws.recv(), FRAME_TIMEOUT_S))
            return pong, no_key, authed
    pong, no_key, authed = asyncio.run(run())
    assert pong == {"type": "pong", "id": "p7"}
    assert no_key["type"] == "error" and no_key["code"] == "invalid_request" and "'key'" in no_key["message"], no_key
    assert authed == {"type": "authed"}
