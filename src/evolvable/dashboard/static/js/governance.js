// Governance (admin keys): tenants, their keys (issue / revoke), the audit log, purge requests.

import { api } from "./api.js";
import { clear, fmtTime, h, pill, pre, table } from "./dom.js";

function reload() {
  window.dispatchEvent(new HashChangeEvent("hashchange"));
}

function keysPanel(tenant) {
  const holder = h("div", { class: "keys" });
  const issued = h("div", {});
  const label = h("input", { name: "label", placeholder: "label" });
  const admin = h("input", { type: "checkbox", name: "is_admin" });
  async function load() {
    const { data } = await api(`/v1/admin/tenants/${encodeURIComponent(tenant.id)}/keys`);
    clear(holder).append(table(["key id", "label", "admin", "created", "revoked", ""], data.map((k) => h("tr", {},
      h("td", {}, h("code", {}, k.id)), h("td", {}, k.label), h("td", {}, k.is_admin ? "yes" : ""), h("td", {}, fmtTime(k.created_at)), h("td", {}, fmtTime(k.revoked_at)),
      h("td", {}, k.revoked_at ? "" : h("button", { type: "button", class: "danger", onclick: async () => {
        if (!window.confirm(`Revoke key ${k.id}? Agents using it stop working at once.`)) return;
        await api(`/v1/admin/tenants/${encodeURIComponent(tenant.id)}/keys/${encodeURIComponent(k.id)}`, { method: "DELETE" });
        load();
      } }, "Revoke"))))));
  }
  const form = h("form", { class: "row" }, label, h("label", {}, admin, " admin"), h("button", { type: "submit" }, "Issue key"), issued);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const got = await api(`/v1/admin/tenants/${encodeURIComponent(tenant.id)}/keys`, { method: "POST", body: { label: label.value, is_admin: admin.checked } });
    clear(issued).append(h("span", { class: "ok" }, "New key (shown once): "), h("code", {}, got.key || got.api_key || JSON.stringify(got)));
    load();
  });
  load();
  return h("details", {}, h("summary", {}, "keys"), holder, form);
}

function purgeForm() {
  const fields = ["tenant_id", "end_user", "trajectory_id"].map((n) => h("label", {}, n.replace("_", " "), h("input", { name: n })));
  const result = h("div", {});
  const form = h("form", { class: "filters" }, fields, h("button", { type: "submit", class: "danger" }, "Purge"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = Object.fromEntries([...new FormData(form)].filter(([, v]) => v !== ""));
    if (!Object.keys(body).length || !window.confirm(`Erase every record matching ${JSON.stringify(body)}? This cannot be undone.`)) return;
    try {
      clear(result).append(pre(await api("/v1/admin/purge", { method: "POST", body })));
    } catch (err) {
      clear(result).append(h("p", { class: "error" }, err.message));
    }
  });
  return [form, result];
}

export async function renderGovernance(page, params, me) {
  page.append(h("h1", {}, "Governance"));
  if (!me.is_admin) {
    page.append(h("p", { class: "muted" }, "Governance needs an admin key."));
    return;
  }
  const [{ data: tenants }, { data: audit }, { data: purges }] = await Promise.all([
    api("/v1/admin/tenants"),
    api("/v1/admin/audit", { query: { limit: 100, action: params.action } }),
    api("/v1/admin/audit", { query: { limit: 50, action: "purge" } }),
  ]);
  const tenantForm = h("form", { class: "row" }, h("input", { name: "id", placeholder: "new tenant id", required: true }), h("button", { type: "submit" }, "Create tenant"));
  tenantForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    await api("/v1/admin/tenants", { method: "POST", body: { id: new FormData(tenantForm).get("id") } });
    reload();
  });
  const actions = ["", "read", "export", "purge", "policy_change", "key_issued", "key_revoked", "redaction_failed", "retention", "control_action"];
  const actionFilter = h("select", { onchange: (e) => { window.location.hash = `#/governance?action=${e.target.value}`; } }, actions.map((a) => h("option", { value: a, selected: (params.action || "") === a }, a || "all actions")));
  page.append(
    h("div", { class: "card", id: "tenants" }, h("h2", {}, "Tenants"),
      table(["tenant", "name", "capture", "retention (days)", "redact upstream", ""], tenants.map((t) => h("tr", {},
        h("td", {}, h("code", {}, t.id)), h("td", {}, t.name || ""), h("td", {}, pill(t.capture)), h("td", {}, t.retention_days ?? "∞"), h("td", {}, t.redact_upstream ? "yes" : ""), h("td", {}, keysPanel(t))))),
      tenantForm),
    h("div", { class: "card" }, h("h2", {}, "Purge requests"), purgeForm(),
      purges.length ? table(["when", "by", "tenant", "target", "details"], purges.map((e) => h("tr", {}, h("td", {}, fmtTime(e.at)), h("td", {}, e.actor), h("td", {}, e.tenant_id || ""), h("td", {}, e.target), h("td", {}, pre(e.details))))) : h("p", { class: "muted" }, "No purges on record.")),
    h("div", { class: "card", id: "audit" }, h("h2", {}, "Audit log"), actionFilter,
      table(["when", "actor", "tenant", "action", "target", "details"], audit.map((e) => h("tr", {}, h("td", {}, fmtTime(e.at)), h("td", {}, e.actor), h("td", {}, e.tenant_id || ""), h("td", {}, e.action), h("td", {}, e.target), h("td", {}, Object.keys(e.details).length ? pre(e.details) : ""))))),
  );
}
