// The JSON API, called with the key the person logged in with (kept for this tab only).

const KEY = "evolvable.key";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function key() {
  return sessionStorage.getItem(KEY);
}

export function setKey(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

export async function api(path, { method = "GET", body, query } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== "" && value !== null && value !== undefined) url.searchParams.set(name, value);
  }
  const headers = { authorization: `Bearer ${key() || ""}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = response.headers.get("content-type")?.includes("json") ? await response.json() : null;
  if (!response.ok) {
    const message = data?.error?.message || `HTTP ${response.status}`;
    throw new ApiError(response.status, message);
  }
  return data;
}
