// Control plane (versions, lineage, diffs, decisions, canaries, admin actions) and learning over time.

import { api } from "./api.js";
import { fmtNum, fmtTime, h, pill, pre, table } from "./dom.js";

function versionCard(v) {
  return h("div", { class: "version", "data-version": v.id },
    h("div", {}, h("code", {}, v.id), " ", pill(v.state), h("span", { class: "muted" }, ` by ${v.created_by} · ${fmtTime(v.created_at)}`)),
    v.note ? h("div", { class: "muted" }, v.note) : "",
    h("div", { class: "muted" }, "lineage: ", v.lineage_chain.join(" ← ")),
    v.diff_from_active ? h("details", {}, h("summary", {}, "diff from active"), pre(v.diff_from_active)) : "",
    v.policy ? h("details", {}, h("summary", {}, "policy"), pre(v.policy)) : "",
    v.lineage && Object.keys(v.lineage).length ? h("details", {}, h("summary", {}, "provenance"), pre(v.lineage)) : "");
}

async function act(path, what, reload) {
  if (!window.confirm(`${what}? This changes what the agent serves and is written to the audit log.`)) return;
  try {
    await api(path, { method: "POST" });
  } catch (err) {
    window.alert(err.message);
  }
  reload();
}

function rolloutRow(r, canAct, reload) {
  const open = r.state === "running" || r.state === "paused";
  const last = r.analyses.length ? r.analyses[r.analyses.length - 1] : null;
  return h("tr", {},
    h("td", {}, h("code", {}, r.id)), h("td", {}, r.kind), h("td", {}, h("code", {}, r.candidate_version)), h("td", {}, pill(r.state)),
    h("td", { class: "num" }, `${Math.round(r.share * 100)}%`), h("td", { class: "num" }, r.analyses.length),
    h("td", {}, last ? h("details", {}, h("summary", {}, String(last.result || "analysis")), pre(last)) : ""),
    h("td", {}, canAct && open ? [
      h("button", { type: "button", class: "primary", onclick: () => act(`/v1/control/rollouts/${r.id}/promote`, `Promote ${r.candidate_version}`, reload) }, "Promote"), " ",
      h("button", { type: "button", class: "danger", onclick: () => act(`/v1/control/rollouts/${r.id}/rollback`, `Roll back ${r.candidate_version}`, reload) }, "Roll back"),
    ] : ""));
}

function decisionRow(d, canAct, reload) {
  return h("tr", { "data-decision": d.id },
    h("td", {}, fmtTime(d.created_at)), h("td", {}, d.lever), h("td", {}, pill(d.state)), h("td", {}, pill(d.verdict)),
    h("td", {}, d.rationale),
    h("td", {}, h("details", {}, h("summary", {}, "evidence, prediction, gates"),
      h("div", { class: "muted" }, "evidence"), pre(d.evidence), h("div", { class: "muted" }, "predicted effect"), pre(d.predicted),
      h("div", { class: "muted" }, "gate results"), pre(d.gates), d.verdict_detail ? [h("div", { class: "muted" }, "measured"), pre(d.verdict_detail)] : "")),
    h("td", {}, canAct && d.state === "awaiting_approval"
      ? h("button", { type: "button", class: "primary", onclick: () => act(`/v1/control/decisions/${d.id}/approve`, `Approve decision ${d.id}`, reload) }, "Approve")
      : ""));
}

export async function renderControl(page) {
  const reply = await api("/v1/dashboard/control");
  const { data, can_act: canAct } = reply;
  const reload = () => window.dispatchEvent(new HashChangeEvent("hashchange"));
  const none = reply.control_plane === false ? "This proxy runs without a control plane (--no-control)." : "No agents visible to this key yet.";
  page.append(h("h1", {}, "Control plane"), data.length ? "" : h("p", { class: "muted" }, none));
  for (const agent of data) {
    page.append(h("section", { class: "card agent", "data-agent": agent.agent },
      h("h2", {}, agent.agent),
      h("div", { class: "grid" }, ["harness", "policy"].map((kind) => h("div", {}, h("h3", {}, `${kind} versions`),
        agent.versions[kind].length ? agent.versions[kind].map(versionCard) : h("p", { class: "muted" }, "none")))),
      h("h3", {}, "Canaries and rollouts"),
      agent.rollouts.length ? table(["rollout", "kind", "candidate", "state", "share", "analyses", "last analysis", ""], agent.rollouts.map((r) => rolloutRow(r, canAct, reload))) : h("p", { class: "muted" }, "none"),
      h("h3", {}, "Decisions"),
      agent.decisions.length ? table(["when", "lever", "state", "verdict", "rationale", "details", ""], agent.decisions.map((d) => decisionRow(d, canAct, reload))) : h("p", { class: "muted" }, "none yet")));
  }
}

// ------------------------------------------------------------------------------------------- learning

const WINDOW = 20;

