// Pending permission requests and question forms as non-modal dialogs, shown only while pending.
//
// A dialog opens on `permission.asked` / `form.asked` (or from the pending lists fetched at each
// (re)connection) and closes on its settlement event, whoever settled it: this page, another tab, the
// CLI, a revocation. When it closes for a reason other than this page's own reply, the status area
// says why ("revoked: interrupt"). A reply answering 409 closes it and shows the settlement; 404
// closes it too. Any other failure (the server is restarting, the network dropped) leaves it open
// with its buttons working, so no dialog is ever stuck. Ids settled once are remembered, so a pending
// list that was read before a settlement arrived cannot bring a settled dialog back.

import { api, path } from "./api.js";
import { el, reasonWords, settlementWords } from "./dom.js";

export class Dialogs {
  // `root`: where dialogs go; `notify(text)`: the status area; `childTitle(sid)`: the title of a
  // sub-agent session, or null for the session shown; `callInput(callId)`: the input the model asked
  // a call with (what Edit starts from), or undefined.
  constructor(root, notify, childTitle = () => null, callInput = () => undefined) {
    this.root = root;
    this.notify = notify;
    this.childTitle = childTitle;
    this.callInput = callInput;
    this.open = new Map(); // id -> entry
    this.settled = new Set();
  }

  clear() {
    this.open.clear();
    this.settled.clear();
    this.root.replaceChildren();
  }

  apply(event) {
    const handlers = {
      "permission.asked": () => this.showPermission(event.request, event.restored === true),
      "permission.replied": () => this.closed(event.request_id, `replied: ${event.decision}`),
      "permission.revoked": () => this.closed(event.request_id, `revoked: ${reasonWords(event.reason)}`),
      "form.asked": () => this.showForm(event.form, event.restored === true),
      "form.submitted": () => this.closed(event.form_id, "submitted"),
      "form.cancelled": () => this.closed(event.form_id, "cancelled: dismissed"),
      "form.revoked": () => this.closed(event.form_id, `revoked: ${reasonWords(event.reason)}`),
    };
    handlers[event.type]?.();
  }

  // The pending lists read at a (re)connection: show what is pending and not shown yet.
  addPending(permissions, forms) {
    for (const request of permissions) this.showPermission(request, false);
    for (const form of forms) this.showForm(form, false);
  }

  showPermission(request, restored) {
    if (request.status !== "pending" || this.settled.has(request.id)) return;
    const what = `${request.action} "${request.resource}"`;
    const message = el("input", { type: "text", "aria-label": "Message (optional)", placeholder: "why not" });
    // Edit: the call's input as JSON, changed by the person before it runs (checked by the server
    // against the tool's input schema: a mismatch leaves the dialog open with the server's words).
    const editor = el("textarea", { class: "edit-input", "aria-label": "Input to run with", rows: 4, hidden: true });
    const editing = () => !editor.hidden;
    const send = (decision) => {
      const body = { decision };
      if (decision === "reject" && message.value.trim()) body.message = message.value.trim();
      if (decision !== "reject" && editing()) {
        try {
          body.input = JSON.parse(editor.value);
        } catch (error) {
          const entry = this.open.get(request.id);
          if (entry) entry.error.textContent = `The edited input is not JSON: ${error.message}`;
          return;
        }
      }
      const how = body.input ? ", with the edited input" : "";
      const words = decision !== "reject" ? `allowed (${decision})${how}` : body.message ? "rejected, with a message for the model" : "rejected";
      this.reply(request.id, () => api("POST", path.reply(request.session_id, request.id), body), words);
    };
    const edit = el("button", { type: "button" }, "Edit");
    edit.onclick = () => {
      editor.hidden = false;
      editor.value = JSON.stringify(this.callInput(request.call_id) ?? {}, null, 2);
      edit.disabled = true;
      editor.focus();
    };
    this.show(request.id, restored, {
      kind: "permission",
      askedBy: this.childTitle(request.session_id),
      what: `permission for ${what}`,
      title: `Permission: ${request.action}`,
      body: [el("p", {}, `${request.action} wants to run `, el("code", {}, request.resource))],
      fields: [editor, el("label", { class: "optional" }, "Message (optional)", message)],
      buttons: [
        el("button", { type: "button", onclick: () => send("once") }, "Allow once"),
        el("button", { type: "button", onclick: () => send("always") }, "Always allow"),
        edit,
        el("button", { type: "button", class: "danger", onclick: () => send("reject") }, "Reject"),
      ],
    });
  }

