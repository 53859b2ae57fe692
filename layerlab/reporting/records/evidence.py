"""What an archived record's reader saw, recomputed from the corpus (never a reply).

An archive keeps labels, not text: no reply, no evidence. Yet the evidence path of a record is
deterministic — the same corpus, scenario, arm, task and retriever give the same index, search,
tool payload, contract verdict and prompt — so :class:`Recomputer` rebuilds it with
:func:`layerlab.reporting.records.tracing.trace` (what ``layerlab explore`` prints) for the viewer
(:mod:`layerlab.reporting.records.viewer`) and the notebook explorer (:mod:`layerlab.reporting.records.browse`).

It is checked before it is shown. A single-call record's ``prompt_hash`` is the hash of the
prompt its reader got (a live run's chat messages; the deterministic harness's reader input):
the recomputed prompt's hash must equal it, and a record that ended before the reader must end
there again. A target's or agent's evidence came from its own tool calls (``calls`` in
``target.parquet`` / ``agent.parquet``: tool, outcome, documents delivered, payloads; never the
arguments): each call is replayed through the record's faulted tools (a ``search`` with the
task's question, an ``open_document`` of the document it delivered) and must deliver the
recorded documents with the recorded outcome. What does not match, or cannot be replayed (a
query other than the question, a call whose document is not recorded), is said, never shown as
evidence. A manifest whose spec hashes differ from the current specs is said too.

Privacy: everything here is the public corpus (questions, documents, faults) and the record's own
labels. The answer key is never read into a path: the reasons name what each label compares
without the expected answer or which document is required.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerlab.scoring.score import v_why

LABEL = "recomputed from the corpus"
NOTE = (
    "Recomputed from the public corpus, scenario, arm and task (deterministic: the same inputs "
    "give the same path); not a reply: the archive keeps none."
)
TEXT = 1200  # characters of a delivered document's text a path carries (the prompt's block)
PAYLOAD = 70  # characters of each string in the payloads shown (as ``layerlab explore``)
_META = ("status", "effective_year", "version", "domain", "owner", "access_scope", "tenant")


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


EDITS, PROBLEMS = 12, 6  # the contract's edits and problems an evidence path shows


def _contract(c: Any) -> dict[str, Any]:
    """What the tool contract did to a payload, as an evidence path shows it: its outcome, the
    first :data:`EDITS` edits (and how many more) and the first :data:`PROBLEMS` problems."""
    return {
        "outcome": c.outcome,
        "valid": c.valid,
        "edits": list(c.edits[:EDITS]),
        "more_edits": max(0, len(c.edits) - EDITS),
        "problems": list(c.problems[:PROBLEMS]),
    }


def _evidence(inp: Any) -> dict[str, Any] | None:
    """A reader input as the path carries it: the prompt's header fields and evidence block."""
    if inp is None:
        return None
    return {
        "tool_status": inp.tool_status,
        "tool_error": inp.tool_error,
        "session_id": inp.session_id,
        "evidence": [
            {
                "rank": e.rank,
                "doc_id": e.doc_id,
                "title": e.title,
                **{k: getattr(e, k) for k in _META},
                "session_id": e.session_id,
                "truncated": e.truncated,
                "text": _cut(e.text, TEXT),
            }
            for e in inp.evidence
        ],
    }


def _payload(p: Any) -> str | None:
    from layerlab.reporting.records.tracing import _short

    if p is None:
        return None
    if hasattr(p, "model_dump"):
        p = p.model_dump(by_alias=True, mode="json")
    return _short(p, PAYLOAD)


