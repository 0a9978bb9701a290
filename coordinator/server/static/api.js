// Calls to the HTTP API: JSON in and out, the bearer token from this tab's sessionStorage.
//
// A 401 asks the person for the token (through the hook app.js installs) and retries the call, so
// every caller just awaits its answer. The token stays in sessionStorage: it lives as long as the tab
// and no other site can read it.

const TOKEN_KEY = "coordinator.token";

// An answer other than 2xx: `status`, and the contract's `{name, message, ...details}`.
export class ApiError extends Error {
  constructor(status, error) {
    super(error?.message || `HTTP ${status}`);
    this.status = status;
    this.errorName = error?.name || "";
    this.details = error || {};
  }
}

let askToken = () => Promise.reject(new Error("no way to ask for the token"));
let asking = null;

// `ask(refused)` shows the token form (`refused`: the token given before was wrong) and resolves with
// the token the person typed.
export function setTokenPrompt(ask) {
  askToken = ask;
}

// Waits until the person gave a token; concurrent 401s share one prompt.
export async function wantToken() {
  if (asking === null) {
    asking = askToken(sessionStorage.getItem(TOKEN_KEY) !== null).then((token) => {
      sessionStorage.setItem(TOKEN_KEY, token);
      asking = null;
    });
  }
  return asking;
}

export function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// `method` `path` with `body` (JSON, optional); resolves with the parsed answer, or throws ApiError.
export async function api(method, path, body) {
  for (;;) {
    const init = { method, headers: authHeaders() };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    if (response.status === 401) {
      await wantToken();
      continue;
    }
    const text = await response.text();
    const data = text ? JSON.parse(text) : null;
    if (!response.ok) throw new ApiError(response.status, data?.error);
    return data;
  }
}

export const path = {
  sessions: (limit) => (limit ? `/api/session?limit=${limit}` : "/api/session"),
  mcp: () => "/api/mcp",
  session: (sid) => `/api/session/${encodeURIComponent(sid)}`,
  prompt: (sid) => `${path.session(sid)}/prompt`,
  interrupt: (sid) => `${path.session(sid)}/interrupt`,
  queued: (sid) => `${path.session(sid)}/turn?status=queued`,
  turn: (sid, tid) => `${path.session(sid)}/turn/${encodeURIComponent(tid)}`,
  resume: (sid) => `${path.session(sid)}/resume`,
  permissions: (sid) => `${path.session(sid)}/permission`,
  reply: (sid, rid) => `${path.session(sid)}/permission/${encodeURIComponent(rid)}/reply`,
  forms: (sid) => `${path.session(sid)}/form`,
  form: (sid, fid) => `${path.session(sid)}/form/${encodeURIComponent(fid)}`,
  events: (sid) => `${path.session(sid)}/event?after=0&deltas=true&descendants=true`,
};