  showForm(form, restored) {
    if (form.status !== "pending" || this.settled.has(form.id)) return;
    // A form an MCP server asked has the JSON Schema of its answers: each input is typed by it.
    const properties = form.schema?.properties ?? null;
    const required = new Set(form.schema?.required ?? []);
    const inputs = form.questions.map((question) =>
      properties ? schemaInput(form.id, question, properties[question.id] ?? {}, required.has(question.id)) : questionInput(form.id, question),
    );
    const message = el("input", { type: "text", "aria-label": "Message (optional)", placeholder: "why not" });
    const submit = () => {
      const given = inputs.map((input) => [input.question.id, input.value()]).filter(([, value]) => value !== undefined);
      const answers = Object.fromEntries(given);
      this.reply(form.id, () => api("POST", path.form(form.session_id, form.id), { answers }), "submitted");
    };
    const dismiss = () => {
      const text = message.value.trim();
      const query = text ? `?message=${encodeURIComponent(text)}` : "";
      this.reply(form.id, () => api("DELETE", path.form(form.session_id, form.id) + query), "dismissed");
    };
    const server = form.source?.mcp;
    const said = form.prompt ? [el("p", { class: "server-says" }, form.prompt)] : [];
    this.show(form.id, restored, {
      kind: "form",
      askedBy: this.childTitle(form.session_id),
      what: server ? `question of the MCP server ${server}` : `question "${form.questions.map((q) => q.prompt).join(" / ")}"`,
      title: server ? `Question from ${server}` : "Question",
      body: [...said, ...inputs.map((input) => input.node)],
      fields: [el("label", { class: "optional" }, "Message (optional)", message)],
      buttons: [
        el("button", { type: "button", onclick: submit }, "Submit"),
        el("button", { type: "button", class: "danger", onclick: dismiss }, "Dismiss"),
      ],
    });
  }

  show(id, restored, parts) {
    const existing = this.open.get(id);
    if (existing) {
      if (restored) existing.node.classList.add("restored");
      return;
    }
    const titleId = `dialog-${id}`;
    const error = el("p", { class: "error", role: "alert" });
    const node = el(
      "section",
      { class: `dialog ${parts.kind}`, role: "dialog", "aria-modal": "false", "aria-labelledby": titleId },
      el("h3", { id: titleId }, parts.title),
      parts.askedBy ? el("p", { class: "asked-by" }, `Asked by the sub-agent session ${parts.askedBy}`) : null,
      ...parts.body,
      el("p", { class: "restored-note" }, "Kept across a server restart: same request, still waiting."),
      ...parts.fields,
      el("div", { class: "buttons" }, ...parts.buttons),
      error,
    );
    node.dataset.id = id;
    if (restored) node.classList.add("restored");
    this.open.set(id, { id, what: parts.what, node, error, buttons: parts.buttons, busy: false, closedBy: null });
    this.root.append(node);
  }

  // A settlement event: the dialog goes now. The words wait for our own reply when one is under way,
  // since its answer says whether the settlement was ours.
  closed(id, words) {
    this.settled.add(id);
    const entry = this.open.get(id);
    if (!entry) return;
    this.remove(entry);
    if (entry.busy) entry.closedBy = words;
    else this.notify(`${capitalise(entry.what)}: ${words}`);
  }

  async reply(id, call, ownWords) {
    const entry = this.open.get(id);
    if (!entry || entry.busy) return;
    entry.busy = true;
    entry.error.textContent = "";
    setDisabled(entry, true);
    try {
      await call();
      this.settled.add(id);
      this.remove(entry);
      this.notify(`${capitalise(entry.what)}: ${ownWords}`);
    } catch (error) {
      this.failed(entry, error);
    } finally {
      entry.busy = false;
    }
  }

