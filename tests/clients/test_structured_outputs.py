"""Structured outputs and tool calls with the official `openai` client against a real `troupe serve`
(the default model, greedy): every schema of tests/fixtures/schemas gives a document that the
`jsonschema` validator accepts; json_object, `grammar`, `regex` and `choice`; pydantic models through
`client.chat.completions.parse` (and the older `client.beta` spelling); a schema outside the supported
subset is a 400 naming the keyword; tool calls forced and automatic, streamed as OpenAI streams them;
and an agent loop (call -> tool result -> answer) to the end. The same over the WebSocket."""
import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Literal, Optional

import jsonschema
import openai
import pydantic
import pytest
from websockets.asyncio.client import connect

from harness import MODEL_NAME, ROOT, read_until_end, running_server, token_text

KEY = "structured-key"
TIMEOUT_S = 300
SCHEMAS = sorted((ROOT / "tests" / "fixtures" / "schemas").glob("*.json"))

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "The time now in a time zone",
                 "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 30}},
                                "required": ["zone"]}},
}


@pytest.fixture(scope="module")
def server():
    # The response cache off: these tests ask the same questions with different constraints.
    with running_server("--api-key", KEY, "--set", "cache.enabled=false") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", timeout=TIMEOUT_S, max_retries=0)


def ask(client, content, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 400)
    return client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": content}], **kw)


# ---- JSON Schema --------------------------------------------------------------------------------

def test_the_schema_set_is_large_enough():
    assert len(SCHEMAS) >= 30, [p.name for p in SCHEMAS]


def test_every_schema_gives_a_valid_document(client):
    def one(path):
        schema = json.loads(path.read_text())
        # As users of small models do: the schema in the prompt too (the grammar alone keeps the
        # output valid; the prompt helps the model finish it within max_tokens).
        r = ask(client, f"Give an example {path.stem.replace('_', ' ')} as JSON matching this schema: {json.dumps(schema)}",
                response_format={"type": "json_schema",
                                 "json_schema": {"name": path.stem[:64], "schema": schema, "strict": True}})
        return path, schema, r

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, SCHEMAS))
    failures = []
    for path, schema, r in results:
        choice = r.choices[0]
        try:
            assert choice.finish_reason == "stop", f"finish_reason {choice.finish_reason}"
            doc = json.loads(choice.message.content)
            jsonschema.validate(doc, schema)
        except Exception as e:  # collect all, report together
            failures.append(f"{path.name}: {e!r}\n  output: {choice.message.content!r}")
    assert not failures, f"{len(failures)} of {len(results)} schemas failed:\n" + "\n".join(failures)


def test_json_object_streamed_and_not(client):
    r = ask(client, "Describe a cat as a JSON object.", response_format={"type": "json_object"})
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    stream = ask(client, "Describe a dog as a JSON object.", response_format={"type": "json_object"}, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert isinstance(json.loads(text), dict), text


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=40)
    country: str = pydantic.Field(max_length=40)
    population: int
    districts: List[str] = pydantic.Field(max_length=3)
    kind: Literal["capital", "town", "village"]
    mayor: Optional[str] = None


def test_pydantic_models_through_parse(client):
    messages = [{"role": "user", "content": "Describe Paris."}]
    r = client.chat.completions.parse(model=MODEL_NAME, messages=messages, response_format=City, temperature=0,
                                      max_tokens=400)
    city = r.choices[0].message.parsed
    assert isinstance(city, City), r.choices[0].message.content
    beta = client.beta.chat.completions.parse(model=MODEL_NAME, messages=messages, response_format=City,
                                              temperature=0, max_tokens=400)
    assert beta.choices[0].message.parsed == city


def test_pydantic_urls_parse(client):
    """pydantic's HttpUrl and AnyUrl are `format: uri` with minLength 1 / maxLength 2083: refused
    by name before, now written as URIs that pydantic accepts."""
    class Site(pydantic.BaseModel):
        name: str
        url: pydantic.HttpUrl
        docs: pydantic.AnyUrl
    r = client.chat.completions.parse(model=MODEL_NAME, messages=[{"role": "user", "content": "The Python website, as JSON."}],
                                      response_format=Site, max_tokens=160, temperature=0)
    site = r.choices[0].message.parsed
    assert site is not None and site.url.scheme in ("http", "https"), r.choices[0].message.content


