// One session's history, folded from its event stream (replayed from seq 0, then live).
//
// Each turn is the person's prompt, then its steps; a step is the model's text (streaming in from
// `session.text.delta`, replaced by the stored text when the step settles) and its tool calls with
// their state; nested calls of `execute` sit under their call, and a sub-agent session is a link under
// its `task` call. Events of descendant sessions only add those links: the dialogs of their waits are
// the Dialogs' business.

import { clock, duration, el, endWords, preview } from "./dom.js";

// The model's markdown, rendered by the markdown-it shipped beside this file (static/THIRD_PARTY.md),
// with raw HTML off: whatever the model writes, it adds no markup of its own.
const markdown = globalThis.markdownit ? globalThis.markdownit({ html: false, linkify: false, breaks: true }) : null;

// The lines a turn's end writes where it happens: a stop's own line comes with `session.idle` (one
// line, in words), but a suspension has no idle, and a resumption is a moment of its own.
const TERMINAL_WORDS = {
  "session.execution.suspended": (e) => endWords("suspended", e.reason),
  "session.execution.resumed": (e) =>
    e.after === "shutdown" ? "Resumed after the restart" : "Resumed after the server stopped unexpectedly",
};
const STOPPED = new Set(["session.execution.interrupted", "session.execution.failed"]);

export class History {
  constructor(root, sessionId) {
    this.root = root;
    this.sessionId = sessionId;
    this.turns = new Map(); // turn_id -> {node, steps: element, lastStep}
    this.steps = new Map(); // step_id -> {node, text: element, points: [], final: bool, tools}
    this.calls = new Map(); // call_id -> {node, state, nested, output}
    this.children = new Map(); // sub-agent session id -> title
    root.replaceChildren();
  }

  apply(event) {
    if (event.type === "session.created") return this.linkChild(event.session);
    if (event.session_id !== this.sessionId) return;
    const handler = this[HANDLERS[event.type]];
    if (handler) handler.call(this, event);
    else if (STOPPED.has(event.type)) this.turn(event.turn_id).reason = event.reason;
    else if (TERMINAL_WORDS[event.type]) this.note(event.turn_id, TERMINAL_WORDS[event.type](event), event.type);
  }

  turnStarted(event) {
    const steps = el("div", { class: "steps" });
    const when = event.at ? el("time", { class: "when", datetime: event.at }, clock(event.at)) : null;
    const node = el(
      "li",
      { class: "turn" },
      when,
      el("p", { class: "prompt" }, el("span", { class: "who" }, "You"), " ", event.prompt),
      steps,
    );
    node.dataset.turnId = event.turn_id;
    this.turns.set(event.turn_id, { node, steps, lastStep: null, startedAt: event.at, tokens: 0, reason: null });
    this.root.append(node);
  }

  turn(turnId) {
    if (!this.turns.has(turnId)) this.turnStarted({ turn_id: turnId, prompt: "(an earlier prompt)" });
    return this.turns.get(turnId);
  }

  step(turnId, stepId) {
    if (!this.steps.has(stepId)) {
      const text = el("p", { class: "text", hidden: true });
      const tools = el("ul", { class: "tools" });
      const node = el("div", { class: "step" }, text, tools);
      node.dataset.stepId = stepId;
      const turn = this.turn(turnId);
      turn.steps.append(node);
      turn.lastStep = stepId;
      this.steps.set(stepId, { node, text, tools, points: [], final: false });
    }
    return this.steps.get(stepId);
  }

  stepStarted(event) {
    this.step(event.turn_id, event.step_id);
  }

  // A delta is placed by its offset (in characters, as the server counts them: code points): a repeat
  // changes nothing, text past a gap waits for the catch-up delta or the step's stored text.
  delta(delta) {
    if (delta.session_id && delta.session_id !== this.sessionId) return;
    const step = this.step(delta.turn_id, delta.step_id);
    if (step.final || delta.offset > step.points.length) return;
    const points = Array.from(delta.delta);
    if (delta.offset + points.length <= step.points.length) return;
    step.points = step.points.slice(0, delta.offset).concat(points);
    this.showText(step, step.points.join(""), "streaming");
  }

  stepSucceeded(event) {
    const step = this.step(event.turn_id, event.step_id);
    if (event.usage) this.turn(event.turn_id).tokens += event.usage.input_tokens + event.usage.output_tokens;
    step.final = true;
    const text = event.message ? event.message.text : step.points.join("");
    this.showText(step, text, "complete");
  }

