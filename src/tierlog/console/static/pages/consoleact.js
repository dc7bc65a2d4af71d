// The console's actions beyond create and delete (docs/console.md, "Actions"): a topic's settings altered
// (IncrementalAlterConfigs), a group's offsets reset (kafka-consumer-groups --reset-offsets: a preview,
// then the write) and a topic's tiered storage disabled (KIP-950, retain or delete). Each asks for
// confirmation and shows the outcome: the cluster's answer, or its Kafka error by name.
import { h } from "preact";
import { useRef, useState } from "preact/hooks";
import htm from "htm";
import { TOKEN_KEY, api, bytes, show, useAction } from "../app.js";

const html = htm.bind(h);

// The question, then the outcome, of one action; classes, not ids, so a page can hold several. Without a
// ``token`` given, the one the page keeps for the tab (the header's field) is read when confirmed.
function Confirm({ action, token }) {
  return html`
    ${action.pending && html`<div class="confirm">${action.pending.question}
      <button class="confirm-yes" onClick=${() => action.run(token ?? (sessionStorage.getItem(TOKEN_KEY) || ""))}>Confirm</button>
      <button onClick=${action.cancel}>Cancel</button></div>`}
    ${action.outcome && html`<div class=${`${action.outcome.ok ? "outcome" : "error"} action-outcome`}
      role="status">${action.outcome.text}</div>`}`;
}

// ------------------------------------------------------------------------------------------ alter configs

// The topic's settings that are not defaults, each editable: a topic override can be removed (DELETE), any
// setting given a new value (SET); the form also takes a setting not in the table.
export function TopicConfigs({ topic, configs, token }) {
  const action = useAction();
  const [key, setKey] = useState("");
  const [value, setValue] = useState("");
  const path = (q) => `/api/topic/configs?${new URLSearchParams({ topic, ...q })}`;
  const set = (e) => {
    e.preventDefault();
    if (!key.trim()) return;
    action.ask({
      path: path({ set: `${key.trim()}=${value.trim()}` }),
      question: `Set ${key.trim()} of topic ${topic} to "${value.trim()}"?`,
      done: (r) => `set ${key.trim()}=${value.trim()} on topic ${r.topic}; its overrides now: ${overrides(r)}`,
    });
  };
  const remove = (name) => action.ask({
    path: path({ delete: name }),
    question: `Remove the override ${name} of topic ${topic} (it goes back to the broker's value)?`,
    done: (r) => `removed ${name} from topic ${r.topic}; its overrides now: ${overrides(r)}`,
  });
  const edit = (c) => { setKey(c.name); setValue(c.sensitive ? "" : (c.value ?? "")); };
  return html`<section id="alter-configs">
    <table id="configs"><thead><tr><th>name</th><th>value</th><th>source</th><th></th></tr></thead>
    <tbody>${configs.map((c) => html`<tr data-config=${c.name}><td>${c.name}</td>
      <td data-k="value" data-v=${c.sensitive ? "" : show(c.value)}>${c.sensitive ? "(sensitive)" : show(c.value)}</td>
      <td>${c.source}</td>
      <td><button class="edit" onClick=${() => edit(c)}>Edit</button>
        ${c.source === "DYNAMIC_TOPIC_CONFIG" && html` <button class="remove" onClick=${() => remove(c.name)}>Remove…</button>`}</td>
    </tr>`)}</tbody></table>
    <form class="inline" id="config-form" onSubmit=${set}>
      <label>setting<input name="key" size="32" required value=${key} onInput=${(e) => setKey(e.target.value)} /></label>
      <label>value<input name="value" size="24" value=${value} onInput=${(e) => setValue(e.target.value)} /></label>
      <button type="submit">Set…</button></form>
    <${Confirm} action=${action} token=${token} /></section>`;
}

function overrides(r) {
  const entries = Object.entries(r.configs);
  return entries.length ? entries.map(([k, v]) => `${k}=${v}`).join(", ") : "none";
}

// ------------------------------------------------------------------------------------ disable tiering

// The topic's KIP-950 state (ENABLED, DISABLING, DISABLED), what a delete disablement has left (summed over
// the brokers, each deleting the partitions it leads) and the controls that disable tiering.
export function TieringPanel({ topic, tiering, token }) {
  const action = useAction();
  const most = useRef(0);  // the most left to delete seen while the page is open: the progress bar's 100 %
  const left = tiering ? tiering.remote_bytes_to_delete || 0 : 0;
  if (tiering && tiering.state === "DISABLING") most.current = Math.max(most.current, left);
  const disable = (remove) => action.ask({
    path: `/api/topic/disable-tiering?${new URLSearchParams({ topic, delete_remote: String(remove) })}`,
    question: remove
      ? `Disable tiered storage of topic ${topic} and DELETE its remote data? Reads below the local log start then fail with OFFSET_OUT_OF_RANGE.`
      : `Disable tiered storage of topic ${topic} and keep its remote data readable until retention expires it?`,
    done: (r) => `tiered storage of topic ${r.topic} is being disabled (policy ${r.policy}); now ${r.tiering ? r.tiering.state : "-"}`,
  });
  return html`<section id="tiering-panel"><h2>Tiered storage</h2>
    ${!tiering && html`<p class="muted">not tiered (remote.storage.enable=false)</p>`}
    ${tiering && html`<p>KIP-950 state <b data-k="tiering_state">${tiering.state}</b>, policy <span
      data-k="tiering_policy">${tiering.policy}</span>, epoch ${tiering.epoch}
      ${tiering.state === "DISABLED" && (tiering.policy === "delete"
        ? html` <span class="muted">(remote data deleted; the log starts at the local log start)</span>`
        : html` <span class="muted">(nothing is copied; remote data stays readable until retention expires it)</span>`)}</p>
      ${tiering.state === "DISABLING" && html`<p id="disable-progress">
        <span data-k="remote_segments_to_delete" data-v=${tiering.remote_segments_to_delete}>${show(tiering.remote_segments_to_delete)} remote
        segment(s)</span> (${bytes(tiering.remote_bytes_to_delete)}) left to delete
        ${most.current > 0 && html` <progress max=${most.current} value=${most.current - left}></progress>`}</p>`}
      ${tiering.last_error && html`<p class="bad">last error: ${tiering.last_error}</p>`}
      ${tiering.state === "ENABLED" && html`<button id="disable-retain" onClick=${() => disable(false)}>Disable tiering, keep remote data…</button>
        <button id="disable-delete" onClick=${() => disable(true)}>Disable tiering, delete remote data…</button>`}
      ${tiering.state === "DISABLED" && tiering.policy === "retain" && html`<button id="disable-delete"
        onClick=${() => disable(true)}>Delete the retained remote data…</button>`}`}
    <${Confirm} action=${action} token=${token} /></section>`;
}

