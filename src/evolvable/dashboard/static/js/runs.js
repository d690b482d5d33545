// Trajectories: the filtered list (polled while runs are live), one run step by step, and feedback.

import { api } from "./api.js";
import { clear, fmtNum, fmtTime, h, pill, pre, table, text } from "./dom.js";

const POLL_MS = 3000;
const FILTERS = ["agent", "status", "cluster", "harness_version", "policy_version", "started_after", "signal", "signal_min", "signal_max"];
const SIGNAL_KINDS = ["", "outcome", "process", "user_feedback", "verifier", "tool_error", "judge"];

function poller(load) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    const again = await load().catch(() => true);
    if (!stopped && again) timer = setTimeout(tick, POLL_MS);
  };
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function filterForm(values, onChange) {
  const field = (name, input) => h("label", {}, name.replace("_", " "), input);
  const inp = (name, type = "text") => h("input", { name, type, value: values[name] || "", size: 14 });
  const select = (name, options) =>
    h("select", { name }, options.map((o) => h("option", { value: o, selected: values[name] === o }, o || "any")));
  const form = h(
    "form",
    { class: "filters card", id: "run-filters" },
    field("agent", inp("agent")),
    field("status", select("status", ["", "running", "completed", "failed", "abandoned"])),
    field("cluster", inp("cluster")),
    field("harness_version", inp("harness_version")),
    field("policy_version", inp("policy_version")),
    field("started_after", inp("started_after", "datetime-local")),
    field("signal", select("signal", SIGNAL_KINDS)),
    field("signal_min", h("input", { name: "signal_min", type: "number", step: "any", value: values.signal_min || "", style: "width:5rem" })),
    field("signal_max", h("input", { name: "signal_max", type: "number", step: "any", value: values.signal_max || "", style: "width:5rem" })),
    h("button", { type: "submit", class: "primary" }, "Filter"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = Object.fromEntries([...new FormData(form)].filter(([, v]) => v !== ""));
    onChange(data);
  });
  return form;
}

function runRow(run, me) {
  const signals = Object.entries(run.signals).map(([k, v]) => `${k} ${fmtNum(v)}`).join(", ");
  return h(
    "tr",
    { "data-run": run.id },
    h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, class: "run-link" }, run.id)),
    me.is_admin ? h("td", {}, run.tenant_id) : null,
    h("td", {}, run.agent),
    h("td", {}, pill(run.status)),
    h("td", {}, run.cluster),
    h("td", { class: "muted" }, run.harness_version || ""),
    h("td", { class: "muted" }, run.policy_version || ""),
    h("td", {}, fmtTime(run.started_at)),
    h("td", { class: "num" }, run.steps),
    h("td", { class: "num" }, run.tokens),
    h("td", {}, run.success === null ? "" : run.success ? "yes" : "no"),
    h("td", {}, signals),
  );
}

export async function renderRuns(page, params, me) {
  const values = { ...params };
  const body = h("div", { id: "runs" });
  const status = h("p", { class: "muted", id: "runs-status" });
  page.append(h("h1", {}, "Trajectories"), filterForm(values, (next) => {
    window.location.hash = `#/runs?${new URLSearchParams(next)}`;
  }), status, body);
  const headers = ["run", me.is_admin ? "tenant" : null, "agent", "status", "cluster", "harness", "policy", "started", "steps", "tokens", "success", "run signals"].filter(Boolean);
  let cursor = null;
  let shown = null;
  const rows = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "Older runs");
  body.append(h("div", { class: "card" }, h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))), rows), more));
  const query = Object.fromEntries(FILTERS.filter((f) => values[f]).map((f) => [f, values[f]]));
  if (query.started_after) query.started_after = new Date(query.started_after).toISOString();

  let paged = false;
  async function refresh() {
    if (paged) {
      status.textContent = "live updates paused while older runs are shown (reload the page to resume)";
      return false;
    }
    const got = await api("/v1/dashboard/runs", { query: { ...query, limit: 50 } });
    const seen = JSON.stringify(got.data);
    if (seen !== shown) clear(rows).append(...got.data.map((r) => runRow(r, me))); // only when something changed
    shown = seen;
    cursor = got.next_cursor;
    more.hidden = !cursor;
    status.textContent = `${got.data.length} runs shown · refreshed ${new Date().toLocaleTimeString()} · live`;
    return true; // keep polling: new runs appear and running ones change
  }
  more.addEventListener("click", async () => {
    paged = true;
    const got = await api("/v1/dashboard/runs", { query: { ...query, limit: 50, cursor } });
    rows.append(...got.data.map((r) => runRow(r, me)));
    cursor = got.next_cursor;
    more.hidden = !cursor;
  });
  await refresh();
  return poller(refresh);
}

