"""The chat page of GET / in a real headless browser (Debian's chromium and chromium-driver, driven
by selenium) against `troupe serve` with the real model and its default config (cache on): type
a question and watch the answer stream in, press Stop mid-answer and see it stop, keep the
conversation as history, show tokens/s and whether an answer came from the cache, and resume an
answer after the connection drops.

What the page sent and received is read from Chrome's own log of WebSocket frames, so the tests
check that the page shows exactly what the server streamed."""
import asyncio
import json
import os
import re
import shutil
import threading
import time
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from websockets.asyncio.client import connect

from harness import read_until_end, running_server

WAIT_S = 180  # a loaded 2-core machine: generous


@pytest.fixture(scope="module")
def server():
    with running_server() as s:
        yield s


@pytest.fixture(scope="module")
def driver():
    chromium = shutil.which("chromium")
    chromedriver = shutil.which("chromedriver")
    assert chromium and chromedriver, \
        "Debian's chromium and chromium-driver are needed (bash scripts/setup.sh installs them)"
    o = webdriver.ChromeOptions()
    o.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1100,900", "--disable-extensions", "--no-first-run"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    d = webdriver.Chrome(service=Service(chromedriver), options=o)
    d.set_page_load_timeout(WAIT_S)
    d.set_script_timeout(WAIT_S)
    yield d
    d.quit()


class ChatPage:
    def __init__(self, driver, url):
        self.d = driver
        self.d.get(url)
        self.sent, self.received = [], []
        self.wait(lambda: self.d.find_element(By.ID, "status").get_attribute("data-state") == "open",
                  "the page did not connect its WebSocket")
        self.frames()  # drop what the log held from earlier pages

    def wait(self, cond, what, timeout=WAIT_S):
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(lambda _: cond())
        except Exception as e:
            self.screenshot("failure")
            raise AssertionError(f"{what} (within {timeout} s)") from e

    def screenshot(self, name):
        # TROUPE_SCREENSHOTS=DIR keeps pictures of the page for a person to look at.
        out = os.environ.get("TROUPE_SCREENSHOTS")
        if out:
            os.makedirs(out, exist_ok=True)
            self.d.save_screenshot(os.path.join(out, f"chat-{name}.png"))

    def frames(self):
        """WebSocket frames the page sent / received since the last call (Chrome's log)."""
        for entry in self.d.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg["method"] in ("Network.webSocketFrameSent", "Network.webSocketFrameReceived"):
                payload = json.loads(msg["params"]["response"]["payloadData"])
                (self.sent if msg["method"].endswith("Sent") else self.received).append(payload)

    def settings(self, max_tokens, temperature, system=""):
        details = self.d.find_element(By.ID, "settings")
        if details.get_attribute("open") is None:
            details.find_element(By.TAG_NAME, "summary").click()
        for el_id, value in (("max-tokens", max_tokens), ("temperature", temperature), ("system", system)):
            el = self.d.find_element(By.ID, el_id)
            el.clear()
            el.send_keys(str(value))

    def ask(self, question):
        before = len(self.answers())
        box = self.d.find_element(By.ID, "prompt")
        box.send_keys(question)
        box.send_keys(Keys.ENTER)
        self.wait(lambda: len(self.answers()) == before + 1, "no answer bubble appeared")
        return before  # the answer's position

    def answers(self):
        return self.d.find_elements(By.CSS_SELECTOR, "#conversation .msg.assistant")

    def answer(self, i):
        """(state, text, stats text) of answer i, read in one script call."""
        return self.d.execute_script(
            "const el = document.querySelectorAll('#conversation .msg.assistant')[arguments[0]];"
            "return [el.dataset.state, el.querySelector('.text').textContent,"
            "        el.querySelector('.stats').textContent];", i)

    def wait_end(self, i):
        self.wait(lambda: self.answer(i)[0] != "streaming", f"answer {i} did not end")
        self.frames()
        return self.answer(i)

    def stream_of(self, rid):
        tokens = [f for f in self.received if f.get("id") == rid and f["type"] == "token"]
        final = [f for f in self.received if f.get("id") == rid and f["type"] in ("done", "error")]
        return tokens, final


