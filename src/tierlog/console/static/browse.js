// The message browser (#/topics/T/P/records): a page of a partition's records from an offset or a time,
// read by the console with tierlog's consumer (remote-tier records too), read_committed unless asked
// otherwise. Keys, values and headers are shown as text, JSON or hex, chosen per column (docs/console.md).
import { h } from "preact";
import { useEffect, useState } from "preact/hooks";
import htm from "htm";
import { api } from "./app.js";

const html = htm.bind(h);
const FORMATS = ["auto", "text", "json", "hex"];

// A field in the chosen form; "auto" is JSON when the whole field parses, else text, else hex.
function shown(f, format) {
  if (f === null || f === undefined) return { text: "null", as: "null" };
  let as = format;
  if (as === "auto") as = f.json !== null ? "json" : f.text !== null ? "text" : "hex";
  if (as === "json" && f.json === null) as = f.text !== null ? "text" : "hex";  // not JSON: said by data-as
  if (as === "text" && f.text === null) as = "hex";  // not UTF-8
  const text = as === "json" ? f.json : as === "text" ? f.text : f.hex.replace(/(..)/g, "$1 ").trim();
  return { text, as };
}

function Field({ k, f, format }) {
  const s = shown(f, format);
  return html`<td data-k=${k} data-as=${s.as}><pre class="field">${s.text}</pre>${f && f.truncated
    && html`<div class="muted trunc">${f.size} bytes, the first ${f.hex.length / 2} shown</div>`}</td>`;
}

function Headers({ headers, format }) {
  if (!headers.length) return html`<td data-k="headers" class="muted"></td>`;
  return html`<td data-k="headers">${headers.map((x) => {
    const s = shown(x.value, format);
    return html`<div class="header" data-header=${x.key}><b>${x.key}</b>: <span data-as=${s.as}>${s.text}</span></div>`;
  })}</td>`;
}

function FormatPicker({ id, label, value, onChange }) {
  return html`<label>${label}<select id=${id} value=${value} onChange=${(e) => onChange(e.target.value)}>
    ${FORMATS.map((f) => html`<option value=${f}>${f}</option>`)}</select></label>`;
}

// ms since the epoch from digits, else from a date and time the browser reads (ISO 8601; local without a zone)
function parseTime(text) {
  const t = text.trim();
  if (/^\d+$/.test(t)) return Number(t);
  const ms = Date.parse(t);
  if (Number.isNaN(ms)) throw new Error(`${t} is not a time: give ms since the epoch or e.g. 2026-12-07T18:00:00`);
  return ms;
}

export function RecordsPage({ name, partition }) {
  const [query, setQuery] = useState({ offset: null });
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const [formats, setFormats] = useState({ key: "auto", value: "auto", headers: "auto" });
  const [form, setForm] = useState({ from: "offset", at: "", limit: "50", isolation: "read_committed" });
  useEffect(() => {
    let live = true;
    const q = new URLSearchParams({ topic: name, partition: String(partition), limit: form.limit || "50",
      isolation_level: form.isolation });
    if (query.offset !== null) q.set("offset", String(query.offset));
    if (query.timestamp !== undefined) q.set("timestamp", String(query.timestamp));
    setState((s) => ({ ...s, loading: true }));
    api(`/api/records?${q}`).then((data) => live && setState({ data, error: null, loading: false }),
      (e) => live && setState((s) => ({ data: s.data, error: e.message, loading: false })));
    return () => { live = false; };
  }, [name, partition, query]);
  const read = (e) => {
    e.preventDefault();
    try {
      if (form.from === "time") setQuery({ offset: null, timestamp: parseTime(form.at) });
      else setQuery({ offset: form.at.trim() === "" ? null : Number(form.at) });
    } catch (err) {
      setState((s) => ({ ...s, error: err.message }));
    }
  };
  const set = (k) => (e) => setForm({ ...form, [k]: e.target.value });
  const d = state.data;
  const last = d && d.records.length ? d.records[d.records.length - 1].offset : null;
  return html`<h1>Messages ${name}-${partition}</h1>
    <p><a href=${`#/topics/${encodeURIComponent(name)}/${partition}`}>timeline</a></p>
    <form class="inline" id="browse" onSubmit=${read}>
      <label>from<select name="from" value=${form.from} onChange=${set("from")}>
        <option value="offset">offset</option><option value="time">time</option></select></label>
      <label>${form.from === "time" ? "time (ms or 2026-12-07T18:00:00)" : "offset"}<input name="at" size="24"
        value=${form.at} onInput=${set("at")} /></label>
      <label>records<input name="limit" type="number" min="1" max="500" size="5" value=${form.limit} onInput=${set("limit")} /></label>
      <label>isolation<select name="isolation" value=${form.isolation} onChange=${set("isolation")}>
        <option value="read_committed">read_committed</option><option value="read_uncommitted">read_uncommitted</option>
      </select></label>
      <button type="submit" id="read">Read</button>
      <${FormatPicker} id="format-key" label="key as" value=${formats.key} onChange=${(v) => setFormats({ ...formats, key: v })} />
      <${FormatPicker} id="format-value" label="value as" value=${formats.value} onChange=${(v) => setFormats({ ...formats, value: v })} />
      <${FormatPicker} id="format-headers" label="headers as" value=${formats.headers} onChange=${(v) => setFormats({ ...formats, headers: v })} />
    </form>
    ${state.error && html`<div class="error" role="alert">${state.error}</div>`}
    ${!d && !state.error && html`<p class="muted">Loading…</p>`}
    ${d && html`
      <p id="page-info" data-start=${d.start_offset} data-next=${d.next_offset} data-end=${d.end_offset}>
        ${d.records.length ? `offsets ${d.records[0].offset} to ${last}` : "no records"}${" "}
        of ${d.log_start_offset} to ${d.end_offset - 1} (${d.isolation_level}${d.isolation_level === "read_committed"
          ? ": records of open or aborted transactions are not shown, the end is the last stable offset" : ""});${" "}
        ${d.read_bytes} bytes read, at most ${d.limit} records and ${d.max_bytes} bytes a page
        ${d.moved ? html` <span class="bad">(the offset asked for is outside the partition: started at ${d.start_offset})</span>` : ""}
        ${d.timestamp !== null ? html` <span id="found">${d.found_timestamp !== null
          ? `the first record at or after ${new Date(d.timestamp).toISOString()} is offset ${d.start_offset}`
          : "no record at or after that time"}</span>` : ""}</p>
      <div class="pager">
        <button id="previous" disabled=${state.loading || d.start_offset <= d.log_start_offset}
          onClick=${() => setQuery({ offset: d.previous_offset })}>← previous</button>
        <button id="next" disabled=${state.loading || d.next_offset >= d.end_offset}
          onClick=${() => setQuery({ offset: d.next_offset })}>next →</button></div>
      <table id="records"><thead><tr><th class="num">offset</th><th>timestamp</th><th>key</th><th>value</th>
        <th>headers</th></tr></thead>
      <tbody>${d.records.map((r) => html`<tr data-offset=${r.offset}>
        <td class="num">${r.offset}</td>
        <td data-k="timestamp" data-v=${r.timestamp}>${new Date(r.timestamp).toISOString()}<div class="muted">${r.timestamp_type}</div></td>
        <${Field} k="key" f=${r.key} format=${formats.key} /><${Field} k="value" f=${r.value} format=${formats.value} />
        <${Headers} headers=${r.headers} format=${formats.headers} /></tr>`)}</tbody></table>`}`;
}