// --------------------------------------------------------------------------------------- reset offsets

// "2026-12-07T18:30:00.000" (local time, as kafka-consumer-groups --to-datetime takes it; a Z or an offset
// may follow) or milliseconds since the epoch; NaN when neither.
function timestamp(text) {
  const t = text.trim();
  return /^\d+$/.test(t) ? Number(t) : Date.parse(t);
}

// kafka-consumer-groups --reset-offsets: where to (earliest, latest, an offset, a time), which partitions
// (every one the group committed, or every one of a topic), a preview (its --dry-run, no token needed),
// then the write, which the broker refuses while the group has members.
export function ResetOffsets({ group, g }) {
  const action = useAction();
  const [form, setForm] = useState({ to: "earliest", value: "", topic: "" });
  const [preview, setPreview] = useState(null);
  const topics = [...new Set(g.partitions.map((p) => p.topic))].sort();
  const change = (k) => (e) => { setForm({ ...form, [k]: e.target.value }); setPreview(null); };
  const query = () => {
    const q = { group, to: form.to };
    if (form.to === "offset") q.value = form.value.trim();
    if (form.to === "timestamp") {
      const ms = timestamp(form.value);
      if (Number.isNaN(ms)) throw new Error(`"${form.value}" is not a time: give 2026-12-07T18:30:00.000 or milliseconds`);
      q.value = String(ms);
    }
    if (form.topic) q.topic = form.topic;
    return new URLSearchParams(q);
  };
  const ask = async (e) => {
    e.preventDefault();
    try {
      const q = query();
      setPreview({ loading: true });
      setPreview({ query: q, plan: await api(`/api/group/reset-offsets?${q}`) });
    } catch (err) {
      setPreview({ error: err.message });
    }
  };
  const execute = () => action.ask({
    path: `/api/group/reset-offsets?${preview.query}`,
    question: `Reset the offsets of group ${group} on ${preview.plan.partitions.length} partition(s) to ${describe(preview.plan)}?`,
    done: (r) => {
      setPreview(null);  // its committed offsets are the old ones now; the outcome lists what was written
      return `reset group ${r.group}: ${r.partitions.map((p) => `${p.topic}-${p.partition} to ${p.new_offset}`).join(", ")}`;
    },
  });
  return html`<section id="reset-offsets"><h2>Reset offsets</h2>
    <form class="inline" id="reset-form" onSubmit=${ask}>
      <label>to<select name="to" value=${form.to} onChange=${change("to")}>
        <option value="earliest">earliest</option><option value="latest">latest</option>
        <option value="offset">an offset</option><option value="timestamp">a time</option></select></label>
      ${form.to === "offset" && html`<label>offset<input name="value" type="number" min="0" required value=${form.value}
        onInput=${change("value")} /></label>`}
      ${form.to === "timestamp" && html`<label>time (YYYY-MM-DDTHH:mm:SS.sss, local, or ms)<input name="value" size="26"
        required value=${form.value} onInput=${change("value")} /></label>`}
      <label>partitions<select name="topic" value=${form.topic} onChange=${change("topic")}>
        <option value="">every one the group committed</option>
        ${topics.map((t) => html`<option value=${t}>every one of topic ${t}</option>`)}</select></label>
      <button type="submit">Preview</button></form>
    ${preview && preview.loading && html`<p class="muted">asking…</p>`}
    ${preview && preview.error && html`<div class="error" role="alert" id="reset-error">${preview.error}</div>`}
    ${preview && preview.plan && html`<p class="muted">The new offsets as they are now (nothing written yet; the
        reset computes them again when it runs, as kafka-consumer-groups --execute does):</p>
      <table id="reset-preview"><thead><tr><th>topic</th><th class="num">partition</th><th class="num">committed</th>
        <th class="num">new offset</th></tr></thead>
      <tbody>${preview.plan.partitions.map((p) => html`<tr data-tp=${`${p.topic}-${p.partition}`}><td>${p.topic}</td>
        <td class="num">${p.partition}</td><td class="num" data-k="current_offset" data-v=${show(p.current_offset)}>${show(p.current_offset)}</td>
        <td class="num" data-k="new_offset" data-v=${p.new_offset}>${p.new_offset}</td></tr>`)}</tbody></table>
      <button id="reset-execute" onClick=${execute}>Reset offsets…</button>`}
    <${Confirm} action=${action} /></section>`;
}

function describe(plan) {
  if (plan.to === "offset") return `offset ${plan.value} (each within its partition's records)`;
  if (plan.to === "timestamp") return `the first record at or after ${new Date(plan.value).toISOString()}`;
  return plan.to;
}
