// Login, navigation and the page loop. Each page is `render(container, params, me) -> cleanup?`.

import { api, ApiError, key, setKey } from "./api.js";
import { clear, h } from "./dom.js";
import { renderRuns, renderRun, renderFeedback } from "./runs.js";
import { renderControl, renderLearning } from "./evolution.js";
import { renderGovernance } from "./governance.js";

const PAGES = {
  runs: renderRuns,
  run: renderRun,
  feedback: renderFeedback,
  control: renderControl,
  learning: renderLearning,
  governance: renderGovernance,
};

let me = null;
let cleanup = null;
// Each navigation's number: a page that finishes loading after a newer navigation (or a logout) began is
// stopped at once instead of left polling in the background.
let generation = 0;

function route() {
  const [path, qs = ""] = (window.location.hash || "#/runs").slice(1).split("?");
  const [, page = "runs", ...rest] = path.split("/");
  const params = Object.fromEntries(new URLSearchParams(qs));
  if (page === "runs" && rest.length && rest[0]) return { page: "run", params: { ...params, id: decodeURIComponent(rest.join("/")) } };
  return { page: PAGES[page] ? page : "runs", params };
}

function stopPage() {
  generation += 1;
  if (cleanup) cleanup();
  cleanup = null;
}

async function show() {
  stopPage();
  const mine = generation;
  const page = document.getElementById("page");
  if (!key()) return showLogin();
  if (!me) {
    try {
      me = await api("/v1/dashboard/me");
    } catch (err) {
      if (mine !== generation) return;
      return showLogin(err instanceof ApiError && err.status === 401 ? "That key was not accepted." : err.message);
    }
    if (mine !== generation) return;
  }
  document.getElementById("login").hidden = true;
  document.getElementById("top").hidden = false;
  document.getElementById("who").textContent = me.is_admin ? "admin (all tenants)" : `tenant ${me.tenant_id}`;
  const { page: name, params } = route();
  for (const link of document.querySelectorAll("header nav a")) {
    link.classList.toggle("current", link.dataset.page === (name === "run" ? "runs" : name));
  }
  clear(page);
  try {
    const stop = (await PAGES[name](page, params, me)) || null;
    if (mine !== generation) {
      if (stop) stop(); // replaced while it loaded: its poller must not outlive it
      return;
    }
    cleanup = stop;
  } catch (err) {
    if (mine !== generation) return;
    if (err instanceof ApiError && err.status === 401) return logout();
    page.append(h("p", { class: "error" }, err.message));
  }
}

function showLogin(message = "") {
  me = null;
  clear(document.getElementById("page"));
  document.getElementById("top").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message;
}

function logout() {
  stopPage(); // the page's pollers stop with the key
  setKey(null);
  me = null;
  showLogin();
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  setKey(new FormData(event.target).get("key").trim());
  event.target.reset();
  if (!window.location.hash) window.location.hash = "#/runs";
  show();
});
document.getElementById("logout").addEventListener("click", logout);
window.addEventListener("hashchange", show);
show();
