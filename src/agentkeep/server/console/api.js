// The REST API, same origin. The session cookie rides along by itself; every request also
// sends the console's header, without which the daemon refuses a cookie on an unsafe method
// (a cross-site page cannot add it without a CORS preflight, which the daemon never grants).

export const CONSOLE_HEADER = 'x-agentkeep-console';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

let onSignedOut = () => {};
export function whenSignedOut(callback) { onSignedOut = callback; }

export async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { [CONSOLE_HEADER]: '1' } };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    if (response.status === 401) onSignedOut();
    throw new ApiError(response.status, error.code, error.message);
  }
  return data;
}

export const enc = encodeURIComponent;

// Every page of a paged list, following nextAfter.
export async function all(path, key) {
  const found = [];
  let after = null;
  for (;;) {
    const sep = path.includes('?') ? '&' : '?';
    const page = await api('GET', after === null ? path : `${path}${sep}after=${enc(after)}`);
    found.push(...page[key]);
    if (page.nextAfter === null || page.nextAfter === undefined) return found;
    after = page.nextAfter;
  }
}
