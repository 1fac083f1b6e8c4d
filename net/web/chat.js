// Troupe chat page: one WebSocket to /v1/ws (docs/protocol.md), one answer streaming at a time.
// Each question sends the whole conversation as `messages`; tokens are appended as they arrive;
// Stop sends `cancel`; a dropped connection is reopened and the running answer `resume`d from
// the last token index seen, so nothing is lost or shown twice.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const ui = {
    conversation: $("conversation"), empty: $("empty"), status: $("status"),
    form: $("composer"), prompt: $("prompt"), send: $("send"), stop: $("stop"),
    newChat: $("new-chat"), system: $("system"), maxTokens: $("max-tokens"),
    temperature: $("temperature"), apiKey: $("api-key"),
  };

  // ---- settings (kept in this browser; the key only for this tab) --------------------------
  const saved = JSON.parse(localStorage.getItem("troupe-chat-settings") || "{}");
  if (saved.system !== undefined) ui.system.value = saved.system;
  if (saved.maxTokens !== undefined) ui.maxTokens.value = saved.maxTokens;
  if (saved.temperature !== undefined) ui.temperature.value = saved.temperature;
  ui.apiKey.value = sessionStorage.getItem("troupe-chat-key") || "";
  function saveSettings() {
    localStorage.setItem("troupe-chat-settings", JSON.stringify({
      system: ui.system.value, maxTokens: ui.maxTokens.value, temperature: ui.temperature.value,
    }));
  }
  [ui.system, ui.maxTokens, ui.temperature].forEach((el) => el.addEventListener("change", saveSettings));
  ui.apiKey.addEventListener("change", () => {
    sessionStorage.setItem("troupe-chat-key", ui.apiKey.value);
    if (ws && ws.readyState === WebSocket.OPEN && ui.apiKey.value) sendFrame({ type: "auth", key: ui.apiKey.value });
  });

  // ---- conversation state -------------------------------------------------------------------
  let history = [];     // {role, content} of finished turns, sent as `messages`
  let current = null;   // the answer streaming now: {id, el, textEl, statsEl, text, lastIndex, userTurn}
  let idCounter = 0;
  const idPrefix = "chat-" + Math.random().toString(36).slice(2, 10) + "-";

  function scrolledToBottom() {
    const c = ui.conversation;
    return c.scrollHeight - c.scrollTop - c.clientHeight < 40;
  }
  function keepBottom(wasAtBottom) {
    if (wasAtBottom) ui.conversation.scrollTop = ui.conversation.scrollHeight;
  }

  function addMessage(role, text) {
    ui.empty.hidden = true;
    const el = document.createElement("div");
    el.className = "msg " + role;
    const textEl = document.createElement("div");
    textEl.className = "text";
    textEl.textContent = text;
    el.appendChild(textEl);
    const statsEl = document.createElement("div");
    statsEl.className = "stats";
    el.appendChild(statsEl);
    ui.conversation.appendChild(el);
    keepBottom(true);  // a new message always comes into view
    return { el, textEl, statsEl };
  }

  function setBusy(busy) {
    ui.send.disabled = busy;
    ui.stop.disabled = !busy;
  }

  function numberSetting(el, fallback) {
    const v = Number(el.value);
    return el.value !== "" && Number.isFinite(v) ? v : fallback;
  }

  function randomHex(bytes) {
    const b = new Uint8Array(bytes);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  }

  function ask(question) {
    if (current) return;
    const userTurn = { role: "user", content: question };
    addMessage("user", question);
    history.push(userTurn);
    const id = idPrefix + (++idCounter);
    const m = addMessage("assistant", "");
    m.el.dataset.state = "streaming";
    m.el.dataset.id = id;
    // The secret that lets this page, and only it, resume the answer after a reconnect.
    const resumeKey = randomHex(16);
    current = { id, ...m, text: "", lastIndex: -1, userTurn, resumeKey };
    setBusy(true);
    const messages = [];
    if (ui.system.value.trim()) messages.push({ role: "system", content: ui.system.value.trim() });
    messages.push(...history);
    sendFrame({
      type: "generate", id, messages, resume_key: resumeKey,
      max_tokens: Math.max(1, Math.round(numberSetting(ui.maxTokens, 512))),
      temperature: Math.max(0, numberSetting(ui.temperature, 0.7)),
    });
  }

  function stop() {
    if (current) sendFrame({ type: "cancel", id: current.id });
  }

  function appendText(text) {
    if (!text) return;
    const atBottom = scrolledToBottom();
    current.text += text;
    current.textEl.textContent = current.text;
    keepBottom(atBottom);
  }

  function fmt(x, digits) { return Number(x).toFixed(digits); }

  function finish(frame) {
    const c = current;
    current = null;
    setBusy(false);
    const badge = (cls, text) => {
      const b = document.createElement("span");
      b.className = "badge " + cls;
      b.textContent = text;
      return b;
    };
    if (frame.type === "error") {
      c.el.dataset.state = "error";
      // The question went unanswered: leave it out of the next request's history.
      history = history.filter((t) => t !== c.userTurn);
      const e = document.createElement("span");
      e.className = "error-text";
      e.textContent = frame.code + ": " + frame.message;
      c.statsEl.append(e, badge("error", "error"));
      return;
    }
    appendText(frame.text || "");
    const stopped = frame.finish_reason === "cancelled";
    c.el.dataset.state = stopped ? "stopped" : "done";
    c.el.dataset.finishReason = frame.finish_reason;
    c.el.dataset.cached = String(!!frame.cached);
    history.push({ role: "assistant", content: c.text });

    const usage = frame.usage || {};
    const t = frame.timings || {};
    const n = usage.completion_tokens || 0;
    const seconds = (t.total_ms || 0) / 1000;
    const parts = [n + (n === 1 ? " token" : " tokens")];
    if (frame.cached) {
      // Replayed from the cache at once: a tokens/s figure would only measure the socket.
      if (t.total_ms !== undefined) parts[0] += " in " + fmt(t.total_ms, 0) + " ms";
    } else {
      if (seconds > 0 && n > 0) parts.push(fmt(n / seconds, 1) + " tok/s");
      if (t.ttft_ms !== undefined && n > 0) parts.push("first token " + fmt(t.ttft_ms, 0) + " ms");
    }
    const line = document.createElement("span");
    line.className = "numbers";
    line.textContent = parts.join(" · ");
    line.dataset.tokensPerSecond = seconds > 0 ? String(n / seconds) : "";
    c.statsEl.appendChild(line);
    if (frame.cached) {
      let label = "from cache";
      if (typeof frame.similarity === "number") label += " · similarity " + fmt(frame.similarity, 3);
      const b = badge("cached", label);
      b.dataset.cached = "true";
      c.statsEl.appendChild(b);
    } else {
      const b = badge("fresh", "generated");
      b.dataset.cached = "false";
      c.statsEl.appendChild(b);
    }
    const endings = { cancelled: "stopped", length: "max tokens reached", deadline: "deadline passed",
                      slow_consumer: "connection too slow" };
    if (frame.finish_reason !== "stop")
      c.statsEl.appendChild(badge("stopped", endings[frame.finish_reason] || frame.finish_reason));
  }

  // ---- the socket ---------------------------------------------------------------------------
  let ws = null;
  let outbox = [];        // frames waiting for the socket to open
  let retryMs = 500;

  function socketUrl() {
    if (location.protocol === "http:" || location.protocol === "https:")
      return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws";
    const server = new URLSearchParams(location.search).get("server") || "127.0.0.1:8080";
    return "ws://" + server + "/v1/ws";
  }

  function setStatus(state, text) {
    ui.status.dataset.state = state;
    ui.status.textContent = text;
  }

  function sendFrame(frame) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(frame));
    else outbox.push(frame);
  }

  function connect() {
    setStatus("connecting", "connecting…");
    ws = new WebSocket(socketUrl());
    ws.onopen = () => {
      retryMs = 500;
      setStatus("open", "connected");
      if (ui.apiKey.value) ws.send(JSON.stringify({ type: "auth", key: ui.apiKey.value }));
      // An answer that was streaming when the last socket dropped goes on where it stopped,
      // unless its generate frame never left (then it is still in the outbox).
      if (current && !outbox.some((f) => f.id === current.id))
        ws.send(JSON.stringify({ type: "resume", id: current.id, from_index: current.lastIndex,
                                 resume_key: current.resumeKey }));
      const pending = outbox;
      outbox = [];
      pending.forEach((f) => ws.send(JSON.stringify(f)));
    };
    ws.onmessage = (ev) => {
      let f;
      try { f = JSON.parse(ev.data); } catch (e) { return; }
      if (f.type === "pong") return;
      if (f.type === "authed") return setStatus("open", "connected — key accepted");
      if (!current || f.id !== current.id) {
        // Not about the running answer: an auth problem or a frame the server could not read.
        if (f.type === "error") setStatus("open", "connected — " + f.code + ": " + f.message);
        return;
      }
      if (f.type === "token") {
        if (f.index <= current.lastIndex) return;  // already shown (resumption overlap)
        current.lastIndex = f.index;
        appendText(f.text);
      } else if (f.type === "done" || f.type === "error") {
        finish(f);
      }
    };
    ws.onclose = () => {
      setStatus("closed", "disconnected — reconnecting…");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 5000);
    };
  }

  // ---- wiring -------------------------------------------------------------------------------
  ui.form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = ui.prompt.value.trim();
    if (!q || current) return;
    ui.prompt.value = "";
    ask(q);
  });
  ui.prompt.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      ui.form.requestSubmit();
    }
  });
  ui.stop.addEventListener("click", stop);
  ui.newChat.addEventListener("click", () => {
    stop();
    current = null;
    setBusy(false);
    history = [];
    ui.conversation.querySelectorAll(".msg").forEach((el) => el.remove());
    ui.empty.hidden = false;
    ui.prompt.focus();
  });

  setBusy(false);
  connect();
})();
