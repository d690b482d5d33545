// Building DOM nodes from data without innerHTML: every value becomes text, so nothing stored can run.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Redaction placeholders (<EMAIL_1>, <REDACTION_FAILED>) stay visible, marked as placeholders.
const PLACEHOLDER = /(<[A-Z][A-Z0-9_]*_\d+>|<REDACTION_FAILED>|<REDACTED>)/g;

export function text(value) {
  const s = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  if (s === undefined) return "";
  const parts = s.split(PLACEHOLDER);
  return parts.map((part, i) => (i % 2 === 1 ? h("span", { class: "placeholder", title: "redacted" }, part) : part));
}

export function pre(value) {
  return h("pre", {}, text(value));
}

export function pill(value) {
  return value ? h("span", { class: `pill ${value}` }, value) : "";
}

export function fmtTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

export function fmtNum(value, digits = 2) {
  return value === null || value === undefined ? "" : Number(value).toFixed(digits);
}

export function table(headers, rows) {
  return h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))), h("tbody", {}, rows));
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}