class CuttableProxy:
    """A TCP proxy in front of the server that can drop every connection at once, the way a
    flaky network would, while still accepting new ones."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.loop = asyncio.new_event_loop()
        self.transports = []
        ready = threading.Event()

        async def start():
            self.srv = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = self.srv.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(start(), self.loop)
        assert ready.wait(30)

    async def _handle(self, reader, writer):
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.transports += [writer.transport, up_writer.transport]

        async def pipe(r, w):
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self):
        def abort_all():
            for t in self.transports:
                t.abort()
            self.transports = []
        self.loop.call_soon_threadsafe(abort_all)

    def close(self):
        async def shutdown():
            self.srv.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


def generate_frames(page):
    return [f for f in page.sent if f.get("type") == "generate"]


def test_page_is_one_self_contained_document(server):
    with urllib.request.urlopen(server.url + "/", timeout=WAIT_S) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/html")
        html = r.read().decode()
    assert "<style>" in html and "<script>" in html
    # Nothing fetched from elsewhere: no external script, stylesheet or image.
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', html)
    assert 'src="chat.js"' not in html and 'href="chat.css"' not in html


def test_question_streams_an_answer_with_its_speed(server, driver):
    page = ChatPage(driver, server.url + "/")
    page.settings(max_tokens=48, temperature=0)
    i = page.ask("Describe a sunny day at the beach in a few sentences.")
    # Text shows up while the answer is still streaming.
    page.wait(lambda: page.answer(i)[1].strip() != "", "no text appeared")
    state, text, stats = page.wait_end(i)
    page.screenshot("answer")
    assert state == "done", stats
    [gen] = generate_frames(page)
    assert gen["messages"] == [{"role": "user", "content": "Describe a sunny day at the beach in a few sentences."}]
    assert gen["max_tokens"] == 48 and gen["temperature"] == 0
    tokens, [done] = page.stream_of(gen["id"])
    assert done["type"] == "done"
    # The page shows exactly the streamed text.
    assert text == "".join(t["text"] for t in tokens) + (done.get("text") or "")
    assert text.strip()
    n = done["usage"]["completion_tokens"]
    assert f"{n} tokens" in stats
    if done["cached"]:  # a fresh server, but a cache is free to answer anything
        assert "from cache" in stats and "generated" not in stats, stats
    else:
        assert re.search(r"\d+\.\d tok/s", stats), stats
        assert "generated" in stats and "from cache" not in stats, stats


def test_stop_ends_the_answer_mid_stream(server, driver):
    page = ChatPage(driver, server.url + "/")
    page.settings(max_tokens=12, temperature=0)
    first_q = "What is a dragon?"
    i0 = page.ask(first_q)
    _, first_a, _ = page.wait_end(i0)

    page.settings(max_tokens=1000, temperature=0)
    i = page.ask("Write a long story about a dragon who learns to fly.")
    # Watch the text grow while the answer streams, then press Stop.
    lengths = set()

    def grown_twice():
        state, text, _ = page.answer(i)
        if state != "streaming":
            return True
        lengths.add(len(text))
        return len(lengths - {0}) >= 2

    page.wait(grown_twice, "the answer did not stream")
    assert page.answer(i)[0] == "streaming", f"the answer ended before Stop could be pressed: {page.answer(i)}"
    assert page.d.find_element(By.ID, "send").get_attribute("disabled") is not None
    page.screenshot("streaming")
    page.d.find_element(By.ID, "stop").click()
    page.wait(lambda: page.answer(i)[0] != "streaming", "the answer did not stop")
    state, text, stats = page.answer(i)
    page.screenshot("stopped")
    assert state == "stopped", stats
    assert "stopped" in stats
    time.sleep(2)
    assert page.answer(i)[1] == text, "text kept coming after Stop"
    assert page.d.find_element(By.ID, "stop").get_attribute("disabled") is not None

    page.frames()
    gen = generate_frames(page)[-1]
    # Multi-turn: the second question carries the first exchange as history.
    assert gen["messages"] == [{"role": "user", "content": first_q}, {"role": "assistant", "content": first_a},
                               {"role": "user", "content": "Write a long story about a dragon who learns to fly."}]
    assert {"type": "cancel", "id": gen["id"]} in page.sent
    tokens, [done] = page.stream_of(gen["id"])
    assert done["finish_reason"] == "cancelled"
    assert 0 < done["usage"]["completion_tokens"] < 1000
    assert text == "".join(t["text"] for t in tokens) + (done.get("text") or "")

    # The stopped answer stays in the history too, and the page goes on.
    page.settings(max_tokens=4, temperature=0)
    i2 = page.ask("Thanks.")
    assert page.wait_end(i2)[0] == "done"
    assert len(generate_frames(page)[-1]["messages"]) == 5


def test_repeated_question_is_shown_as_from_the_cache(server, driver):
    page = ChatPage(driver, server.url + "/")
    page.settings(max_tokens=24, temperature=0)
    q = "Name the planets of the solar system."
    first = page.ask(q)
    _, first_text, _ = page.wait_end(first)
    page.d.find_element(By.ID, "new-chat").click()
    assert page.answers() == []
    second = page.ask(q)
    state, text, stats = page.wait_end(second)
    page.screenshot("cached")
    gen = generate_frames(page)[-1]
    assert gen["messages"] == [{"role": "user", "content": q}]  # New chat forgot the history
    _, [done] = page.stream_of(gen["id"])
    assert done["cached"] is True, done
    assert state == "done"
    assert "from cache" in stats, stats
    assert text == first_text
    if "similarity" in done:
        assert f"similarity {done['similarity']:.3f}" in stats, stats


def test_dropped_connection_resumes_the_answer(server, driver):
    """The network drops mid-answer: the page reconnects, sends `resume` with the last index it
    showed, and ends with the whole answer, nothing lost, nothing shown twice."""
    proxy = CuttableProxy(server.port)
    try:
        page = ChatPage(driver, f"http://127.0.0.1:{proxy.port}/")
        # A system prompt of its own: no earlier answer in the cache can match this conversation.
        page.settings(max_tokens=160, temperature=0, system="You tell stories.")
        i = page.ask("Write a long story about a lighthouse keeper and a storm.")
        page.wait(lambda: len(page.answer(i)[1]) > 0, "no text appeared")
        assert page.answer(i)[0] == "streaming", "the answer ended before the connection could be dropped"
        proxy.cut()
        state, text, stats = page.wait_end(i)
        page.screenshot("resumed")
    finally:
        proxy.close()
    assert state == "done", stats
    gen = generate_frames(page)[-1]
    resumes = [f for f in page.sent if f.get("type") == "resume"]
    assert resumes and resumes[0]["id"] == gen["id"], page.sent
    assert resumes[0]["from_index"] >= 0
    assert len(gen["resume_key"]) == 32 and resumes[0]["resume_key"] == gen["resume_key"], page.sent

    async def whole_answer():
        # The same stream, replayed in full to a second real client (`resume` from the start).
        async with connect(server.ws_url) as ws:
            await ws.send(json.dumps({"type": "resume", "id": gen["id"], "from_index": -1,
                                      "resume_key": gen["resume_key"]}))
            return await read_until_end(ws, gen["id"])

    tokens, done = asyncio.run(whole_answer())
    assert done["type"] == "done"
    assert [t["index"] for t in tokens] == list(range(done["usage"]["completion_tokens"]))
    assert text == "".join(t["text"] for t in tokens) + (done.get("text") or "")
    assert f"{done['usage']['completion_tokens']} tokens" in stats