  stepFailed(event) {
    const step = this.step(event.turn_id, event.step_id);
    step.final = true;
    const text = event.partial_text ?? step.points.join("");
    // Cut short: shown as it stood, greyed; the turn's one end line says why.
    this.showText(step, text, event.reason?.type || "failed");
  }

  showText(step, text, status) {
    // Rendered once the text is whole: the step's reply was recorded ("complete"), or the model moved
    // on to its tool calls ("written"); while it streams it is plain text, which is cheap to extend.
    if ((status === "complete" || status === "written") && markdown) {
      step.text.innerHTML = markdown.render(text).trim();
      step.text.classList.add("markdown");
    } else {
      step.text.textContent = text;
      step.text.classList.remove("markdown");
    }
    step.text.hidden = text === "";
    step.text.dataset.status = status;
  }

  toolStarted(event) {
    const parent = event.parent_call_id ? this.calls.get(event.parent_call_id) : null;
    const step = this.stepOfTurn(event.turn_id);
    const where = parent ? parent.nested : step.tools;
    // The model moved on to its calls: its text is whole.
    if (step.text.dataset.status === "streaming") this.showText(step, step.points.join(""), "written");
    const call = this.call(event.call_id, event.name, event.input, where);
    this.setState(call, "running");
  }

  stepOfTurn(turnId) {
    const turn = this.turn(turnId);
    return this.step(turnId, turn.lastStep ?? `${turnId}-step`);
  }

  call(callId, name, input, where) {
    if (!this.calls.has(callId)) {
      const state = el("span", { class: "call-state" });
      const details = el("div", { class: "call-details" });
      const nested = el("ul", { class: "tools nested" });
      const node = el(
        "li",
        { class: "call" },
        el("div", { class: "call-head" }, el("strong", {}, name), " ", el("code", {}, summary(name, input)), " ", state),
        details,
        nested,
      );
      node.dataset.callId = callId;
      if (typeof input?.code === "string") details.append(el("details", {}, el("summary", {}, "code"), el("pre", {}, input.code)));
      where.append(node);
      this.calls.set(callId, { name, input, node, state, details, nested, logs: null, output: null });
    }
    return this.calls.get(callId);
  }

  setState(call, words, kind = words) {
    call.state.textContent = words;
    call.node.dataset.state = kind;
  }

  toolProgress(event) {
    const call = this.calls.get(event.call_id);
    if (!call) return;
    if (event.nested) {
      const nested = event.nested;
      const inner = this.call(nested.call_id, nested.name, nested.input, call.nested);
      this.setState(inner, nested.status);
      if (nested.output !== undefined) this.output(inner, nested.output, inner.name);
    }
    if (event.log !== undefined) this.log(call, event.log);
  }

  logs(call) {
    if (!call.logs) {
      call.logs = el("pre", { class: "logs" });
      call.details.append(call.logs);
    }
    return call.logs;
  }

  log(call, line) {
    this.logs(call).textContent += `${line}\n`;
  }

  // One output a call: a nested call's output may come from its own settlement and from its parent's
  // progress; an execute call's result is shown alone (its logs and nested calls are shown already).
  output(call, value, name) {
    call.output?.remove();
    call.output = el("pre", { class: "output" }, preview(outputText(name, value)));
    call.details.append(call.output);
  }

  toolSucceeded(event) {
    const call = this.calls.get(event.call_id);
    if (!call) return;
    this.setState(call, "succeeded");
    this.output(call, event.output, call.name);
  }

  toolFailed(event) {
    const call = this.calls.get(event.call_id);
    if (!call) return;
    this.setState(call, `failed: ${event.error.type}`, "failed");
    call.details.append(el("p", { class: "error" }, event.error.message));
    const partial = event.partial;
    if (partial) {
      // The partial result is what the model receives: its logs replace the ones streamed meanwhile.
      if (partial.logs?.length) this.logs(call).textContent = partial.logs.map((line) => `${line}\n`).join("");
      for (const nested of partial.calls || []) {
        const inner = this.call(nested.call_id, nested.name, nested.input, call.nested);
        this.setState(inner, nested.status);
        if (nested.output !== undefined && !inner.output) this.output(inner, nested.output, inner.name);
      }
    }
  }

  waitAsked(event) {
    const wait = event.request ?? event.form;
    const call = this.calls.get(wait.call_id);
    if (!call) return;
    call.waitId = wait.id;
    this.setState(call, event.request ? "waiting for permission" : "waiting for answers", "waiting");
  }

