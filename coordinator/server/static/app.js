// The page: the session list, the selected session (its history, dialogs, interrupt and prompt box),
// and the token prompt. See design/page.md.

import { api, ApiError, path, setTokenPrompt } from "./api.js";
import { Dialogs } from "./dialogs.js";
import { el } from "./dom.js";
import { EventFollower } from "./sse.js";
import { History } from "./history.js";
import { sessionItems } from "./sessions.js";

// The list has no event stream of its own: it is read again this often, and after each turn event.
const LIST_REFRESH_MS = 2000;
const NOTICES_KEPT = 6;
// The list shows the newest sessions, this many more each time a person asks (the API's page is at
// most 1000).
const LIST_PAGE = 100;
const LIST_MAX = 1000;

const $ = (id) => document.getElementById(id);

const page = {
  sessionId: null,
  listLimit: LIST_PAGE,
  follower: null,
  history: null,
  dialogs: new Dialogs(
    $("dialogs"),
    notify,
    (sessionId) => page.history?.childTitle(sessionId) ?? null,
    (callId) => page.history?.callInput(callId),
  ),
};

function notify(text) {
  const notices = $("notices");
  notices.append(el("p", {}, text));
  while (notices.childElementCount > NOTICES_KEPT) notices.firstElementChild.remove();
}

function complain(error) {
  notify(error instanceof ApiError ? `${error.errorName || error.status}: ${error.message}` : String(error));
}

// The token form, shown when the API answers 401; resolves with what the person typed.
setTokenPrompt(
  (refused) =>
    new Promise((resolve) => {
      const form = $("token-form");
      form.querySelector(".hint").textContent = refused
        ? "that token was refused; try again"
        : "this server needs its bearer token; it is kept in this tab only";
      form.hidden = false;
      $("token").value = "";
      $("token").focus();
      form.onsubmit = (submitted) => {
        submitted.preventDefault();
        form.hidden = true;
        resolve($("token").value.trim());
      };
    }),
);

// ---- the session list ------------------------------------------------------------------------

async function refreshSessions() {
  const sessions = await api("GET", path.sessions(page.listLimit));
  if (!page.follower) {
    $("connection").textContent = "connected"; // the server answers; a session's stream says "live"
    $("connection").dataset.state = "connected";
  }
  $("sessions").replaceChildren(...sessionItems(sessions, page.sessionId));
  $("more-sessions").hidden = sessions.length < page.listLimit || page.listLimit >= LIST_MAX;
  const shown = sessions.find((session) => session.id === page.sessionId);
  if (shown) showSessionHead(shown);
  else if (page.sessionId) showSessionHead(await api("GET", path.session(page.sessionId))); // not on the first page
  if (page.sessionId) await refreshQueue(page.sessionId);
}

// The MCP servers under the session list: each one's status, and why it failed.
async function refreshServers() {
  const servers = await api("GET", path.mcp());
  $("mcp").hidden = servers.length === 0;
  $("mcp-servers").replaceChildren(
    ...servers.map((server) => {
      const detail = server.status === "ready" ? ` (${server.tools.length} tools, ${server.protocol})` : "";
      const item = el("li", { "data-status": server.status }, el("b", {}, server.name), ` ${server.status}${detail}`);
      if (server.error) item.append(el("span", { class: "error" }, server.error));
      return item;
    }),
  );
}

// The queued prompts under the history, each with its Cancel.
async function refreshQueue(sessionId) {
  const queued = await api("GET", path.queued(sessionId));
  if (sessionId !== page.sessionId) return;
  const items = queued.map((turn) => {
    const cancel = el("button", { type: "button", class: "danger" }, "Cancel");
    cancel.onclick = () => cancelQueued(sessionId, turn.turn_id).catch(complain);
    const item = el("li", { class: "queued" }, el("span", { class: "queued-text" }, turn.text), " ", cancel);
    item.dataset.turnId = turn.turn_id;
    return item;
  });
  $("queued").replaceChildren(...items);
  $("queue").hidden = items.length === 0;
}

async function cancelQueued(sessionId, turnId) {
  try {
    await api("DELETE", path.turn(sessionId, turnId));
    notify("Queued prompt cancelled: it will not run.");
  } catch (error) {
    if (!(error instanceof ApiError && error.errorName === "TurnNotQueued")) throw error;
    notify("Too late to cancel: that prompt has started.");
  }
  refreshSoon();
}

