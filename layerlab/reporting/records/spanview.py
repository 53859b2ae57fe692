"""The viewer's section of a record's own spans: what the team's pipeline traced while it
answered (the private sample log's ``spans``, :mod:`layerlab.harness.targets.spans`).

Under the record's verdict, collapsed: the spans as a tree (parent before child, siblings by
start), each with its kind (OpenInference's ``openinference.span.kind`` where the team's
instrumentor set it: CHAIN, RETRIEVER, LLM, TOOL...), its start from the record's start and its
duration, an error status in red, the retrieval query and returned document ids, the LLM call's
model, and every attribute (the prompts included) one click further. The page that holds them
is built from a sample log, so it is already marked private.
"""

from __future__ import annotations

SCRIPT = r"""
// a retriever span's returned ids: OpenInference's document.id, else its metadata's doc_id or id
function spanDocs(a) {
  const out = [];
  for (let i = 0; a['retrieval.documents.' + i + '.document.id'] !== undefined || a['retrieval.documents.' + i + '.document.metadata'] !== undefined; i++) {
    let id = a['retrieval.documents.' + i + '.document.id'];
    if (id === undefined) {
      try { const m = JSON.parse(a['retrieval.documents.' + i + '.document.metadata']); id = m.doc_id ?? m.id ?? '?'; } catch (e) { id = '?'; }
    }
    out.push(id);
  }
  return out;
}
function spanLine(s) {
  const a = s.attributes || {};
  const kind = a['openinference.span.kind'] || a['gen_ai.operation.name'] || s.kind;
  const input = a['input.value'] ?? a['gen_ai.prompt'] ?? null;
  const model = a['llm.model_name'] || a['gen_ai.request.model'] || null;
  const docs = spanDocs(a);
  let t = '<code>' + esc(s.name) + '</code> <span class="badge">' + esc(kind) + '</span> ' +
    '<span class="muted">+' + Number(s.start_ms).toFixed(1) + ' ms, ' + Number(s.duration_ms).toFixed(1) + ' ms</span>' +
    (s.status === 'error' ? ' <b class="bad">error' + (s.message ? ': ' + esc(s.message) : '') + '</b>' : '') +
    (model ? ' · model <code>' + esc(model) + '</code>' : '');
  if (input !== null) t += '<div class="muted span-in">' + esc(String(input).slice(0, 300)) + '</div>';
  if (docs.length) t += '<div>returned ' + docs.map(d => '<code>' + esc(d) + '</code>').join(', ') + '</div>';
  const keys = Object.keys(a).sort();
  if (keys.length || (s.events || []).length) {
    t += '<details><summary>' + keys.length + ' attribute' + (keys.length === 1 ? '' : 's') +
      ((s.events || []).length ? ', ' + s.events.length + ' event' + (s.events.length === 1 ? '' : 's') : '') + '</summary><table><tbody>' +
      keys.map(k => '<tr><td><code>' + esc(k) + '</code></td><td><pre>' + esc(typeof a[k] === 'string' ? a[k] : JSON.stringify(a[k])) + '</pre></td></tr>').join('') +
      (s.events || []).map(e => '<tr><td>event <code>' + esc(e.name) + '</code> +' + Number(e.at_ms).toFixed(1) + ' ms</td><td><pre>' + esc(JSON.stringify(e.attributes)) + '</pre></td></tr>').join('') +
      '</tbody></table></details>';
  }
  return t;
}
function spansView(r) {
  if (!r.spans) return '';
  if (!r.spans.length) return '<p class="muted">your spans: none reached layerlab for this record' + (r.spans_note ? ' (' + esc(r.spans_note) + ')' : ' (is your pipeline instrumented with OpenTelemetry? docs/otel.md)') + '</p>';
  const ids = new Set(r.spans.map(s => s.span_id));
  const kids = {};
  for (const s of r.spans) { const p = s.parent && ids.has(s.parent) ? s.parent : ''; (kids[p] = kids[p] || []).push(s); }
  const tree = (p) => '<ul class="spans">' + (kids[p] || []).map(s => '<li>' + spanLine(s) + (kids[s.span_id] ? tree(s.span_id) : '') + '</li>').join('') + '</ul>';
  const total = r.spans.length;
  return '<details class="path spans-of"><summary>Your spans: ' + total + ' span' + (total === 1 ? '' : 's') + ' your pipeline traced while answering' +
    (r.dropped ? ' (' + r.dropped + ' more dropped)' : '') + '</summary>' +
    tree('') + '</details>';
}
"""  # noqa: E501  (inline JavaScript: the page must be one file)

CSS = """
ul.spans { margin: 2px 0; padding-left: 18px; } ul.spans li { margin: 3px 0; }
.span-in { margin-left: 12px; white-space: pre-wrap; max-height: 4.5em; overflow: hidden; }
details.spans-of pre { margin: 0; white-space: pre-wrap; max-width: 900px; }
"""
