// Follows a server-sent event stream with fetch(): EventSource cannot send a bearer token.
//
// The frames are parsed here (`id:`, `event:`, `data:`, comments), the last `id:` is remembered,
// and a dropped connection is opened again with `Last-Event-ID`, so the server replays exactly what
// was missed. An event whose seq is not above the last one delivered is dropped: nothing is shown
// twice. Deltas (`session.text.delta`) have no seq and no id line; they go to `onDelta`, which places
// them by their offset.

import { authHeaders, wantToken } from "./api.js";

const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 4000;
// Three missed keep-alive comments (the server sends one after 15 idle seconds): the link is dead.
const SILENCE_MS = 45000;

export class EventFollower {
  // `handlers`: onEvent(event), onDelta(delta), onFrame(type, data) for frames without seq,
  // onOpen() once each connection is accepted, onState("live" | "reconnecting").
  constructor(url, handlers) {
    this.url = url;
    this.handlers = handlers;
    this.lastId = null;
    this.lastSeq = 0;
    this.stopped = false;
    this.abort = null;
  }

  start() {
    this.run();
    return this;
  }

  stop() {
    this.stopped = true;
    this.abort?.abort();
  }

  async run() {
    let delay = RETRY_FIRST_MS;
    while (!this.stopped) {
      try {
        const response = await this.connect();
        if (response.status === 401) {
          await wantToken();
          continue;
        }
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        delay = RETRY_FIRST_MS;
        this.handlers.onState("live");
        this.handlers.onOpen();
        await this.read(response.body);
      } catch (error) {
        if (this.stopped) return;
      }
      if (this.stopped) return;
      this.handlers.onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
  }

  connect() {
    this.abort = new AbortController();
    const headers = { ...authHeaders(), Accept: "text/event-stream" };
    if (this.lastId !== null) headers["Last-Event-ID"] = this.lastId;
    return fetch(this.url, { headers, signal: this.abort.signal, cache: "no-store" });
  }

  async read(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let watchdog = setTimeout(() => this.abort.abort(), SILENCE_MS);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        clearTimeout(watchdog);
        watchdog = setTimeout(() => this.abort.abort(), SILENCE_MS);
        buffer = (buffer + value).replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          this.dispatch(parseFrame(buffer.slice(0, end)));
          buffer = buffer.slice(end + 2);
        }
      }
    } finally {
      clearTimeout(watchdog);
      reader.cancel().catch(() => {});
    }
  }

  dispatch(frame) {
    if (frame.id !== null) this.lastId = frame.id;
    if (frame.data === null) return; // a comment (keep-alive) or an empty frame
    const data = JSON.parse(frame.data);
    try {
      if (frame.event === "session.text.delta") {
        this.handlers.onDelta(data);
      } else if (typeof data.seq === "number") {
        if (data.seq <= this.lastSeq) return; // already shown
        this.lastSeq = data.seq;
        this.handlers.onEvent(data);
      } else {
        this.handlers.onFrame(frame.event, data); // stream.truncated and other frames without seq
      }
    } catch (error) {
      // One event the page cannot show must not stop the stream, nor be retried forever: it is
      // reported as an uncaught error (the browser tests fail on any) and the stream goes on.
      reportError(error);
    }
  }
}

// One frame's fields, as the SSE format defines them: a comment line starts with ":", a field's value
// loses one leading space, and several data lines join with newlines.
export function parseFrame(text) {
  const frame = { id: null, event: "message", data: null };
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") frame.id = value;
    else if (field === "event") frame.event = value;
    else if (field === "data") frame.data = frame.data === null ? value : `${frame.data}\n${value}`;
  }
  return frame;
}