  waitSettled(event) {
    const words = {
      "permission.replied": () => `permission ${event.decision}${event.input ? ", with an edited input" : ""}`,
      "permission.revoked": () => `permission revoked: ${event.reason.type}`,
      "form.submitted": () => "answered",
      "form.cancelled": () => "question dismissed",
      "form.revoked": () => `question revoked: ${event.reason.type}`,
    }[event.type]();
    for (const call of this.calls.values()) {
      if (call.waitId === (event.request_id ?? event.form_id)) this.setState(call, words, "running");
    }
  }

  // A line in the turn where it happened: after the steps so far, before the steps that follow.
  note(turnId, words, type) {
    const node = el("p", { class: "turn-note" }, words);
    node.dataset.type = type;
    this.turn(turnId).steps.append(node);
    return node;
  }

  // The turn's end, one line: how it ended in words, how long it took, the tokens it used.
  idle(event) {
    const turn = this.turn(event.turn_id);
    const words = [endWords(event.outcome, turn.reason, (callId) => this.calls.get(callId)?.name)];
    if (turn.startedAt && event.at) words.push(duration((Date.parse(event.at) - Date.parse(turn.startedAt)) / 1000));
    if (turn.tokens) words.push(`${turn.tokens} tokens`);
    const node = this.note(event.turn_id, words.filter(Boolean).join(" · "), event.type);
    node.dataset.outcome = event.outcome;
  }

  // A sub-agent session: a link under the `task` call that made it.
  linkChild(session) {
    const parent = session.parent;
    if (!parent) return;
    this.children.set(session.id, session.title || session.id);
    if (parent.session_id !== this.sessionId) return;
    const call = this.calls.get(parent.call_id);
    const link = el("a", { href: `#/session/${encodeURIComponent(session.id)}`, class: "child" },
      session.title || session.id, " (sub-agent session)");
    (call ? call.details : this.root).append(el("p", {}, link));
  }

  // The input the model asked a call of this session with (undefined when it is not shown here).
  callInput(callId) {
    return this.calls.get(callId)?.input;
  }

  // A steer the turn received at a step boundary: the person's words, before the step that read them.
  turnSteered(event) {
    const node = el("p", { class: "prompt steer" }, el("span", { class: "who" }, "You, steering"), " ", event.text);
    this.turn(event.turn_id).steps.append(node);
  }

  // The title of a sub-agent session (of any depth) under this one, or null.
  childTitle(sessionId) {
    return this.children.get(sessionId) ?? null;
  }

  truncated(data) {
    this.root.prepend(el("li", { class: "turn-note" }, `Older events were deleted (kept from seq ${data.oldest_seq}).`));
  }
}

const HANDLERS = {
  "session.turn.started": "turnStarted",
  "session.turn.steered": "turnSteered",
  "session.step.started": "stepStarted",
  "session.step.succeeded": "stepSucceeded",
  "session.step.failed": "stepFailed",
  "session.tool.started": "toolStarted",
  "session.tool.progress": "toolProgress",
  "session.tool.succeeded": "toolSucceeded",
  "session.tool.failed": "toolFailed",
  "permission.asked": "waitAsked",
  "form.asked": "waitAsked",
  "permission.replied": "waitSettled",
  "permission.revoked": "waitSettled",
  "form.submitted": "waitSettled",
  "form.cancelled": "waitSettled",
  "form.revoked": "waitSettled",
  "session.idle": "idle",
};

// What a person reads of a call's output: a shell call's streams and exit code as text, an execute
// call's result (its logs and nested calls are shown already), anything else as it is.
function outputText(name, value) {
  if (!value || typeof value !== "object") return value;
  if (name === "execute" && "result" in value) return value.result;
  if (typeof value.stdout === "string" && "exit_code" in value) {
    const stderr = value.stderr ? `\n${value.stderr}` : "";
    return `${value.stdout}${stderr}\n(exit code ${value.exit_code})`;
  }
  return value;
}

// The one line of a call's input a person wants to see.
function summary(name, input) {
  if (!input || typeof input !== "object") return preview(input, 200);
  const code = input.code?.split("\n");
  const firstLine = code && (code.length > 1 ? `${code[0]} …` : code[0]);
  const line = input.command ?? input.prompt ?? firstLine ?? input.questions?.map((q) => q.prompt).join(" / ");
  return preview(line ?? input, 200);
}