def test_pydantic_decimals_parse(client):
    """pydantic's Decimal is `anyOf: [number, string]`, the string (in some pydantic versions) with
    a pattern whose lookahead the regex subset refuses: that branch is left out, and the answer is
    a number, which the schema and pydantic accept. Optional[Decimal] too. (Where the string has no
    pattern, as in the test venv's pydantic, any string is valid JSON Schema but not a Decimal to
    pydantic: that schema says less than its validator.)"""
    decimal = {"anyOf": [{"type": "number"},
                         {"type": "string", "pattern": r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"}]}
    schema = {"type": "object", "properties": {"price": decimal, "discount": {"anyOf": [decimal, {"type": "null"}]}},
              "required": ["price", "discount"], "additionalProperties": False}
    r = ask(client, "A coffee costs 3.50 with no discount. As JSON.", max_tokens=60,
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema, "strict": True}})
    doc = json.loads(r.choices[0].message.content)
    jsonschema.validate(doc, {**schema, "properties": {"price": {"type": "number"},
                                                        "discount": {"type": ["number", "null"]}}})
    assert isinstance(doc["price"], (int, float)), doc  # the string branch is never generated
    # Only null left (the one other branch unsupported) is still refused, naming what is not served.
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, "x", response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": {
            "anyOf": [{"type": "string", "format": "ipv4"}, {"type": "null"}]}}})
    assert "ipv4" in str(e.value)


def test_unsupported_schema_keyword_is_a_400_naming_it(client):
    schema = {"type": "object", "patternProperties": {"^x": {"type": "string"}}}
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, "x", response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    assert "patternProperties" in str(e.value)


def test_a_grammar_that_does_not_parse_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, "x", extra_body={"grammar": "root ::= \"a\" undefined-rule"})
    assert "undefined-rule" in str(e.value)


# ---- grammar, regex, choice -----------------------------------------------------------------------

def test_grammar_regex_and_choice(client):
    g = ask(client, "Is the sky blue? Answer yes or no.", extra_body={"grammar": 'root ::= ("yes" | "no") "."'})
    assert g.choices[0].message.content in ("yes.", "no.")
    rx = ask(client, "Give me a phone number.", extra_body={"structured_outputs": {"regex": r"\(0[1-9]\) [0-9]{3}-[0-9]{4}"}})
    assert re.fullmatch(r"\(0[1-9]\) [0-9]{3}-[0-9]{4}", rx.choices[0].message.content), rx.choices[0].message.content
    ch = ask(client, "Pick a colour.", extra_body={"structured_outputs": {"choice": ["red", "green", "blue"]}})
    assert ch.choices[0].message.content in ("red", "green", "blue")
    comp = client.completions.create(model=MODEL_NAME, prompt="The answer is", max_tokens=20, temperature=0,
                                     extra_body={"structured_outputs": {"regex": " [0-9]+"}})
    assert re.fullmatch(r" [0-9]+", comp.choices[0].text), comp.choices[0].text


def test_a_schema_refused_when_compiled_names_response_format(client):
    # Compiled in admission, past the codec: its 400 used to have param null.
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, "x", max_tokens=4, response_format={"type": "json_schema", "json_schema": {
            "name": "s", "schema": {"type": "object", "if": {"required": ["a"]}}}})
    assert "'if'" in e.value.body["message"] and e.value.body["param"] == "response_format", e.value.body


# ---- tool calls ---------------------------------------------------------------------------------

def test_forced_call_of_a_named_function(client):
    r = ask(client, "What is the weather in Paris?", tools=[WEATHER_TOOL, TIME_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert len(calls) == 1 and calls[0].type == "function" and calls[0].id
    assert calls[0].function.name == "get_weather"
    args = json.loads(calls[0].function.arguments)
    jsonschema.validate(args, WEATHER_TOOL["function"]["parameters"])


def test_required_streams_the_call_as_deltas(client):
    stream = ask(client, "What time is it in Tokyo?", tools=[WEATHER_TOOL, TIME_TOOL], tool_choice="required",
                 stream=True)
    calls, finish, pieces, first = {}, None, 0, True
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        if first:  # the role chunk of a forced reply: content null, as OpenAI opens one of tool calls
            assert d.role == "assistant" and d.content is None, d
            first = False
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
            if tc.id:
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
                pieces += 1
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert len(calls) == 1 and calls[0]["id"] and calls[0]["name"] in ("get_weather", "get_time")
    json.loads(calls[0]["arguments"])
    assert pieces >= 2, "the arguments arrive in pieces, as they are generated"


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5])
def test_a_forced_call_cut_short_returns_no_markup(client, max_tokens):
    # Cut by max_tokens inside "<tool_call>\n{"name": ...": the markup written so far is not content;
    # a named function's call comes back (arguments not begun), required's has no name to give.
    for choice_kind in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
        r = ask(client, "What is the weather in Paris?", tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=choice_kind,
                max_tokens=max_tokens)
        choice = r.choices[0]
        assert choice.finish_reason == "length", choice
        assert choice.message.content is None, choice.message  # a forced reply has no content: null, not ""
        if choice_kind != "required":
            assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"], choice.message
            assert choice.message.tool_calls[0].function.arguments == ""
        else:
            assert not choice.message.tool_calls, choice.message


