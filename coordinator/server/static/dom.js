// Small helpers: building elements (text only, never HTML: model output is shown as it is) and the
// words the page uses for stop reasons and settlements.

// `el("p", {class: "x"}, "text", child)`: attributes, then children (strings become text nodes).
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

// A stop reason in words that start with its type: "interrupt", "timeout (permission after 30 s)".
export function reasonWords(reason) {
  if (!reason) return "unknown reason";
  const details = [];
  if (reason.type === "declined") details.push(`${reason.via}, call ${reason.call_id}`);
  if (reason.type === "timeout") details.push(`${reason.scope} deadline, ${reason.after} s`);
  if (reason.type === "error" && reason.message) details.push(reason.message);
  if (reason.type === "interrupt" && reason.soft) details.push("after its step");
  if (reason.type === "interrupt" && reason.by) details.push(`by ${reason.by}`);
  if (reason.parent) details.push(`from the parent session ${reason.parent.session_id}`);
  return details.length ? `${reason.type} (${details.join("; ")})` : reason.type;
}

// A 409's `settlement` ({status, decision?, reason?}) in words: "revoked: interrupt", "replied: once".
export function settlementWords(settlement) {
  if (!settlement) return "settled";
  if (settlement.reason) return `${settlement.status}: ${reasonWords(settlement.reason)}`;
  if (settlement.decision) return `${settlement.status}: ${settlement.decision}`;
  return settlement.status;
}

// A value as a short preview: strings as they are, anything else as JSON; cut at `limit` characters.
export function preview(value, limit = 2000) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  if (text === undefined) return "";
  return text.length > limit ? `${text.slice(0, limit)}…` : text;
}

// How a turn ended, in the words a person uses: "You stopped this turn", "Timed out waiting for
// permission after 2 min". `callName(callId)` names a declined call's tool.
export function endWords(outcome, reason, callName = () => null) {
  if (!reason) return outcome === "succeeded" ? "Done" : outcome;
  if (reason.type === "interrupt") {
    const who = reason.by === "embedder" ? "The program running the coordinator stopped" : "You stopped";
    return reason.soft ? `${who} this turn after its step` : `${who} this turn`;
  }
  if (reason.type === "declined") {
    if (reason.via === "question") return "Declined: you dismissed the question";
    if (reason.via === "task") return "Declined in the sub-agent session";
    const name = callName(reason.call_id);
    return `Declined: you rejected ${name ? `the ${name} call` : "the call"}`;
  }
  if (reason.type === "timeout") {
    const after = duration(reason.after);
    const waits = { permission: "waiting for permission", question: "waiting for an answer" };
    if (waits[reason.scope]) return `Timed out ${waits[reason.scope]} after ${after}`;
    const what = { tool: "the tool ran", execute: "the script ran", step: "the model took", turn: "the turn ran" };
    return `Timed out: ${what[reason.scope] || reason.scope} longer than ${after}`;
  }
  if (reason.type === "shutdown") return "Stopped: the server shut down; it will continue after the restart";
  return `Failed: ${reason.message || "an error"}`;
}

// Seconds in words: "350 ms", "1.2 s", "2 min", "1 h 5 min".
export function duration(seconds) {
  if (seconds === undefined || seconds === null || Number.isNaN(seconds)) return "";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

// The clock time of an RFC 3339 instant, in the reader's time zone: "14:02:33".
export function clock(at) {
  const when = new Date(at);
  return Number.isNaN(when.getTime()) ? "" : when.toLocaleTimeString([], { hour12: false });
}