  failed(entry, error) {
    if (error.status === 409 || error.status === 404) {
      this.settled.add(entry.id);
      this.remove(entry);
      const words =
        error.status === 409
          ? `already settled, ${settlementWords(error.details.settlement)}`
          : "no longer exists on the server";
      this.notify(`${capitalise(entry.what)}: ${words}`);
    } else if (entry.closedBy !== null) {
      this.notify(`${capitalise(entry.what)}: ${entry.closedBy}`);
    } else {
      entry.error.textContent = `Not sent (${error.message}); the request is still waiting, try again.`;
      setDisabled(entry, false);
    }
  }

  remove(entry) {
    this.open.delete(entry.id);
    entry.node.remove();
  }
}

// A question's input: radio buttons for its options, else a text box; `value()` reads the answer.
function questionInput(formId, question) {
  const name = `${formId}-${question.id}`;
  if (question.options && question.options.length) {
    const radios = question.options.map((option) => el("input", { type: "radio", name, value: option }));
    const node = el(
      "fieldset",
      { class: "question" },
      el("legend", {}, question.prompt),
      ...radios.map((radio) => el("label", {}, radio, radio.value)),
    );
    return { question, node, value: () => radios.find((radio) => radio.checked)?.value ?? "" };
  }
  const input = el("input", { type: "text" });
  const node = el("label", { class: "question" }, question.prompt, input);
  return { question, node, value: () => input.value };
}

// A question of a server's form, its input typed by the property's schema: a number box for a number
// or an integer, a checkbox for a boolean, radio buttons for one choice, checkboxes for several, else
// a text box (a date, an email address or a URL as such). `value()` is the JSON value the schema
// asks for, or undefined when an optional question is left empty.
function schemaInput(formId, question, property, required) {
  const name = `${formId}-${question.id}`;
  const hint = property.description && property.description !== question.prompt ? property.description : "";
  const legend = [question.prompt, required ? " (required)" : "", hint ? el("small", {}, ` ${hint}`) : null];
  const type = property.type;
  if (type === "array") {
    const boxes = (question.options ?? []).map((option) => el("input", { type: "checkbox", name, value: option }));
    for (const box of boxes) box.checked = (property.default ?? []).includes(box.value);
    const node = el("fieldset", { class: "question", "data-type": "array" }, el("legend", {}, ...legend),
      ...boxes.map((box) => el("label", {}, box, box.value)));
    return { question, node, value: () => boxes.filter((box) => box.checked).map((box) => box.value) };
  }
  if (question.options && question.options.length) {
    const radios = question.options.map((option) => el("input", { type: "radio", name, value: option }));
    for (const radio of radios) radio.checked = radio.value === String(property.default ?? "");
    const node = el("fieldset", { class: "question", "data-type": "choice" }, el("legend", {}, ...legend),
      ...radios.map((radio) => el("label", {}, radio, radio.value)));
    const value = () => radios.find((radio) => radio.checked)?.value;
    return { question, node, value };
  }
  if (type === "boolean") {
    const box = el("input", { type: "checkbox", name });
    box.checked = property.default === true;
    const node = el("label", { class: "question check", "data-type": "boolean" }, box, ...legend);
    return { question, node, value: () => box.checked };
  }
  const attributes = { name };
  if (type === "integer" || type === "number") {
    Object.assign(attributes, { type: "number", step: type === "integer" ? "1" : "any" });
    if (property.minimum !== undefined) attributes.min = String(property.minimum);
    if (property.maximum !== undefined) attributes.max = String(property.maximum);
  } else {
    const formats = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };
    attributes.type = formats[property.format] ?? "text";
  }
  if (required) attributes.required = "";
  const input = el("input", attributes);
  if (property.default !== undefined) input.value = String(property.default);
  const node = el("label", { class: "question", "data-type": type ?? "string" }, ...legend, input);
  const value = () => {
    if (input.value === "") return required ? "" : undefined;
    return type === "integer" || type === "number" ? Number(input.value) : input.value;
  };
  return { question, node, value };
}

function setDisabled(entry, disabled) {
  for (const button of entry.buttons) button.disabled = disabled;
}

function capitalise(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