// ------------------------------------------------------------------------------------------- one run

function signalLine(s) {
  const comment = s.metadata?.comment ? ` — ${s.metadata.comment}` : "";
  const who = s.metadata?.key_id ? ` (key ${s.metadata.key_id})` : "";
  return h("li", { class: "signal", "data-kind": s.kind }, h("strong", {}, s.kind), ` ${fmtNum(s.value)} `, s.label ? pill(s.label) : "", ` ${s.source}`, who, s.confidence < 1 ? ` · confidence ${fmtNum(s.confidence)}` : "", text(comment));
}

function message(m) {
  const calls = (m.tool_calls || []).map((c) => h("div", { class: "tool-request" }, "→ calls ", h("code", {}, c.function.name), pre(c.function.arguments)));
  const content = typeof m.content === "string" || m.content === null ? m.content || "" : m.content;
  return h("div", { class: "msg" }, h("span", { class: "role" }, m.role), text(content), calls);
}

function stepBody(step) {
  if (step.kind === "llm_call") {
    const usage = step.usage ? `${step.usage.prompt_tokens} prompt + ${step.usage.completion_tokens} completion tokens` : "no usage reported";
    return [
      h("div", { class: "muted" }, `${step.model || ""} · ${usage} · ${fmtNum(step.latency_ms, 0)} ms`, step.time_to_first_token_ms ? ` · first token ${fmtNum(step.time_to_first_token_ms, 0)} ms` : "", step.policy_version ? ` · policy ${step.policy_version}` : ""),
      h("details", {}, h("summary", {}, `request: ${step.request_messages.length} messages`), step.request_messages.map(message), step.prompt ? pre(step.prompt) : ""),
      step.choices.map((c) => (c.message ? message(c.message) : pre(c.text || ""))),
      step.error ? h("p", { class: "error" }, `${step.error.type}: ${step.error.message}`) : "",
    ];
  }
  if (step.kind === "tool_call") {
    return [
      h("div", {}, h("code", {}, step.tool_name), " ", pill(step.status), step.latency_ms !== null ? ` · ${fmtNum(step.latency_ms, 0)} ms` : ""),
      h("div", { class: "muted" }, "arguments"), pre(step.arguments),
      h("div", { class: "muted" }, "result"), pre(step.result),
      step.error_class ? h("p", { class: "error" }, `${step.error_class}: ${step.error_message || ""}`) : "",
    ];
  }
  const { id, kind, started_at, ended_at, metadata, agent, parent_step_id, ...rest } = step;
  return [pre(rest)];
}