def test_auto_never_returns_a_call_of_a_function_not_offered(client):
    # A hermes call of "weather London" (the output held to it by a choice constraint, so that the
    # test does not depend on what the model would write; unconstrained, SmolLM2 writes it when
    # asked in that markup): not one of `tools`, so it is text, not a call an agent loop would
    # try to dispatch.
    written = '<tool_call>\n{"name": "weather London", "arguments": {"city": "London"}}\n</tool_call>'
    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    for stream in (False, True):
        r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Call a tool."}],
                                           tools=[weather], max_tokens=60, temperature=0, stream=stream,
                                           extra_body={"guided_choice": [written]})
        if stream:
            content, names = "", []
            for chunk in r:
                for ch in chunk.choices:
                    content += ch.delta.content or ""
                    names += [tc.function.name for tc in ch.delta.tool_calls or [] if tc.function and tc.function.name]
        else:
            msg = r.choices[0].message
            content, names = msg.content or "", [c.function.name for c in msg.tool_calls or []]
        assert names == [] and content == written, (stream, names, content)


def test_agent_loop_call_result_answer(client):
    messages = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
    first = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=[WEATHER_TOOL],
                                           tool_choice="required", temperature=0, max_tokens=200)
    msg = first.choices[0].message
    assert msg.tool_calls, msg
    messages.append(msg.model_dump(exclude_none=True))
    for call in msg.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": json.dumps({"temperature": 18, "sky": "sunny"})})
    final = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=[WEATHER_TOOL],
                                           tool_choice="none", temperature=0, max_tokens=120)
    answer = final.choices[0]
    assert answer.finish_reason in ("stop", "length")
    assert not answer.message.tool_calls
    assert answer.message.content and answer.message.content.strip()


def test_auto_without_a_call_is_plain_content(client):
    r = ask(client, "Say hello.", tools=[WEATHER_TOOL], max_tokens=30)
    choice = r.choices[0]
    if choice.message.tool_calls:  # the model may call; then the call must be well formed
        assert choice.finish_reason == "tool_calls"
        json.loads(choice.message.tool_calls[0].function.arguments)
    else:
        assert choice.finish_reason in ("stop", "length") and choice.message.content


def test_required_makes_one_call_or_more_and_never_repeats_one(client):
    """tool_choice "required" is one call or more (OpenAI's words) while parallel_tool_calls is
    true (its default): a question that wants two calls gets two. A call repeating an earlier
    one of the same reply ends the reply there (this model, given room for several calls, writes
    its one call again): the streamer drops the repeat, in whole answers and in streams."""
    r = ask(client, "What is the weather in Paris and in Rome?", tools=[WEATHER_TOOL], tool_choice="required",
            max_tokens=200)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls", r
    assert [json.loads(c.function.arguments)["city"] for c in calls] == ["Paris", "Rome"], calls
    for stream in (False, True):
        for seed in range(3):
            kw = dict(tools=[WEATHER_TOOL], tool_choice="required", max_tokens=200, seed=seed,
                      temperature=0 if seed == 0 else 1.0)
            if stream:
                got = {}
                for chunk in ask(client, "What is the weather in Berlin?", stream=True, **kw):
                    for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                        c = got.setdefault(tc.index, {"name": "", "arguments": ""})
                        c["name"] += (tc.function.name or "") if tc.function else ""
                        c["arguments"] += (tc.function.arguments or "") if tc.function else ""
                bodies = [(c["name"], c["arguments"]) for _, c in sorted(got.items())]
            else:
                msg = ask(client, "What is the weather in Berlin?", **kw).choices[0].message
                bodies = [(c.function.name, c.function.arguments) for c in msg.tool_calls]
            assert bodies and len(bodies) == len(set(bodies)), (stream, seed, bodies)
            for _, a in bodies:
                json.loads(a)


