"""The official `openai` Python package's Responses API (`client.responses`) against `troupe serve`
(real model, an API key configured): create with and without instructions, the typed event stream,
max_output_tokens as an incomplete response, parse() into a pydantic model, a function-calling loop,
previous_response_id with GET and DELETE of stored responses, and a refused field."""
import json

import openai
import pydantic
import pytest

from harness import MODEL_NAME, running_server

KEY = "test-key-1"
OTHER_KEY = "test-key-2"
TIMEOUT_S = 180


@pytest.fixture(scope="module")
def server():
    with running_server("--api-key", KEY, "--api-key", OTHER_KEY) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", timeout=TIMEOUT_S, max_retries=0)


def test_create_answers_a_completed_response(client):
    r = client.responses.create(model=MODEL_NAME, input="Name a colour.", max_output_tokens=24, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_"), r
    assert r.model == MODEL_NAME and r.error is None
    assert r.status in ("completed", "incomplete"), r
    msg = r.output[0]
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.content[0].type == "output_text"
    assert r.output_text == msg.content[0].text and r.output_text
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 24
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert r.store is True and r.previous_response_id is None and r.instructions is None


def test_instructions_are_a_system_message_and_echoed(client):
    told = client.responses.create(model=MODEL_NAME, input="Hello", instructions="Answer in French.",
                                   max_output_tokens=4, temperature=0, metadata={"run": "a"})
    assert told.instructions == "Answer in French." and told.metadata == {"run": "a"}
    chat = client.chat.completions.create(model=MODEL_NAME, max_tokens=4, temperature=0, messages=[
        {"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hello"}])
    assert told.usage.input_tokens == chat.usage.prompt_tokens
    assert told.output_text == chat.choices[0].message.content


def test_max_output_tokens_makes_an_incomplete_response(client):
    r = client.responses.create(model=MODEL_NAME, input="Write a long story about a ship.", max_output_tokens=3,
                                temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", r
    assert r.usage.output_tokens == 3 and r.output[0].status == "incomplete"


def test_stream_events_in_order_with_sequence_numbers(client):
    events = list(client.responses.create(model=MODEL_NAME, input="Name two fruits.", max_output_tokens=16,
                                          temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"], types
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete" if events[-1].response.status == "incomplete" else
                          "response.completed"], types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    final = events[-1].response
    assert deltas and deltas == done.text == final.output_text
    assert final.id == events[0].response.id and events[0].response.status == "in_progress"


def test_stream_helper_gives_the_final_response(client):
    with client.responses.stream(model=MODEL_NAME, input="What is 2+2?", max_output_tokens=24, temperature=0) as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()  # response.completed: the answer ended before max_output_tokens
    assert text and final.output_text == text and final.status == "completed"


class Colour(pydantic.BaseModel):
    name: str
    warm: bool


def test_parse_into_a_pydantic_model(client):
    r = client.responses.parse(model=MODEL_NAME, input="Describe the colour red as JSON.", text_format=Colour,
                               max_output_tokens=40, temperature=0)
    assert r.status == "completed", r
    assert isinstance(r.output_parsed, Colour)
    assert r.text.format.type == "json_schema"


WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_function_call_loop(client):
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.responses.create(model=MODEL_NAME, input=question, tools=[WEATHER], tool_choice="required",
                                max_output_tokens=40, temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_"), r.output
    json.loads(calls[0].arguments)
    # As OpenAI's guide does it: the answer's output items sent back, then each call's output.
    follow = question + r.output
    follow += [{"type": "function_call_output", "call_id": c.call_id, "output": "Sunny, 24 C"} for c in calls]
    r2 = client.responses.create(model=MODEL_NAME, input=follow, tools=[WEATHER], tool_choice="none",
                                 max_output_tokens=16, temperature=0)
    assert r2.output[0].type == "message" and r2.output_text, r2


def test_previous_response_id_get_and_delete(client, server):
    first = client.responses.create(model=MODEL_NAME, input="My name is Ada.", max_output_tokens=8, temperature=0)
    second = client.responses.create(model=MODEL_NAME, input="What is my name?", previous_response_id=first.id,
                                     max_output_tokens=8, temperature=0)
    assert second.previous_response_id == first.id
    # The first exchange is the conversation before this input.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    got = client.responses.retrieve(first.id)
    assert got.id == first.id and got.output_text == first.output_text
    other = openai.OpenAI(api_key=OTHER_KEY, base_url=server.url + "/v1", timeout=TIMEOUT_S, max_retries=0)
    with pytest.raises(openai.NotFoundError):  # stored responses are per API key
        other.responses.retrieve(first.id)
    items = client.responses.input_items.list(second.id)
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [("message", "user", "What is my name?")]
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=MODEL_NAME, input="Again?", previous_response_id=first.id, max_output_tokens=4)
    assert e.value.body["param"] == "previous_response_id"


def test_store_false_keeps_nothing(client):
    r = client.responses.create(model=MODEL_NAME, input="Hi", store=False, max_output_tokens=2)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_unhonoured_fields_are_refused_by_name(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_NAME, input="Hi", background=True)
    assert e.value.body["param"] == "background"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_NAME, input="Hi", tools=[{"type": "web_search"}])
    assert e.value.body["param"] == "tools[0].type"


def test_settings_echo_what_was_sampled_and_unserved_routes_say_so(client, server):
    """An adversarial pass's findings: temperature absent is echoed as 0 (Troupe samples greedily
    then, not at OpenAI's 1); the API's routes that are not served are 404s naming them, not 405s;
    a retrieve with stream=true is a 400 naming stream, not a silent JSON answer."""
    r = client.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=2,
                                extra_body={"prompt_cache_key": "k1", "safety_identifier": "s1"})
    assert r.temperature == 0 and r.top_p == 1, r
    assert r.prompt_cache_key == "k1" and r.safety_identifier == "s1", r
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.input_tokens.count(model=MODEL_NAME, input="Hi")
    assert "input_tokens" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        list(client.responses.retrieve(r.id, stream=True))
    assert e.value.body["param"] == "stream"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.input_items.list(r.id, after="item_bogus")
    assert e.value.body["param"] == "after"