// One refresh at a time; an event that arrives during one asks for another after it, so the list
// never stays behind the last event seen.
let refreshing = null;
let refreshAgain = false;
function refreshSoon() {
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = (async () => {
    do {
      refreshAgain = false;
      await new Promise((resolve) => setTimeout(resolve, 50));
      await refreshSessions().catch(() => {});
    } while (refreshAgain);
    refreshing = null;
  })();
}

// ---- the selected session --------------------------------------------------------------------

function showSessionHead(session) {
  $("session-title").textContent = session.title || session.id;
  const outcome = session.last_outcome ? `, last outcome: ${session.last_outcome}` : "";
  $("session-state").textContent = `${session.status}${outcome}`;
  // Only a turn parked by a start with `[server] resume = "manual"` can be resumed.
  $("resume").hidden = session.status !== "suspended";
  // A steer joins the running turn; with none running the prompt box only sends.
  $("steer").hidden = session.status !== "busy";
  // Nothing to stop while no turn runs (a suspended turn can be interrupted: it then settles).
  const stoppable = session.status === "busy" || session.status === "suspended";
  $("interrupt").disabled = !stoppable;
  $("soft-stop").disabled = session.status !== "busy";
}

function select(sessionId) {
  if (sessionId === page.sessionId) return;
  page.follower?.stop();
  page.sessionId = sessionId;
  following = true; // a session opens at its newest output
  if (narrow()) showSessionList(!sessionId);
  page.dialogs.clear();
  $("notices").replaceChildren();
  page.history = sessionId ? new History($("history"), sessionId) : null;
  page.follower = null;
  if (!sessionId) {
    $("history").replaceChildren();
    $("session-title").textContent = "No session selected";
    $("session-state").textContent = "";
    $("resume").hidden = true;
    $("steer").hidden = true;
    $("queue").hidden = true;
    $("interrupt").disabled = true;
    $("soft-stop").disabled = true;
    page.follower = null;
    refreshSoon();
    return;
  }
  $("connection").textContent = "connecting…";
  $("connection").dataset.state = "connecting";
  const history = page.history;
  page.follower = new EventFollower(path.events(sessionId), {
    onEvent: (event) => applyEvent(history, event),
    onDelta: (delta) => {
      history.delta(delta);
      keepScrolledDown();
    },
    onFrame: (type, data) => type === "stream.truncated" && history.truncated(data),
    onOpen: () => loadPending(sessionId),
    onState: (state) => {
      $("connection").textContent = state === "live" ? "live" : "reconnecting…";
      $("connection").dataset.state = state;
    },
  }).start();
  refreshSoon();
}

const TURN_EVENTS = /^session\.(turn\.|idle|execution\.)/;

function applyEvent(history, event) {
  if (history !== page.history) return;
  history.apply(event);
  page.dialogs.apply(event);
  if (TURN_EVENTS.test(event.type) || event.type === "session.created") refreshSoon();
  keepScrolledDown();
}

// At each (re)connection: what is pending now, also what a restart restored (same ids).
async function loadPending(sessionId) {
  try {
    const [permissions, forms] = await Promise.all([
      api("GET", path.permissions(sessionId)),
      api("GET", path.forms(sessionId)),
    ]);
    if (sessionId === page.sessionId) page.dialogs.addPending(permissions, forms);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) notify("This session does not exist (any more).");
  }
}

// Following the newest output: the page keeps its end in view as output arrives, unless the person
// scrolled up to read; then a "New output" button offers the way back, and following resumes at the end.
let following = true;
let autoTop = 0; // where the page last scrolled itself

function nearEnd() {
  const scroller = document.scrollingElement;
  return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120;
}

function scrollToNewest() {
  const scroller = document.scrollingElement;
  scroller.scrollTop = scroller.scrollHeight;
  autoTop = scroller.scrollTop;
  following = true;
  $("new-output").hidden = true;
}

function keepScrolledDown() {
  if (following) scrollToNewest();
  else $("new-output").hidden = false;
}

function scrolled() {
  // Only the person scrolls up; the page itself only ever scrolls down to the end.
  const top = document.scrollingElement.scrollTop;
  following = nearEnd() || top >= autoTop - 40;
  if (nearEnd()) $("new-output").hidden = true;
}

// Narrow screens (a phone, a side panel) show the session list or the session, not both side by side.
const NARROW = window.matchMedia("(max-width: 720px)");

function narrow() {
  return NARROW.matches;
}