function rolling(points, pick) {
  const out = [];
  const win = [];
  for (const p of points) {
    const v = pick(p);
    if (v === null || v === undefined) { out.push(null); continue; }
    win.push(v);
    if (win.length > WINDOW) win.shift();
    out.push(win.reduce((a, b) => a + b, 0) / win.length);
  }
  return out;
}

function markers(changes) {
  return {
    hooks: {
      draw: [(u) => {
        const { ctx, bbox } = u;
        ctx.save();
        ctx.strokeStyle = "#b42318";
        ctx.setLineDash([4, 4]);
        for (const c of changes) {
          const x = u.valToPos(Date.parse(c.at) / 1000, "x", true);
          if (x < bbox.left || x > bbox.left + bbox.width) continue;
          ctx.beginPath(); ctx.moveTo(x, bbox.top); ctx.lineTo(x, bbox.top + bbox.height); ctx.stroke();
        }
        ctx.restore();
      }],
    },
  };
}

const COLORS = ["#2557d6", "#067647", "#8a3ffc", "#b98900", "#d12771", "#0e7c86", "#6b7280"];

function chart(agent) {
  const runs = agent.runs;
  const el = h("div", { class: "chart" });
  if (!runs.length) return h("p", { class: "muted" }, "No finished runs yet.");
  const xs = runs.map((r) => Date.parse(r.at) / 1000);
  const clusters = [...new Set(runs.map((r) => r.cluster))].slice(0, 6);
  const series = [{}, { label: "success (all)", stroke: COLORS[0], width: 2, scale: "rate" }, { label: "reward (all)", stroke: COLORS[6], dash: [6, 3], scale: "rate" }];
  const data = [xs, rolling(runs, (r) => (r.success === null ? null : Number(r.success))), rolling(runs, (r) => r.reward)];
  clusters.forEach((c, i) => {
    series.push({ label: `success: ${c}`, stroke: COLORS[(i + 1) % 6], width: 1, scale: "rate", spanGaps: true });
    data.push(rolling(runs, (r) => (r.cluster === c && r.success !== null ? Number(r.success) : null)).map((v, j) => (runs[j].cluster === c ? v : null)));
  });
  const opts = { width: Math.min(1100, window.innerWidth - 80), height: 280, series, scales: { rate: { range: [0, 1] } }, axes: [{}, { scale: "rate" }], plugins: [markers(agent.version_changes)] };
  // uPlot needs its element in the document to measure it.
  requestAnimationFrame(() => new window.uPlot(opts, data, el));
  return el;
}

function beforeAfter(d) {
  const clusters = d.measured.clusters || {};
  const rows = Object.entries(clusters).map(([c, v]) => h("tr", {}, h("td", {}, c), h("td", { class: "num" }, `${v.before[0]}/${v.before[1]}`), h("td", { class: "num" }, `${v.after[0]}/${v.after[1]}`), h("td", { class: "num" }, fmtNum(v.delta))));
  return h("tr", {}, h("td", {}, fmtTime(d.created_at)), h("td", {}, d.lever), h("td", {}, pill(d.state)), h("td", {}, pill(d.verdict)),
    h("td", {}, rows.length ? table(["cluster", "before", "after", "Δ"], rows) : h("span", { class: "muted" }, "not measured yet")));
}

export async function renderLearning(page) {
  const { data } = await api("/v1/dashboard/learning");
  page.append(h("h1", {}, "Learning"), data.length ? "" : h("p", { class: "muted" }, "No agents visible to this key yet."));
  for (const agent of data) {
    const measured = agent.decisions.filter((d) => d.verdict || Object.keys(d.before).length);
    page.append(h("section", { class: "card learning", "data-agent": agent.agent },
      h("h2", {}, agent.agent),
      h("p", { class: "muted" }, `Success and reward, rolling mean over ${WINDOW} runs, overall and per cluster; dashed red lines mark version changes (${agent.version_changes.length}).`),
      chart(agent),
      h("h3", {}, "Before and after each decision"),
      measured.length ? table(["when", "lever", "state", "verdict", "per cluster"], measured.map(beforeAfter)) : h("p", { class: "muted" }, "No decisions measured yet."),
      h("h3", {}, "Training runs"),
      agent.training.length
        ? table(["policy version", "state", "when", "loss", "KL", "tokens/s", "reward"], agent.training.map((t) => h("tr", {}, h("td", {}, h("code", {}, t.version)), h("td", {}, pill(t.state)), h("td", {}, fmtTime(t.created_at)),
            h("td", { class: "num" }, fmtNum(t.metrics.loss_mean, 4)), h("td", { class: "num" }, fmtNum(t.metrics.approx_kl_mean, 4)), h("td", { class: "num" }, fmtNum(t.metrics.tokens_per_s, 0)), h("td", { class: "num" }, fmtNum(t.metrics.reward_mean, 3)))))
        : h("p", { class: "muted" }, "No training runs recorded for this agent.")));
  }
}
