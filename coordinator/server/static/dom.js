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