def test_parallel_tool_calls_false_gives_one_call_at_most(client):
    """LlamaIndex's chat_with_tools and LangChain's function-calling structured output send
    `parallel_tool_calls: false` by default; it was a 400. Forced: one call. Auto: text, then at
    most one call (sampled replies to a question that wants two calls)."""
    forced = ask(client, "Weather in Paris, in celsius?", tools=[WEATHER_TOOL], tool_choice="required",
                 parallel_tool_calls=False, max_tokens=120)
    assert len(forced.choices[0].message.tool_calls) == 1, forced
    for seed in range(6):
        r = ask(client, "What is the weather in Paris and in Rome, and the time in Tokyo? Use the tools.",
                tools=[WEATHER_TOOL, TIME_TOOL], parallel_tool_calls=False, temperature=1.0, seed=seed,
                max_tokens=160)
        choice = r.choices[0]
        calls = choice.message.tool_calls or []
        assert len(calls) <= 1, (seed, calls)
        if calls:
            assert choice.finish_reason == "tool_calls", choice
            assert isinstance(json.loads(calls[0].function.arguments), dict), calls[0]


def test_a_forced_call_with_a_structured_output_is_the_call(client):
    """instructor's RESPONSES_TOOLS mode sends a json_schema text.format with the function it forces
    (and chat clients send response_format beside tool_choice "required"): a forced call leaves no
    text to hold, so the answer is the call, its arguments keeping to the function's schema. A bad
    schema in the structured output is still refused by name."""
    person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.responses.create(
        model=MODEL_NAME, input="Alice is 30 years old. Extract the person.", max_output_tokens=120,
        tools=[{"type": "function", "name": "Person", "parameters": person, "strict": True}],
        tool_choice={"type": "function", "name": "Person"},
        text={"format": {"type": "json_schema", "name": "Person", "schema": person, "strict": True}})
    assert r.status == "completed", r
    calls = [o for o in r.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["Person"], r.output
    jsonschema.validate(json.loads(calls[0].arguments), person)
    c = ask(client, "Weather in Paris, in celsius?", tools=[WEATHER_TOOL], tool_choice="required",
            response_format={"type": "json_object"}, max_tokens=120)
    assert c.choices[0].finish_reason == "tool_calls", c
    assert c.choices[0].message.content is None
    jsonschema.validate(json.loads(c.choices[0].message.tool_calls[0].function.arguments),
                        WEATHER_TOOL["function"]["parameters"])
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, "Weather?", tools=[WEATHER_TOOL], tool_choice="required", max_tokens=20,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}})
    assert "nonsense" in str(e.value)


# ---- WebSocket ----------------------------------------------------------------------------------

def test_websocket_generate_with_a_schema_and_a_choice(server):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}

    async def run():
        async with connect(server.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(json.dumps({"type": "generate", "id": "s1", "max_tokens": 200,
                                      "messages": [{"role": "user", "content": "A person as JSON."}],
                                      "response_format": {"type": "json_schema",
                                                          "json_schema": {"name": "person", "schema": schema}}}))
            toks, final = await read_until_end(ws, "s1")
            assert final["type"] == "done", final
            jsonschema.validate(json.loads(token_text(toks, final)), schema)
            await ws.send(json.dumps({"type": "generate", "id": "s2", "max_tokens": 10,
                                      "messages": [{"role": "user", "content": "Pick one."}],
                                      "structured_outputs": {"choice": ["alpha", "beta"]}}))
            toks, final = await read_until_end(ws, "s2")
            assert token_text(toks, final) in ("alpha", "beta")
    asyncio.run(run())


def test_websocket_tool_call_in_the_done_frame(server):
    async def run():
        async with connect(server.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(json.dumps({"type": "generate", "id": "t1", "max_tokens": 120,
                                      "messages": [{"role": "user", "content": "Weather in Rome?"}],
                                      "tools": [WEATHER_TOOL], "tool_choice": "required"}))
            toks, final = await read_until_end(ws, "t1")
            assert final["type"] == "done", final
            assert final["finish_reason"] == "tool_calls", final
            calls = final["tool_calls"]
            assert len(calls) == 1 and calls[0]["function"]["name"] == "get_weather" and calls[0]["id"]
            jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), WEATHER_TOOL["function"]["parameters"])
            assert "<tool_call>" in token_text(toks, final), "token frames carry the text as generated"
    asyncio.run(run())