function feedbackForm(run, trajectory, onDone) {
  const comment = h("textarea", { name: "comment", placeholder: "What was right or wrong? (optional)" });
  const target = h("select", { name: "step_id" }, h("option", { value: "" }, "the whole run"), trajectory.steps.map((s, i) => h("option", { value: s.id }, `step ${i + 1}: ${s.kind}`)));
  const result = h("span", { class: "muted", id: "feedback-result" });
  const send = async (rating) => {
    const body = { rating, comment: comment.value };
    if (target.value) body.step_id = target.value;
    try {
      const got = await api(`/v1/dashboard/runs/${encodeURIComponent(run.id)}/feedback`, { method: "POST", body });
      result.className = "ok";
      result.textContent = `Thanks: stored as signal ${got.signal_id}`;
      comment.value = "";
      onDone();
    } catch (err) {
      result.className = "error";
      result.textContent = err.message;
    }
  };
  return h("div", { class: "card", id: "feedback" }, h("h2", {}, "Your feedback"), h("div", { class: "row" }, "On ", target), comment,
    h("div", { class: "row" }, h("button", { type: "button", id: "thumbs-up", onclick: () => send("up") }, "▲ Good"), h("button", { type: "button", id: "thumbs-down", onclick: () => send("down") }, "▼ Bad"), result));
}

export async function renderRun(page, params) {
  const holder = h("div", { id: "run" });
  page.append(h("p", {}, h("a", { href: "#/runs" }, "← all trajectories")), holder);
  let form = null;
  async function load() {
    const { run, trajectory } = await api(`/v1/dashboard/runs/${encodeURIComponent(params.id)}`);
    const bySteps = {};
    for (const s of trajectory.signals) if (s.step_id) (bySteps[s.step_id] ||= []).push(s);
    const runSignals = trajectory.signals.filter((s) => !s.step_id);
    form ||= feedbackForm(run, trajectory, load);
    clear(holder).append(
      h("div", { class: "card" },
        h("h1", {}, run.id, " ", pill(run.status)),
        h("div", { class: "muted" }, `agent ${run.agent} · tenant ${run.tenant_id} · cluster ${run.cluster} · harness ${run.harness_version || "-"} · policy ${run.policy_version || "-"}`),
        h("div", { class: "muted" }, `started ${fmtTime(run.started_at)}`, run.ended_at ? ` · ended ${fmtTime(run.ended_at)}` : "", ` · ${run.steps} steps · ${run.tokens} tokens`),
        trajectory.task_input ? h("details", { open: true }, h("summary", {}, "task"), pre(trajectory.task_input)) : "",
        h("h2", {}, "Signals on the run"),
        runSignals.length ? h("ul", { id: "run-signals" }, runSignals.map(signalLine)) : h("p", { class: "muted", id: "run-signals" }, "none yet")),
      form,
      h("div", { class: "card" }, h("h2", {}, `Steps (${trajectory.steps.length})`),
        trajectory.steps.map((s, i) => h("div", { class: `step ${s.kind}`, id: `step-${s.id}` },
          h("div", {}, h("strong", {}, `${i + 1}. ${s.kind}`), " ", h("span", { class: "muted" }, fmtTime(s.started_at))),
          stepBody(s),
          bySteps[s.id] ? h("ul", {}, bySteps[s.id].map(signalLine)) : ""))),
    );
    return trajectory.status === "running";
  }
  await load();
  return poller(load);
}

// ------------------------------------------------------------------------------------------- annotation queue

export async function renderFeedback(page) {
  const { data } = await api("/v1/dashboard/annotations");
  page.append(
    h("h1", {}, "Feedback"),
    h("div", { class: "card" },
      h("h2", {}, "Annotation queue"),
      h("p", { class: "muted" }, "Runs a judge was unsure about (low confidence or a middling score) that nobody has rated yet. Open one and leave a thumbs up or down."),
      data.length
        ? table(["run", "agent", "judge value", "confidence", "label", "judge"], data.map((q) => h("tr", {},
            h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(q.trajectory_id)}` }, q.trajectory_id)),
            h("td", {}, q.agent), h("td", { class: "num" }, fmtNum(q.value)), h("td", { class: "num" }, fmtNum(q.confidence)), h("td", {}, q.label || ""), h("td", {}, q.source || ""))))
        : h("p", { id: "queue-empty" }, "Nothing to review.")),
  );
}