function showSessionList(shown) {
  $("sessions-nav").classList.toggle("collapsed", !shown);
  $("toggle-sessions").setAttribute("aria-expanded", String(shown));
}

function route() {
  const match = /^#\/session\/(.+)$/.exec(location.hash);
  select(match ? decodeURIComponent(match[1]) : null);
}

// ---- what a person does ----------------------------------------------------------------------

async function createSession(title) {
  const session = await api("POST", path.sessions(), title ? { title } : {});
  location.hash = `#/session/${encodeURIComponent(session.id)}`;
  await refreshSessions();
  return session;
}

async function sendPrompt() {
  const box = $("prompt");
  const text = box.value;
  if (!text.trim()) return;
  let sessionId = page.sessionId;
  if (!sessionId) {
    sessionId = (await createSession(text.trim().slice(0, 60))).id;
    notify("Started a new session for this prompt.");
  }
  await api("POST", path.prompt(sessionId), { text });
  if (box.value === text) box.value = "";
  scrollToNewest();
  refreshSoon();
}

async function steer() {
  const box = $("prompt");
  const text = box.value;
  if (!text.trim()) return;
  if (!page.sessionId) return notify("Select a session first.");
  const answer = await api("POST", path.prompt(page.sessionId), { text, mode: "steer" });
  if (box.value === text) box.value = "";
  notify(answer.steer_id ? "Steer sent: the model reads it before its next step." : "Sent.");
  refreshSoon();
}

async function interrupt() {
  if (!page.sessionId) return notify("Select a session first.");
  const answer = await api("POST", path.interrupt(page.sessionId));
  notify(answer.interrupted ? "Interrupt sent: the turn is stopping." : "Nothing to interrupt: no turn is running.");
}

async function stopAfterStep() {
  if (!page.sessionId) return notify("Select a session first.");
  const answer = await api("POST", path.interrupt(page.sessionId), { when: "after_step" });
  notify(
    answer.interrupted
      ? "The turn stops after its running step: its tool calls finish, the model is not asked again."
      : "Nothing to stop: no turn is running, or it is stopping already.",
  );
}

async function resume() {
  if (!page.sessionId) return notify("Select a session first.");
  try {
    await api("POST", path.resume(page.sessionId));
    notify("Resumed: the suspended turn goes on.");
  } catch (error) {
    if (!(error instanceof ApiError && error.errorName === "NothingToResume")) throw error;
    notify("Nothing to resume: no turn is suspended.");
  }
  refreshSoon();
}

function wire() {
  $("composer").addEventListener("submit", (submitted) => {
    submitted.preventDefault();
    sendPrompt().catch(complain);
  });
  $("prompt").addEventListener("keydown", (key) => {
    if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
      key.preventDefault();
      sendPrompt().catch(complain);
    }
  });
  $("interrupt").addEventListener("click", () => interrupt().catch(complain));
  $("soft-stop").addEventListener("click", () => stopAfterStep().catch(complain));
  $("steer").addEventListener("click", () => steer().catch(complain));
  $("resume").addEventListener("click", () => resume().catch(complain));
  $("new-session").addEventListener("submit", (submitted) => {
    submitted.preventDefault();
    createSession($("new-title").value.trim())
      .then(() => ($("new-title").value = ""))
      .catch(complain);
  });
  $("more-sessions").addEventListener("click", () => {
    page.listLimit = Math.min(page.listLimit + LIST_PAGE, LIST_MAX);
    refreshSessions().catch(complain);
  });
  window.addEventListener("hashchange", route);
  window.addEventListener("scroll", scrolled, { passive: true });
  $("new-output").addEventListener("click", scrollToNewest);
  // On a narrow screen, choosing a session (the one shown too) folds the list away.
  $("sessions").addEventListener("click", (click) => {
    if (narrow() && click.target.closest("a")) showSessionList(false);
  });
  // A window made narrow (a side panel, a rotated phone) with a session open shows the session.
  NARROW.addEventListener("change", () => showSessionList(!narrow() || !page.sessionId));
  $("toggle-sessions").addEventListener("click", () =>
    showSessionList($("sessions-nav").classList.contains("collapsed")),
  );
  setInterval(() => document.visibilityState === "visible" && refreshSessions().catch(() => {}), LIST_REFRESH_MS);
  setInterval(() => document.visibilityState === "visible" && refreshServers().catch(() => {}), LIST_REFRESH_MS);
}

wire();
route();
refreshSessions().catch(complain);
refreshServers().catch(complain);