def reasons(rec: Mapping[str, Any], path: Mapping[str, Any] | None) -> dict[str, str]:
    """What each recorded label compares, from the record and its recomputed path (no answer
    key: the expected answer and the required documents are not named)."""

    def mark(k: str) -> str:
        return "✓" if rec.get(k) else "✗"

    delivered = [e["doc_id"] for e in ((path or {}).get("reader") or {}).get("evidence", [])]
    contract = (path or {}).get("contract") or {}
    out = {
        "E": f"{mark('exact_match')} the reply's answer against the expected one (the reply is "
        "not kept)",
        "R": f"{mark('retrieval_ok')} the required document among those delivered "
        f"{delivered or '(none)'}",
        "G": f"{mark('citation_ok')} the reply cites at least one document, all of them "
        "delivered (the citations are not kept)",
        "V": f"{mark('schema_ok')} "
        + v_why(
            bool(rec.get("schema_ok")),
            bool(contract.get("valid")),
            contract.get("outcome", "?"),
            len(contract.get("edits") or ()) + int(contract.get("more_edits") or 0),
            contract["problems"][0] if contract.get("problems") else None,
            sum(not c.get("valid", True) for c in (path or {}).get("calls") or ()),
        ),
        "S": f"{mark('success')} E and R and G and V",
    }
    if rec.get("grounded") is not None:
        out["grounded"] = (
            f"{mark('grounded')} the answer is stated in a delivered document; groundedness "
            f"false positive {mark('grounded_false_positive')}"
        )
    return out


def _calls(value: Any) -> list[dict[str, Any]]:
    return json.loads(value) if isinstance(value, str) else list(value or [])


