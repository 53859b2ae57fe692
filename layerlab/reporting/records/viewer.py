"""``layerlab view``: a self-contained HTML viewer of per-sample logs and archives.

Choose the run, model, scenario and mitigation arm; filter by outcome and diagnostic; each record
shows its verdict first (outcome, S = E ∧ R ∧ G ∧ V, the diagnostic, then one reason per label) and
its path below, collapsed: the question, the evidence the reader received, the contract's decision
and the raw reply. From a sample log (``run live --sample-log``) every field is there; from an
archive the labels are (archives hold no replies), with each task's public question taken from
the corpus and the record's evidence path recomputed from the corpus, checked against what the
archive kept (:mod:`layerlab.reporting.records.evidence`; in its own element of the page, each shared
path and text once). A page built from a sample log holds replies and expected answers: it is private, and
says so at its top.

The page is one file: every record travels as JSON inside it and a small inline script renders
them a page at a time (:data:`PAGE_SIZE`; no CDN, no network). The filters and the page live in the
address, each choice a history entry: a view can be linked, and Back returns to the previous one.
A filter that excludes everything says which, and offers to clear it. The same inputs give the
same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from layerlab import archive
from layerlab.archive import samplelog
from layerlab.reporting.format import page
from layerlab.reporting.records import spanview

PAGE_SIZE = 50  # records a page (every record is in the page's data; the pager steps through them)

SCRIPT = r"""
const DATA = JSON.parse(document.getElementById('records').textContent);
const EV = JSON.parse(document.getElementById('evidence').textContent);
const $ = (id) => document.getElementById(id);
const FIELDS = ['run_id', 'model', 'scenario', 'mitigation', 'outcome', 'diagnostic'];
const MEANING = %MEANINGS%;
const LABELS = [['S', 'success'], ['E', 'exact_match'], ['R', 'retrieval_ok'], ['G', 'citation_ok'], ['V', 'schema_ok']];
function esc(s) { return String(s).replace(/[&<>"']/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c])); }
function unitOf(r) { return r.provider + '/' + r.model; }
function values(f) {
  const seen = new Set(DATA.map(r => f === 'model' ? unitOf(r) : String(r[f])));
  return Array.from(seen).sort();
}
const SCENARIOS = JSON.parse(document.getElementById('scenario-options').textContent);
function fill() {
  for (const f of FIELDS) {
    const sel = $('f-' + f);
    const opts = f === 'scenario' ? SCENARIOS : values(f).map(v => [v, v]);
    sel.innerHTML = '<option value="">all (' + opts.length + ')</option>' +
      opts.map(([v, label]) => '<option value="' + esc(v) + '">' + esc(label) + '</option>').join('');
    sel.addEventListener('change', () => go(current(), 1));
  }
}
function agentLine(a) {
  return '<p class="agent"><b>agent</b>: ' + esc(a.protocol) + ' · ' + a.steps + ' step' + (a.steps === 1 ? '' : 's') + ' · ' +
    a.tool_calls + ' tool call' + (a.tool_calls === 1 ? '' : 's') + ' · ' +
    '<span class="' + (a.invalid_calls ? 'bad' : '') + '">' + a.invalid_calls + ' invalid</span> · ' +
    a.retries_after_fault + ' retr' + (a.retries_after_fault === 1 ? 'y' : 'ies') + ' after a fault · ' +
    (a.step_limit ? '<span class="bad">step limit reached</span>' : 'within the step limit') + '</p>';
}
function callLine(c) {
  const ok = c.valid && (c.status === 'ok' || c.outcome === 'ok');
  let s = '<code>' + esc(c.tool) + (c.args !== undefined ? ' ' + esc(c.args) : '') + '</code> → <span class="badge ' + (ok ? 'ok' : 'bad') + '">' +
    esc(c.outcome === c.status ? c.status : c.status + ' · ' + c.outcome) + '</span>' +
    (c.valid ? '' : ' <b class="bad">invalid call</b>') + (c.after_fault ? ' <span class="muted">(after a fault)</span>' : '') +
    (c.message ? ' <span class="muted">' + esc(c.message) + '</span>' : '');
  if (c.n_docs !== undefined) s += ' · ' + c.n_docs + ' document' + (c.n_docs === 1 ? '' : 's');
  if (c.docs && c.docs.length) {
    s += '<table><thead><tr><th>doc</th><th>status</th><th>year</th><th>v</th><th>session</th><th>truncated</th></tr></thead><tbody>' +
      c.docs.map(d => '<tr><td><code>' + esc(d.doc_id) + '</code></td><td>' + esc(d.status) + '</td><td>' + esc(d.effective_year) + '</td><td>' +
        esc(d.version) + '</td><td>' + esc(d.session_id ?? '—') + '</td><td>' + (d.truncated ? 'yes' : '') + '</td></tr>').join('') + '</tbody></table>' +
      '<details><summary>evidence text (excerpts)</summary><ul>' + c.docs.map(d => '<li><code>' + esc(d.doc_id) + '</code> ' + esc(d.excerpt) + '</li>').join('') + '</ul></details>';
  } else if (c.docs) { s += ' · no documents'; }
  return s;
}
function steps(r) {
  const n = r.steps.reduce((a, t) => a + t.calls.length, 0);
  let s = '<details class="path steps" open><summary>Steps: ' + r.steps.length + ' tool-calling turn' + (r.steps.length === 1 ? '' : 's') + ', ' + n + ' call' + (n === 1 ? '' : 's') + '</summary><ol>';
  for (const t of r.steps) {
    s += '<li value="' + t.step + '">' + (t.text ? '<span class="muted">' + esc(t.text) + '</span><br>' : '') +
      (t.calls.length ? t.calls.map(callLine).join('<br>') : '<span class="muted">no tool call</span>') + '</li>';
  }
  if (r.final) {
    s += '<li value="' + r.final.step + '"><b>' + esc(r.final.parse) + '</b>' +
      (r.parsed ? ': ' + esc(r.parsed.status) + (r.parsed.answer !== null ? ' — answer <code>' + esc(r.parsed.answer) + '</code>' : '') +
        ' citations ' + esc((r.parsed.citations || []).join(', ') || 'none') : '') +
      (r.final.reply !== null ? '<details><summary>raw reply</summary><pre>' + esc(r.final.reply) + '</pre></details>' : '') + '</li>';
  }
  return s + '</ol></details>';
}
// An archived record's evidence, recomputed from the corpus (layerlab/reporting/records/evidence.py):
// shared paths, reasons and texts are in the page once; a record holds their indices.
const T = (v) => (typeof v === 'number' ? EV.texts[v] : v);
function docTable(ds) {
  return '<table><thead><tr><th>rank</th><th>doc</th><th>title</th><th>status</th><th>year</th><th>v</th><th>domain</th><th>owner</th><th>scope</th><th>tenant</th><th>session</th><th>truncated</th></tr></thead><tbody>' +
    ds.map((d, i) => '<tr><td>' + esc(d.rank ?? i + 1) + '</td><td><code>' + esc(d.doc_id) + '</code></td><td>' + esc(d.title) + '</td><td>' + esc(d.status) + '</td><td>' + esc(d.effective_year) +
      '</td><td>' + esc(d.version) + '</td><td>' + esc(d.domain) + '</td><td>' + esc(d.owner) + '</td><td>' + esc(d.access_scope) + '</td><td>' + esc(d.tenant) + '</td><td>' + esc(d.session_id ?? '—') +
      '</td><td>' + (d.truncated ? 'yes' : '') + '</td></tr>').join('') + '</tbody></table>' +
    '<details><summary>evidence text</summary><ul>' + ds.map(d => '<li><code>' + esc(d.doc_id) + '</code> ' + esc(T(d.text)) + '</li>').join('') + '</ul></details>';
}
function recomputed(x, r) {
  const P = (v) => (typeof v === 'number' ? EV.parts[v] : v);
  const q = x.path === null ? null : EV.paths[x.path];
  const p = q && {...q, faults: P(q.faults), retrieved: P(q.retrieved), reader: P(q.reader), actions: P(q.actions)};
  let s = '<div class="recomputed"><p><span class="badge recomputed">' + esc(EV.label) + '</span> <span class="muted">' + esc(EV.note) + '</span></p>' +
    '<p class="' + (x.status === 'match' ? 'muted' : 'bad') + '"><b>check</b>: ' + esc(EV.checks[x.check]) + '</p>';
  if (!p) return s + '</div>';
  if (!p.calls) s += '<p class="muted">the same path in a terminal: <code>layerlab explore --task ' + esc(r.task_id) + ' --scenario ' + esc(r.scenario) + ' --mitigation ' + esc(r.mitigation) + ' --retriever ' + esc(p.retriever) + ' --model ' + esc(unitOf(r)) + '</code></p>';
  if (p.faults) s += '<p><b>what the fault did</b></p><ul>' + p.faults.map(f => '<li>' + esc(f) + '</li>').join('') + '</ul>';
  if (p.retrieved) {
    s += '<p><b>retrieved</b> (' + esc(p.retriever) + ', before the transport faults)</p><table><thead><tr><th>rank</th><th>doc</th><th>status</th><th>year</th><th>v</th><th>domain</th><th>session</th><th>score</th></tr></thead><tbody>' +
      p.retrieved.map(d => '<tr><td>' + d.rank + '</td><td><code>' + esc(d.doc_id) + '</code></td><td>' + esc(d.status) + '</td><td>' + esc(d.effective_year) + '</td><td>' + esc(d.version) +
        '</td><td>' + esc(d.domain) + '</td><td>' + esc(d.session_id ?? '—') + '</td><td>' + Number(d.score).toFixed(3) + '</td></tr>').join('') + '</tbody></table>';
  }
  for (const [k, what] of [['sent', 'tool payload as sent'], ['received', 'as received (before the contract)'], ['accepted', 'after the contract']]) {
    if (p[k] !== undefined) s += '<details><summary>' + what + '</summary><pre>' + esc(p[k] === null ? '(none: the contract let nothing through)' : T(p[k])) + '</pre></details>';
  }
  if (p.calls) {
    s += '<p><b>tool calls</b> (' + esc(p.retriever) + '; replayed through the record\'s faulted tools)</p><ol>' + p.calls.map(c =>
      '<li><code>' + esc(c.tool) + '</code> → ' + esc(c.outcome) + (c.doc_ids.length ? ' · ' + c.doc_ids.map(esc).join(', ') : '') +
      (c.lost ? ' <b class="bad">not recoverable</b>: ' + esc(c.lost) : ' <span class="muted">' + esc(c.replayed) + '</span>') +
      (c.error ? ' <span class="muted">' + esc(c.error) + '</span>' : '') + (c.docs && c.docs.length ? docTable(c.docs) : '') + '</li>').join('') + '</ol>';
  }
  s += '<p><b>contract</b>: ' + esc(p.contract.outcome) + '</p>';
  if (p.contract.edits.length) s += '<p>repair edits: ' + p.contract.edits.map(esc).join('; ') + (p.contract.more_edits ? '; … ' + p.contract.more_edits + ' more' : '') + '</p>';
  if (p.contract.problems.length) s += '<p>contract problems: ' + p.contract.problems.map(esc).join('; ') + '</p>';
  if (p.actions.length) s += '<p>mitigation: ' + p.actions.map(esc).join('; ') + '</p>';
  if (p.reader) {
    s += '<p><b>what reached the reader</b> (' + (p.calls ? 'every document the calls delivered: what R and G are scored over' : 'the prompt\'s evidence block') + '): search status ' + esc(p.reader.tool_status) +
      (p.reader.tool_error ? ' · search error ' + esc(p.reader.tool_error) : '') + ' · request session ' + esc(p.reader.session_id) + '</p>' +
      (p.reader.evidence.length ? docTable(p.reader.evidence) : '<p class="muted">(no results)</p>');
  } else if (!p.calls || !(p.lost || []).length) {
    s += '<p class="muted">nothing reached the reader: the record ended before it</p>';
  }
  return s + '</div>';
}
function chip(name, v) { return '<span class="badge ' + (v ? 'ok' : 'bad') + '">' + name + ' ' + (v ? '✓' : '✗') + '</span>'; }
function card(r) {
  const v = r.verdict || {};
  const chips = LABELS.map(([n, k]) => chip(n, v[k])).join(' ');
  const head = '<span class="badge outcome ' + esc(r.outcome) + '" title="' + esc(MEANING[r.outcome] || '') + '">' + esc(r.outcome) + '</span> ' + chips +
    ' <span class="badge">' + esc(r.diagnostic) + '</span> <code>' + esc(r.task_id) + '</code> ' +
    (r.replicate ? '<span class="muted">rep ' + r.replicate + '</span> ' : '') +
    '<span class="muted">' + esc(unitOf(r)) + ' · ' + esc(r.scenario) + ' · ' + esc(r.mitigation) + '</span>' +
    (r.question ? '<div class="q">' + esc(r.question) + '</div>' : '');
  let verdict = '<div class="verdict"><h4>Verdict</h4><ul>';
  const rs = r.reasons || (r.recomputed && r.recomputed.reasons !== null ? EV.reasons[r.recomputed.reasons] : null);
  if (rs) { for (const k of ['S', 'E', 'R', 'G', 'V', 'grounded', 'answer']) if (rs[k] !== undefined) verdict += '<li><b>' + k + '</b> ' + esc(rs[k]) + '</li>'; }
  verdict += '<li>grounded ' + esc(v.grounded) + ' · grounded (cited) ' + esc(v.grounded_cited) + ' · GF ' + esc(v.grounded_false_positive) +
    ' · contained ' + esc(v.contained) + ' · token F1 ' + esc(v.token_f1) + ' · safe resolution ' +
    esc(v.safe_resolution) + ' · answered ' + esc(v.answered) + ' · abstained ' + esc(v.abstained) + '</li></ul>';
  if (r.parsed) verdict += '<p><b>reply</b>: ' + esc(r.parsed.status) + (r.parsed.answer !== null ? ' — answer <code>' + esc(r.parsed.answer) + '</code>' : '') +
    ' citations ' + esc((r.parsed.citations || []).join(', ') || 'none') + (r.parsed.reason ? ' — reason: ' + esc(r.parsed.reason) : '') + '</p>';
  if (r.expected !== undefined) verdict += '<p><b>expected</b>: <code>' + esc(r.expected) + '</code></p>';
  if (r.agent) verdict += agentLine(r.agent);
  verdict += '</div>' + (r.steps ? steps(r) : '') + spansView(r);
  let path = '<details class="path"><summary>Path: stage ' + esc(r.stage) + (r.contract ? ', contract ' + esc(r.contract.outcome) : '') + '</summary>';
  path += '<p>policy <code>' + esc(r.policy_id) + '</code>' + (r.domain ? ' · domain ' + esc(r.domain) : '') + ' · run <code>' + esc(r.run_id) + '</code>' +
    (r.tool_status ? ' · tool status ' + esc(r.tool_status) : '') + '</p>';
  if (r.contract) {
    if (r.contract.edits.length) path += '<p>repair edits: ' + r.contract.edits.map(esc).join('; ') + '</p>';
    if (r.contract.problems.length) path += '<p>contract problems: ' + r.contract.problems.map(esc).join('; ') + '</p>';
  }
  if (r.mitigation_actions && r.mitigation_actions.length) path += '<p>mitigation: ' + r.mitigation_actions.map(esc).join('; ') + '</p>';
  if (r.evidence && r.evidence.length) {
    path += '<table><thead><tr><th>rank</th><th>doc</th><th>domain</th><th>status</th><th>year</th><th>v</th><th>session</th><th>truncated</th></tr></thead><tbody>' +
      r.evidence.map(e => '<tr><td>' + e.rank + '</td><td><code>' + esc(e.doc_id) + '</code></td><td>' + esc(e.domain) + '</td><td>' + esc(e.status) +
        '</td><td>' + e.effective_year + '</td><td>' + e.version + '</td><td>' + esc(e.session_id) + '</td><td>' + (e.truncated ? 'yes' : '') + '</td></tr>').join('') +
      '</tbody></table>';
  } else if (r.evidence) { path += '<p class="muted">no evidence reached the reader</p>'; }
  if (r.reply !== undefined && r.reply !== null) path += '<details><summary>raw reply</summary><pre>' + esc(r.reply) + '</pre></details>';
  if (r.reply === undefined && r.recomputed) path += recomputed(r.recomputed, r) + '<p class="muted">archive record: no reply is kept (run with --sample-log to see it)</p>';
  else if (r.reply === undefined) path += '<p class="muted">archive record: no reply or evidence is kept (run with --sample-log to see them)</p>';
  path += '</details>';
  return '<details class="rec"><summary>' + head + '</summary>' + verdict + path + '</details>';
}
// The address holds the view (#scenario=wrong_session&outcome=grounded_wrong&page=2): a view can
// be linked, and every choice is a history entry, so Back and Forward (hashchange) step through them.
let page = 1;
function current() { const want = {}; for (const f of FIELDS) want[f] = $('f-' + f).value; return want; }
function hashOf(want, p) {
  const h = new URLSearchParams();
  for (const f of FIELDS) if (want[f]) h.set(f, want[f]);
  if (p > 1) h.set('page', String(p));
  return h.toString();
}
function go(want, p) {
  const next = hashOf(want, p);
  if (next === location.hash.slice(1)) { sync(); render(); } else { location.hash = next; }
}
function sync() {
  const h = new URLSearchParams(location.hash.slice(1));
  for (const f of FIELDS) {
    const sel = $('f-' + f), v = h.get(f) || '';
    if (v && !Array.from(sel.options).some(o => o.value === v)) {
      sel.insertAdjacentHTML('beforeend', '<option data-absent="1">' + esc(v) + '</option>');
    }
    sel.value = v;
  }
  const p = parseInt(h.get('page') || '1', 10);
  page = p > 0 ? p : 1;
}
const matches = (r, want, skip) => FIELDS.every(f => f === skip || !want[f] || valueOf(r, f) === want[f]);
function valueOf(r, f) { return f === 'model' ? unitOf(r) : String(r[f]); }
function label(f) { return f === 'run_id' ? 'run' : f; }
function emptyState(want) {
  // which filter excludes everything, and what clearing it would show
  const active = FIELDS.filter(f => want[f]);
  const said = active.map(f => label(f) + ' = ' + esc(want[f]));
  const absent = active.filter(f => !DATA.some(r => valueOf(r, f) === want[f]));
  const why = absent.length
    ? 'No record has ' + absent.map(f => label(f) + ' = ' + esc(want[f])).join(' or ') + '.'
    : 'No record has ' + said.slice(0, -1).join(', ') + ' and ' + said[said.length - 1] + ' together.';
  const clear = active.map(f => [f, DATA.filter(r => matches(r, want, f)).length]).filter(([, n]) => n > 0)
    .map(([f, n]) => '<button type="button" data-clear="' + f + '">clear ' + label(f) + ' (' + n + ' records)</button>');
  return '<b>0 of ' + DATA.length + ' records.</b> ' + why + ' ' + clear.join(' ') +
    ' <button type="button" data-clear="*">clear all filters</button>';
}
function pager(pages) {
  if (pages <= 1) return '';
  const b = (p, text, off) => '<button type="button" data-page="' + p + '"' + (off ? ' disabled' : '') + '>' + text + '</button>';
  return b(1, '« first', page === 1) + b(page - 1, '‹ previous', page === 1) +
    ' <span>page ' + page + ' of ' + pages + '</span> ' + b(page + 1, 'next ›', page === pages) + b(pages, 'last »', page === pages);
}
function render() {
  const want = current();
  const hits = DATA.filter(r => matches(r, want));
  const pages = Math.max(1, Math.ceil(hits.length / PAGE));
  if (page > pages) page = pages;
  const lo = (page - 1) * PAGE, hi = Math.min(hits.length, lo + PAGE);
  if (!hits.length) {
    $('count').innerHTML = emptyState(want);
    $('list').innerHTML = '';
    $('pager-top').innerHTML = $('pager-bottom').innerHTML = '';
    return;
  }
  const counts = {};
  for (const r of hits) counts[r.outcome] = (counts[r.outcome] || 0) + 1;
  $('count').textContent = hits.length + ' of ' + DATA.length + ' records' + (pages > 1 ? ' (showing ' + (lo + 1) + '–' + hi + ')' : '') +
    ' — ' + Object.keys(counts).sort().map(k => k + ' ' + counts[k]).join(', ');
  $('list').innerHTML = hits.slice(lo, hi).map(card).join('');
  $('pager-top').innerHTML = $('pager-bottom').innerHTML = pager(pages);
  const first = $('list').querySelector('details.rec');
  if (first) first.open = true;
}
document.addEventListener('click', (e) => {
  const t = e.target.closest('button');
  if (!t) return;
  if (t.dataset.page) { go(current(), parseInt(t.dataset.page, 10)); window.scrollTo(0, 0); }
  if (t.dataset.clear) { const want = current(); for (const f of FIELDS) if (t.dataset.clear === '*' || t.dataset.clear === f) want[f] = ''; go(want, 1); }
});
window.addEventListener('hashchange', () => { sync(); render(); });
const PAGE = %PAGE%;
fill();
sync();
render();
"""  # noqa: E501  (inline JavaScript: the page must be one file)

EXTRA_CSS = """
.filters { display: flex; flex-wrap: wrap; gap: 10px 16px; background: var(--soft); padding: 10px;
  border: 1px solid var(--line); border-radius: 6px; position: sticky; top: 0; z-index: 1; }
.filters label { font-size: 12px; color: var(--muted); display: flex; flex-direction: column; }
.filters select { font-size: 13px; min-width: 140px; }
#count { margin: 10px 0; color: var(--muted); }
details.rec { border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; margin: 6px 0; }
details.rec > summary { line-height: 1.9; }
.q { margin: 2px 0 0 18px; } .verdict { margin: 6px 0 0 18px; } .verdict h4 { margin: 6px 0 2px; }
details.path { margin: 6px 0 4px 18px; }
details.steps ol { margin: 4px 0; padding-left: 28px; } details.steps li { margin: 4px 0; }
.bad { color: var(--bad); }
.badge.outcome.success, .badge.outcome.safe_non_answer { color: var(--ok); border-color: var(--ok); }
.badge.outcome.grounded_wrong, .badge.outcome.unsupported, .badge.outcome.wrong,
.badge.outcome.failed { color: var(--bad); border-color: var(--bad); }
details.glossary { margin: 8px 0; font-size: 13px; } details.glossary dt { font-weight: 600; }
.pager { margin: 8px 0; } .pager button, #count button { margin-right: 4px; }
.recomputed { border-left: 4px solid var(--accent); padding: 2px 0 2px 10px; margin: 6px 0; }
.badge.recomputed { color: var(--accent); border-color: var(--accent); }
.private { background: #fdecea; border: 1px solid var(--bad); padding: 8px 12px; border-radius: 6px; }
"""


FAILURES = ("grounded_wrong", "wrong", "unsupported", "failed", "ended_early", "abstained")
"""Outcomes the explorer opens on when no filter is given, the first one a source has: a
failure to look into, not a success."""


def first_failure(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The filters a source opens on: its first failure outcome (:data:`FAILURES`), if any."""
    have = {str(r.get("outcome")) for r in rows}
    return next(({"outcome": o} for o in FAILURES if o in have), {})


class ViewError(ValueError):
    """An input the viewer cannot read (message names the path and the problem)."""


def _from_archive(path: Path, recompute: bool = True) -> list[dict[str, Any]]:
    from layerlab.corpus import build as corpus_mod

    try:
        archive.check_path(path)
        recs = archive.read_records(path / archive.ARCHIVE if path.is_dir() else path)
    except archive.ArchiveError as exc:
        raise ViewError(str(exc)) from None
    try:
        questions = {t.task_id: t.question for t in corpus_mod.load().tasks}
    except Exception:  # the corpus is optional here: labels alone still make a view
        questions = {}
    steps = _agent_rows(path)
    rows = []
    for r in recs:
        d = dict(r.__dict__)
        extra: dict[str, Any] = {}
        step = steps.get(archive.sort_key(r))
        if step is not None:
            from layerlab.reporting.records import transcript

            extra = {"agent": transcript.summary(step), **transcript.from_row(step)}
        rows.append(
            {
                **{
                    k: d[k]
                    for k in (
                        *archive.KEYS,
                        "run_id",
                        "domain",
                        "policy_id",
                        "answerable",
                        "stage",
                        "diagnostic",
                    )
                },
                "question": questions.get(r.task_id, ""),
                "outcome": samplelog.outcome(d),
                "verdict": {k: d[k] for k in (*archive.LABELS, *archive.SCORES)},
                **extra,
            }
        )
    if recompute:  # what each record's reader saw, from the public corpus (no reply)
        from layerlab.reporting.records import evidence

        evidence.annotate(rows, recs, path)
    return rows


def _entry_view(e: dict[str, Any]) -> dict[str, Any]:
    """A sample-log entry as the page carries it: its outcome by today's definition (a log
    written before a definition changed says what the labels say now); an agent record's
    conversation as steps."""
    if isinstance(e.get("verdict"), dict):
        e = {**e, "outcome": samplelog.outcome({**e["verdict"], "diagnostic": e["diagnostic"]})}
    if "transcript" not in e:
        return e
    from layerlab.reporting.records import transcript

    r = {k: v for k, v in e.items() if k not in ("transcript", "agent")}
    if isinstance(e.get("agent"), dict):
        r["agent"] = transcript.summary(e["agent"])
    return {**r, **transcript.from_entry(e)}


def _agent_rows(path: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """An agent run folder's step rows by record key (empty for any other archive, and for an
    unfinished agent run that has not written its table yet: it has no records either)."""
    if not path.is_dir():
        return {}
    agent = archive.read_manifest(path).get("agent")
    if not isinstance(agent, dict) or agent.get("table_sha256") is None:
        return {}
    from layerlab.harness.live.agentlog import read_table

    return {tuple(r[k] for k in archive.KEYS): r for r in read_table(path)}


def load(paths_: Sequence[Path], recompute: bool = True) -> tuple[list[dict[str, Any]], bool]:
    """Rows from sample logs and/or archives, and whether any came from a (private) sample log;
    ``recompute``: archived rows carry their evidence recomputed from the corpus
    (:mod:`layerlab.reporting.records.evidence`)."""
    rows: list[dict[str, Any]] = []
    private = False
    for p in map(Path, paths_):
        if not p.exists():
            raise ViewError(f"{p}: does not exist (expected a sample log, run folder or archive)")
        if p.is_file() and p.suffix in (".jsonl", ".json", ".log"):
            try:
                rows += [_entry_view(e) for e in samplelog.read(p)]
            except samplelog.SampleLogError as exc:
                raise ViewError(str(exc)) from None
            private = True
        else:
            rows += _from_archive(p, recompute)
    if not rows:
        raise ViewError("no records in the given inputs")
    rows.sort(key=lambda r: tuple(r[k] for k in archive.KEYS))
    return rows, private


def scenario_options(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """The scenario filter's options as ``[name, label]``: by scenario, then by intensity
    ascending (a scenario's own name is λ = 1, last of its sweep). In a swept run every faulted
    scenario's option says its λ (``stale_index · λ = 0.25``, ``stale_index · λ = 1``)."""
    from layerlab.faults.scenario import split_variant

    names = {str(r["scenario"]) for r in rows}
    split = {n: split_variant(n) for n in names}
    swept = {base for base, dose in split.values() if dose < 1}
    return [[n, f"{split[n][0]} · λ = {split[n][1]:g}" if split[n][0] in swept else n]
            for n in sorted(names, key=lambda n: split[n])]  # fmt: skip


def build(
    paths_: Sequence[Path], title: str = "LayerRAG-Bench records", evidence: bool = True
) -> str:
    """The viewer page as one HTML string; ``evidence``: archived records carry their evidence
    recomputed from the corpus."""
    return _build(paths_, title, evidence)[0]


def fragment(rows: Sequence[dict[str, Any]]) -> str:
    """The address fragment a page of ``rows`` is best opened at: the first failure outcome the
    records have (:data:`FAILURES`), else none."""
    from urllib.parse import urlencode

    want = first_failure(rows)
    return f"#{urlencode(want)}" if want else ""


def _build(paths_: Sequence[Path], title: str, evidence: bool) -> tuple[str, str]:
    """The page and the fragment to open it at (:func:`fragment`)."""
    from layerlab.reporting.records import evidence as ev

    rows, private = load(paths_, recompute=evidence)
    banner = page.partial_banner(paths_)  # an unfinished run says so first
    shared = ev.pack(rows)  # each recomputed path, reason and text once

    def blob(x: Any) -> str:  # nothing in the data can close the script element
        text = json.dumps(x, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return text.replace("</", "<\\/")

    data = blob(rows)
    filters = "".join(
        f'<label>{label}<select id="f-{f}"></select></label>'
        for f, label in (
            ("run_id", "run"),
            ("model", "model"),
            ("scenario", "scenario"),
            ("mitigation", "mitigation"),
            ("outcome", "outcome"),
            ("diagnostic", "diagnostic"),
        )
    )
    warning = (
        '<p class="private"><b>Private.</b> Built from a per-sample log: it shows model replies '
        "and expected answers. Do not publish it; share archives and reports instead.</p>"
        if private
        else '<p class="muted">Built from archives: labels only (archives keep no replies, '
        "answers or document ids). Questions are the corpus's public tasks"
        + (
            f"; each record's evidence path is {ev.LABEL} (what its reader saw, checked "
            "against the record's prompt hash or tool calls), never a reply"
            if evidence
            else ""
        )
        + ".</p>"
    )
    body = (
        f"<h1>{page.esc(title)}</h1>\n{banner + chr(10) if banner else ''}{warning}\n"
        f'<div class="filters">{filters}</div>\n{glossary()}\n<div id="count"></div>\n'
        '<div id="pager-top" class="pager"></div>\n<div id="list"></div>\n'
        '<div id="pager-bottom" class="pager"></div>\n'
        f'<script type="application/json" id="records">{data}</script>\n'
        f'<script type="application/json" id="evidence">{blob(shared)}</script>\n'
        f'<script type="application/json" id="scenario-options">{blob(scenario_options(rows))}</script>'
    )
    return page.document(
        title,
        body,
        script=SCRIPT.replace("%PAGE%", str(PAGE_SIZE)).replace(
            "%MEANINGS%", json.dumps(samplelog.OUTCOME_MEANINGS, ensure_ascii=False)
        ) + spanview.SCRIPT,  # a record's own spans
        extra_css=EXTRA_CSS + spanview.CSS,
    ), fragment(rows)


def glossary() -> str:
    """What each outcome means (:data:`layerlab.archive.samplelog.OUTCOME_MEANINGS`), folded
    under the filters; each record's outcome badge carries its meaning as a tooltip too."""
    items = "".join(
        f"<dt>{page.esc(k)}</dt><dd>{page.esc(v)}</dd>" for k, v in samplelog.OUTCOME_MEANINGS.items()
    )
    return f'<details class="glossary"><summary>What each outcome means</summary><dl>{items}</dl></details>'


def write(
    paths_: Sequence[Path], out: Path, title: str = "LayerRAG-Bench records", evidence: bool = True
) -> Path:
    """Build the viewer and write it atomically to ``out`` (owner-only if it is private)."""
    return write_view(paths_, out, title, evidence)[0]


def write_view(
    paths_: Sequence[Path], out: Path, title: str = "LayerRAG-Bench records", evidence: bool = True
) -> tuple[Path, str]:
    """:func:`write`, and the address to open: ``file://…/view.html#outcome=…`` (the first
    failure outcome of its records, the view a reader looks into first)."""
    from layerlab._io import PRIVATE_FILE, atomic_write_text

    html, frag = _build(paths_, title, evidence)
    private = 'class="private"' in html  # never readable by others, not even for a moment
    atomic_write_text(Path(out), html, mode=PRIVATE_FILE if private else None)
    return Path(out), Path(out).resolve().as_uri() + frag
