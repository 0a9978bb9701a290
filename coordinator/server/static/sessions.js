// The session list: newest first, each a link whose name starts with its title, then its status and
// last outcome; a sub-agent session is listed under its parent.

import { clock, el } from "./dom.js";

// The list items of `sessions` (as GET /api/session answers), `selectedId` marked as the current one.
export function sessionItems(sessions, selectedId) {
  const known = new Set(sessions.map((session) => session.id));
  const byParent = new Map();
  for (const session of sessions) {
    // A child whose parent is not on this page of the list is shown at the top level.
    const parent = known.has(session.parent?.session_id) ? session.parent.session_id : null;
    if (!byParent.has(parent)) byParent.set(parent, []);
    byParent.get(parent).push(session);
  }
  return items(byParent, null, selectedId);
}

function items(byParent, parent, selectedId) {
  const sessions = [...(byParent.get(parent) || [])].sort(newestFirst);
  return sessions.map((session) => {
    const children = items(byParent, session.id, selectedId);
    const link = el(
      "a",
      { href: `#/session/${encodeURIComponent(session.id)}`, "aria-current": session.id === selectedId && "page" },
      el("span", { class: "title" }, session.title || session.id),
      " ",
      el("span", { class: `status ${session.status}` }, session.status),
      session.last_outcome ? el("span", { class: "outcome" }, ` · ${session.last_outcome}`) : null,
      // Two sessions of one title are told apart by when they were made and the end of their id.
      el("span", { class: "meta" }, `${clock(session.created_at)} · …${session.id.slice(-6)}`),
    );
    link.dataset.sessionId = session.id;
    return el("li", {}, link, children.length ? el("ul", {}, ...children) : null);
  });
}

// By creation time, then by id (ids grow with time) for sessions created in the same instant.
function newestFirst(a, b) {
  const key = (session) => [session.created_at, session.id];
  const [x, y] = [key(a), key(b)];
  if (x[0] !== y[0]) return x[0] < y[0] ? 1 : -1;
  return x[1] < y[1] ? 1 : x[1] > y[1] ? -1 : 0;
}
