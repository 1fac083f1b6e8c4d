"""The official `openai` Python package against `troupe serve` (real model, an API key configured):
chat completions and completions, streamed and not, the model list, and the errors a client sees
(401, 400, 404, 413) as the package's own exception types."""
import json
import urllib.error
import urllib.request

import openai
import pytest

from harness import MODEL_NAME, running_server

KEY = "test-key-1"
TIMEOUT_S = 180


@pytest.fixture(scope="module")
def server():
    with running_server("--api-key", KEY, "--api-key", "test-key-2") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", timeout=TIMEOUT_S, max_retries=0)


CHAT = [{"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Name three colours."}]


def test_models_list_names_the_served_model_then_the_embedding_model(client):
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL_NAME, "all-MiniLM-L6-v2"]
    assert client.models.retrieve("all-MiniLM-L6-v2").id == "all-MiniLM-L6-v2"
    assert len(client.embeddings.create(model=ids[1], input="hello").data[0].embedding) == 384
    with pytest.raises(openai.NotFoundError) as e:  # it makes embeddings, not text
        client.chat.completions.create(model=ids[1], messages=CHAT, max_tokens=2)
    assert "does not generate text" in str(e.value)


def test_chat_completion(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=12, temperature=0)
    assert r.object == "chat.completion"
    assert r.model == MODEL_NAME
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert c.message.content.strip()
    assert c.finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 12
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if c.finish_reason == "length":
        assert r.usage.completion_tokens == 12


def test_chat_completion_streamed_matches_the_non_streamed_answer(client):
    whole = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=16, temperature=0)
    stream = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=16, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    choice_chunks = [ch for ch in chunks if ch.choices]
    assert choice_chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in choice_chunks)
    assert len(choice_chunks) >= 3, "the answer should arrive in several chunks"
    assert choice_chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert all(ch.choices[0].finish_reason is None for ch in choice_chunks[:-1])
    assert text == whole.choices[0].message.content  # greedy: the same text, streamed or not
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_chat_history_with_content_parts(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=8, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Say hi."}]},
                  {"role": "assistant", "content": "Hi!"},
                  {"role": "user", "content": "Again."}])
    assert r.choices[0].message.content.strip()


def test_a_parsed_tool_call_sent_back_as_history_is_read(client):
    # The agent loop the client's docs show: .parse() with a pydantic tool, the message appended
    # as it came (the client sends its `parsed` and `parsed_arguments` along), the tool's result,
    # then the next turn.
    import pydantic

    class Weather(pydantic.BaseModel):
        city: str

    tools = [openai.pydantic_function_tool(Weather)]
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.parse(model=MODEL_NAME, messages=messages, tools=tools, tool_choice="required",
                                          max_tokens=40, temperature=0, extra_body={"cache": False})
    message = first.choices[0].message
    assert message.tool_calls and isinstance(message.tool_calls[0].function.parsed_arguments, Weather)
    messages.append(message)
    messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "Sunny, 21 C"})
    second = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=tools, max_tokens=16,
                                            temperature=0, extra_body={"cache": False})
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_completion(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=8,
                                  temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text.strip()
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 8


def test_completion_streamed(client):
    whole = client.completions.create(model=MODEL_NAME, prompt="One, two, three,", max_tokens=10, temperature=0)
    chunks = list(client.completions.create(model=MODEL_NAME, prompt="One, two, three,", max_tokens=10,
                                            temperature=0, stream=True))
    assert all(ch.object == "text_completion" for ch in chunks)
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_second_key_is_accepted_too(server):
    c = openai.OpenAI(api_key="test-key-2", base_url=server.url + "/v1", timeout=TIMEOUT_S, max_retries=0)
    r = c.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=2, temperature=0)
    assert r.usage.completion_tokens > 0


# ---- errors --------------------------------------------------------------------------------------

def test_wrong_api_key_is_401(server):
    c = openai.OpenAI(api_key="not-the-key", base_url=server.url + "/v1", timeout=TIMEOUT_S, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=4)
    assert e.value.status_code == 401
    assert e.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        c.models.list()
    with pytest.raises(openai.AuthenticationError):
        c.completions.create(model=MODEL_NAME, prompt="x", max_tokens=1, stream=True)


def test_missing_api_key_is_401(server):
    # The openai package always sends a key; urllib sends none.
    req = urllib.request.Request(server.url + "/v1/completions", method="POST",
                                 data=json.dumps({"prompt": "x", "max_tokens": 1}).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=TIMEOUT_S)
    assert e.value.code == 401
    assert e.value.headers["WWW-Authenticate"] == "Bearer"  # RFC 9110: a 401 names its scheme
    body = json.loads(e.value.read())
    assert body["error"]["type"] == "authentication_error"


def test_open_endpoints_need_no_key(server):
    for path in ("/health", "/metrics", "/"):
        with urllib.request.urlopen(server.url + path, timeout=TIMEOUT_S) as r:
            assert r.status == 200, path


@pytest.mark.parametrize("kwargs, param_hint", [
    ({"temperature": -1}, "temperature"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"top_p": 7}, "top_p"),
    ({"n": 17}, "n"),  # 1..16 are served
])
def test_bad_sampling_values_are_400(client, kwargs, param_hint):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=CHAT, **kwargs)
    assert e.value.status_code == 400
    assert param_hint in str(e.value.message), e.value.message


def test_bad_message_shape_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "wizard", "content": "hi"}],
                                       max_tokens=4)
    assert e.value.status_code == 400
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_NAME, messages=[], max_tokens=4)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_NAME, prompt=None, max_tokens=4)


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=CHAT, max_tokens=4)
    assert e.value.status_code == 404
    assert e.value.code == "unknown_model"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=4, stream=True)


def test_unknown_path_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.get("/no/such/path", cast_to=object)
    assert e.value.code == "not_found"


def test_oversized_body_is_413(client):
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model=MODEL_NAME, max_tokens=4,
                                       messages=[{"role": "user", "content": "x" * (2 << 20)}])
    assert e.value.status_code == 413


def test_context_too_long_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="hello " * 20000, max_tokens=4)
    assert e.value.status_code == 400


def test_server_still_serves_after_the_errors(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Water is", max_tokens=4, temperature=0)
    assert r.usage.completion_tokens > 0