@dataclass
class Recomputer:
    """Recomputes archived records' evidence paths for one archive (its manifest's settings)."""

    manifest: Mapping[str, Any]
    corpus: Any = None
    scenarios: Any = None
    _paths: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    _prepared: dict[tuple[str, str], Any] = field(default_factory=dict)
    _shown: dict[int, tuple[Any, str | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from layerlab import archive, paths
        from layerlab.corpus import build as corpus_mod
        from layerlab.faults.scenario import load_files, shipped_files
        from layerlab.system import retrieval

        self.corpus = self.corpus or corpus_mod.load()
        # the shipped scenario files the run read (run live --scenarios repeated), else the paper's
        self.files = shipped_files(str(archive.provenance_of(self.manifest).get("scenarios"))) or (
            paths.SCENARIO_SPEC,)  # fmt: skip
        self.scenarios = self.scenarios or load_files(self.files)
        self.tasks = {t.task_id: t for t in self.corpus.tasks}
        self.retriever = str(self.manifest.get("retriever") or retrieval.REPORTED.name)
        self.kind = str(self.manifest.get("kind") or "")
        self.stale = self._stale()

    def _stale(self) -> list[str]:
        """The manifest's spec hashes that differ from the current specs (then nothing is
        recomputed: the path would be another spec's)."""
        from layerlab import archive, paths
        from layerlab.corpus.spec import spec_hash
        from layerlab.faults.scenario import files_hash
        from layerlab.system import prompt, retrieval

        if retrieval.is_external(self.retriever):  # a team's store: recomputed only as it was
            try:
                code = retrieval.code(self.retriever)
            except retrieval.RetrieverError:
                return [f"retriever {self.retriever} (not importable here)"]
            if self.manifest.get("retriever_code") not in (None, code):
                return [f"retriever {self.retriever}'s code"]
        have = archive.provenance_of(self.manifest)
        now = {
            "corpus_spec": self.corpus.spec_hash,
            "scenarios": files_hash(self.files),
            "mitigations": spec_hash(paths.MITIGATION_SPEC),
        }
        if self.kind == "live":
            now["prompt"] = archive.provenance_for(self.corpus, now["scenarios"], ())["prompt"]
            if self.manifest.get("prompt_version") not in (None, prompt.PROMPT_VERSION):
                return [f"prompt version {self.manifest['prompt_version']}"]
        return sorted(k for k, v in now.items() if have.get(k) not in (None, v))

    def trace(self, scenario: str, mitigation: str, task_id: str) -> Any:
        """The record's :class:`~layerlab.reporting.records.tracing.Trace` under the run's retriever."""
        from layerlab.corpus import build as corpus_mod
        from layerlab.reporting.records import tracing

        if not hasattr(self, "_key"):
            # the trace scores the extractive reader; its labels never reach a path
            self._key = corpus_mod.load_answer_key()
        return tracing.trace(
            task_id, scenario, mitigation, corpus=self.corpus, key=self._key,
            scenarios=self.scenarios, retriever=self.retriever, prepared=self._prepared,
        )  # fmt: skip

    def _payload(self, p: Any) -> str | None:
        """A payload as shown, once per payload object (arms share the tool's reply, and arms
        with one contract its verdict)."""
        if id(p) not in self._shown:
            self._shown[id(p)] = (p, _payload(p))  # the object is kept: its id stays its own
        return self._shown[id(p)][1]

    def path(self, scenario: str, mitigation: str, task_id: str) -> dict[str, Any]:
        """The evidence path of a single-call record (memoised: records of every model and
        replicate of a cell share it): faults, retrieval, payloads, contract, reader input."""
        k = (scenario, mitigation, task_id)
        if k not in self._paths:
            from layerlab.harness.prepare import input_hash
            from layerlab.system import prompt

            t = self.trace(*k)
            inp = t.inp
            phash = None
            if inp is not None:
                phash = (
                    input_hash(inp)
                    if self.kind == "deterministic"
                    else prompt.prompt_hash(prompt.messages(inp))
                )
            self._paths[k] = {
                "retriever": self.retriever,
                "faults": list(t.faults),
                "retrieved": [dict(r) for r in t.retrieved],
                "sent": self._payload(t.sent),
                "received": self._payload(t.received),
                "accepted": self._payload(t.contract.payload),
                "contract": _contract(t.contract),
                "actions": list(t.actions),
                "reader": _evidence(inp),
                "prompt_hash": phash,
            }
        return self._paths[k]

    def replay(self, rec: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """A target's or agent's recorded tool calls replayed through the record's faulted
        tools: per call what it returned, or why it cannot be recomputed."""
        from layerlab.harness import tools as tl

        task = self.tasks[rec["task_id"]]
        self.trace(rec["scenario"], rec["mitigation"], rec["task_id"])  # prepares the scenario
        box = tl.ToolBox(task, self._prepared[rec["scenario"], self.retriever], rec["mitigation"])
        steps, lost, done = [], [], 0
        for i, c in enumerate(calls, 1):
            box.payloads = done  # each call where the run had it, whatever the replay gave
            done += int(c.get("payloads") or 0)
            want = (c["outcome"], tuple(c.get("doc_ids") or ()))
            if not c.get("valid", True):
                box.calls.append(tl.ToolCall(int(c.get("step") or i), c["tool"], False, "invalid"))
                steps.append({**_said(c), "replayed": "invalid call (its arguments are not kept)"})
                continue
            tries = _candidates(c, task.question)
            if not tries:
                how = "open_document of a document the log does not name"
                lost.append(f"call {i}: {how}")
                steps.append({**_said(c), "replayed": None, "lost": how})
                continue
            how = ""
            for args, tried in tries:
                how, before = tried, _state(box)
                obs = box.call(c["tool"], args, int(c.get("step") or i))
                got = (box.calls[-1].outcome, box.calls[-1].doc_ids)
                if got == want:
                    break
                _restore(box, before)
            if got != want:
                box.calls.append(tl.ToolCall(int(c.get("step") or i), c["tool"], True, want[0],
                                             want[1], int(c.get("payloads") or 0)))  # fmt: skip
                lost.append(f"call {i}: {how} gives {got[0]} {list(got[1])}")
                steps.append(
                    {
                        **_said(c),
                        "replayed": None,
                        "lost": f"{how} gives {got[0]} "
                        f"{list(got[1])}, not the recorded call (its query is not kept)",
                    }
                )
                continue
            docs = [
                {**{k: d.get(k) for k in ("doc_id", "title", *_META, "session_id", "truncated")},
                 "text": _cut(str(d.get("text") or ""), TEXT)}
                for d in obs.get("results") or []
            ]  # fmt: skip
            steps.append({**_said(c), "replayed": how, "docs": docs,
                          "error": _error(obs)})  # fmt: skip
        g = box.admission()
        return {
            "retriever": self.retriever,
            "calls": steps,
            "lost": lost,
            "contract": _contract(g.contract),
            "actions": list(g.actions),
            "reader": None if lost else _evidence(g.inp),
        }

    def record(
        self, rec: Mapping[str, Any], calls: Sequence[Mapping[str, Any]] | str | None = None
    ) -> dict[str, Any]:
        """One archived record's recomputed evidence, checked against what the archive kept:
        ``{"label", "note", "status", "check", "path"}`` (``path`` is ``None`` when the check
        failed or nothing can be recomputed; ``check`` says why)."""
        base = {"label": LABEL, "note": NOTE}
        if self.stale:
            return {**base, "status": "unchecked", "path": None,
                    "check": "not recomputed: the archive was made with other specs "
                    f"({', '.join(self.stale)} differ from the current ones)"}  # fmt: skip
        if rec["task_id"] not in self.tasks or rec["scenario"] not in self.scenarios:
            return {**base, "status": "unchecked", "path": None,
                    "check": "not recomputed: the task or scenario is not in the current corpus"}  # fmt: skip
        if calls is not None:
            path = self.replay(rec, _calls(calls))
            if path["lost"]:
                return {**base, "status": "partial", "path": path,
                        "check": "the evidence of some calls is not recoverable ("
                        + "; ".join(path["lost"]) + "); what reached the reader is not shown"}  # fmt: skip
            return {**base, "status": "match", "path": path,
                    "check": f"every recorded tool call ({len(path['calls'])}) replayed: the same "
                    "outcomes and documents"}  # fmt: skip
        path = self.path(rec["scenario"], rec["mitigation"], rec["task_id"])
        kept, again = rec.get("prompt_hash") or None, path["prompt_hash"]
        what = "reader input" if self.kind == "deterministic" else "prompt"
        if kept is None and again is None:
            return {**base, "status": "match", "path": path,
                    "check": "the record ended before the reader, and so does the recomputation"}  # fmt: skip
        if kept == again:
            return {**base, "status": "match", "path": path,
                    "check": f"the recomputed {what}'s hash equals the record's prompt_hash "
                    f"{kept[:12]}…"}  # fmt: skip
        return {**base, "status": "mismatch", "path": None,
                "check": f"does not match: the record's prompt_hash is "
                f"{(kept or 'null')[:12]}, the recomputed {what}'s is {(again or 'null')[:12]} "
                "(other settings than the manifest records?); no evidence is shown"}  # fmt: skip


def _candidates(c: Mapping[str, Any], question: str) -> list[tuple[dict[str, Any], str]]:
    """The arguments a recorded call may have had (the log keeps none): a search with the task's
    question (the default ``top_k``, then as many documents as it delivered); an open of the
    document it delivered."""
    from layerlab.harness import tools as tl
    from layerlab.system import retrieval

    n = len(c.get("doc_ids") or ())
    if c["tool"] == tl.SEARCH:
        ks = dict.fromkeys(k for k in (retrieval.TOP_K, n) if 1 <= k <= tl.MAX_TOP_K)
        return [
            ({"query": question, "top_k": k}, f"search with the task's question, top_k {k}")
            for k in ks
        ]
    if n:
        return [({"doc_id": c["doc_ids"][0]}, f"open_document {c['doc_ids'][0]}")]
    return []


_MUTABLE = ("payloads", "calls", "evidence", "last_status", "last_failed", "accepted", "edits",
            "refusal", "actions", "waited_s")  # fmt: skip


def _state(box: Any) -> dict[str, Any]:
    """A tool box's record-so-far (to undo a replayed call that is not the recorded one)."""
    return {k: (v.copy() if isinstance(v, (list, dict)) else v)
            for k, v in ((k, getattr(box, k)) for k in _MUTABLE)}  # fmt: skip


def _restore(box: Any, state: Mapping[str, Any]) -> None:
    for k, v in state.items():
        setattr(box, k, v)


def _said(c: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded call as the archive keeps it."""
    return {
        "step": c.get("step"),
        "tool": c.get("tool"),
        "outcome": c.get("outcome"),
        "valid": c.get("valid", True),
        "doc_ids": list(c.get("doc_ids") or []),
        "payloads": c.get("payloads"),
    }


def _error(obs: Mapping[str, Any]) -> str | None:
    err = obs.get("error")
    if isinstance(err, dict):
        return f"{err.get('code')}: {err.get('message')}"
    return None if err is None else str(err)


def for_archive(path: Path) -> Recomputer | None:
    """A recomputer for a run folder or archive (``None`` when the corpus cannot be loaded:
    the viewer then shows labels only, as before)."""
    from layerlab import archive

    folder = path if path.is_dir() else path.parent
    try:
        manifest = archive.read_manifest(folder)
    except Exception:  # a bare records file: recompute under the defaults
        manifest = {}
    try:
        return Recomputer(manifest)
    except Exception:  # the corpus is optional: labels alone still make a view
        return None


def calls_of(path: Path) -> dict[tuple[Any, ...], list[dict[str, Any]]] | None:
    """A target's or agent's recorded tool calls by record key (``None`` for a single-call
    run: its records are checked by their prompt hash)."""
    from layerlab import archive
    from layerlab.harness.live.agentlog import read_table

    folder = path if path.is_dir() else path.parent
    try:
        manifest = archive.read_manifest(folder)
    except Exception:
        return None
    for kind in ("agent", "target"):
        if isinstance(manifest.get(kind), dict) and manifest[kind].get("table_sha256"):
            rows = read_table(folder, target=kind == "target")
            return {tuple(r[k] for k in archive.KEYS): r["calls"] for r in rows}
    return None


def annotate(rows: list[dict[str, Any]], records: Sequence[Any], path: Path) -> None:
    """Give each archived row its recomputed evidence (``recomputed``: label, note, check,
    path and the labels' reasons); nothing when the corpus cannot be loaded."""
    from layerlab import archive

    rc = for_archive(path)
    if rc is None:
        return
    calls = calls_of(path)
    for row, r in zip(rows, records, strict=True):
        d = r.__dict__
        key = archive.sort_key(r)
        if calls is not None and key not in calls:
            continue  # an agent/target record without its row: nothing to replay
        x = rc.record(d, calls[key] if calls is not None else None)
        x["reasons"] = reasons(d, x["path"]) if x["path"] is not None else None
        row["recomputed"] = x


_TEXTS = ("sent", "received", "accepted")
_PARTS = ("faults", "retrieved", "reader", "actions")  # shared by many paths: each kept once


def pack(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Move the rows' recomputed paths, reasons and texts into shared tables (a page carries
    each once, however many records of models, replicates and arms share it); each row keeps
    indices. Returns ``{"label", "note", "paths", "reasons", "checks", "parts", "texts"}``."""
    from layerlab._io import canonical_json

    tables: dict[str, list[Any]] = {
        "paths": [], "reasons": [], "checks": [], "parts": [], "texts": []
    }  # fmt: skip
    seen: dict[str, dict[str, int]] = {k: {} for k in tables}

    def put(kind: str, value: Any) -> int | None:
        if value is None:
            return None
        k = value if isinstance(value, str) else canonical_json(value)
        if k not in seen[kind]:
            seen[kind][k] = len(tables[kind])
            tables[kind].append(value)
        return seen[kind][k]

    def docs(ds: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**d, "text": put("texts", d["text"])} for d in ds]

    for row in rows:
        x = row.get("recomputed")
        if not x:
            continue
        p = x["path"]
        if p is not None:
            p = {**p, **{k: put("texts", p[k]) for k in _TEXTS if k in p}}
            if p.get("reader"):
                p["reader"] = {**p["reader"], "evidence": docs(p["reader"]["evidence"])}
            p.update({k: put("parts", p[k]) for k in _PARTS if k in p})
            if p.get("calls"):
                p["calls"] = [{**c, "docs": docs(c["docs"])} if c.get("docs") else c
                              for c in p["calls"]]  # fmt: skip
        row["recomputed"] = {
            "status": x["status"],
            "check": put("checks", x["check"]),
            "path": put("paths", p),
            "reasons": put("reasons", x["reasons"]),
        }
    return {"label": LABEL, "note": NOTE, **tables}


def _docs_html(ds: Sequence[Mapping[str, Any]]) -> str:
    from layerlab.reporting.format.page import esc

    cols = ("rank", "doc_id", "title", "status", "effective_year", "version", "domain", "owner",
            "access_scope", "tenant", "session_id", "truncated")  # fmt: skip
    return (
        "<table><tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
        + "".join(
            "<tr>" + "".join(f"<td>{esc(d.get(c, i + 1 if c == 'rank' else ''))}</td>"
                             for c in cols) + "</tr>"
            for i, d in enumerate(ds)
        )
        + "</table><details><summary>evidence text</summary><ul>"
        + "".join(f"<li><code>{esc(d['doc_id'])}</code> {esc(d['text'])}</li>" for d in ds)
        + "</ul></details>"
    )  # fmt: skip


def html(x: Mapping[str, Any], row: Mapping[str, Any] | None = None) -> str:
    """A recomputed evidence path (:meth:`Recomputer.record`) as HTML (the notebook explorer's;
    the viewer's page renders the same in its script), marked as recomputed: the check
    first, then the faults, what was retrieved, the payloads before and after the contract (or
    a target's or agent's replayed calls), the contract, the mitigations and what reached the
    reader."""
    from layerlab.reporting.format.page import esc

    ok = x["status"] == "match"
    out = [
        f'<div class="recomputed"><p><span class="b rc">{esc(LABEL)}</span> '
        f'<span class="muted">{esc(NOTE)}</span></p>'
        f'<p class="{"muted" if ok else "bad"}"><b>check</b>: {esc(x["check"])}</p>'
    ]
    p = x.get("path")
    if p is None:
        return "".join(out) + "</div>"
    if row is not None and not p.get("calls"):
        out.append(
            '<p class="muted">the same path in a terminal: <code>layerlab explore --task '
            f"{esc(row['task_id'])} --scenario {esc(row['scenario'])} --mitigation "
            f"{esc(row['mitigation'])} --retriever {esc(p['retriever'])} --model "
            f"{esc(row['provider'])}/{esc(row['model'])}</code></p>"
        )
    if p.get("faults"):
        out.append("<p><b>what the fault did</b></p><ul>"
                   + "".join(f"<li>{esc(f)}</li>" for f in p["faults"]) + "</ul>")  # fmt: skip
    if p.get("retrieved"):
        cols = ("rank", "doc_id", "status", "effective_year", "version", "domain", "session_id")
        out.append(
            f"<p><b>retrieved</b> ({esc(p['retriever'])}, before the transport faults)</p><table><tr>"
            + "".join(f"<th>{c}</th>" for c in (*cols, "score")) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{esc(r[c])}</td>" for c in cols)
                      + f"<td>{r['score']:.3f}</td></tr>" for r in p["retrieved"])
            + "</table>"
        )  # fmt: skip
    for k, what in (("sent", "tool payload as sent"),
                    ("received", "as received (before the contract)"),
                    ("accepted", "after the contract")):  # fmt: skip
        if k in p:
            body = p[k] if p[k] is not None else "(none: the contract let nothing through)"
            out.append(f"<details><summary>{what}</summary><pre>{esc(body)}</pre></details>")
    if p.get("calls"):
        items = []
        for c in p["calls"]:
            said = (f" <b class='bad'>not recoverable</b>: {esc(c['lost'])}" if c.get("lost")
                    else f' <span class="muted">{esc(c["replayed"])}</span>')  # fmt: skip
            items.append(
                f"<li><code>{esc(c['tool'])}</code> → {esc(c['outcome'])}"
                + (" · " + ", ".join(map(esc, c["doc_ids"])) if c["doc_ids"] else "") + said
                + (f' <span class="muted">{esc(c["error"])}</span>' if c.get("error") else "")
                + (_docs_html(c["docs"]) if c.get("docs") else "") + "</li>"
            )  # fmt: skip
        out.append(f"<p><b>tool calls</b> ({esc(p['retriever'])}; replayed through the record's "
                   "faulted tools)</p><ol>" + "".join(items) + "</ol>")  # fmt: skip
    c = p["contract"]
    out.append(f"<p><b>contract</b>: {esc(c['outcome'])}</p>")
    if c["edits"]:
        more = f"; … {c['more_edits']} more" if c["more_edits"] else ""
        out.append("<p>repair edits: " + "; ".join(map(esc, c["edits"])) + more + "</p>")
    if c["problems"]:
        out.append("<p>contract problems: " + "; ".join(map(esc, c["problems"])) + "</p>")
    if p.get("actions"):
        out.append("<p>mitigation: " + "; ".join(map(esc, p["actions"])) + "</p>")
    r = p.get("reader")
    if r:
        out.append(
            "<p><b>what reached the reader</b> ("
            + (
                "every document the calls delivered: what R and G are scored over"
                if p.get("calls")
                else "the prompt's evidence block"
            )
            + "): search status "
            f"{esc(r['tool_status'])}"
            + (f" · search error {esc(r['tool_error'])}" if r["tool_error"] else "")
            + f" · request session {esc(r['session_id'])}</p>"
            + (_docs_html(r["evidence"]) if r["evidence"] else '<p class="muted">(no results)</p>')
        )
    elif not p.get("lost"):
        out.append('<p class="muted">nothing reached the reader: the record ended before it</p>')
    return "".join(out) + "</div>"
