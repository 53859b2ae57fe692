"""The manuscript: every generated table is included, Tables 1-10 keep the paper's numbers, and the
PDF builds with no table running into the margin (the build test needs TeX and is skipped without
it); the LaTeX exporter fits tables to the page by construction."""

from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest

from layerlab import paths
from layerlab.analysis import units
from layerlab.reporting.paper import build, export, papervalues

MAIN = paths.PAPER / build.MAIN
TEX = build.engine() is not None


def _inputs() -> list[str]:
    text = re.sub(r"(?<!\\)%.*", "", MAIN.read_text(encoding="utf-8"))  # comments do not count
    return re.findall(r"\\input\{tables/([^}]+)\.tex\}", text)


def test_main_tex_inputs_every_generated_table_once() -> None:
    generated = sorted(
        p.stem for p in (paths.COMMITTED_ARTIFACTS / "paper" / "tables").glob("*.tex")
    )
    inputs = _inputs()
    assert sorted(set(generated) - set(inputs)) == [], "paper/tables/*.tex not \\input by main.tex"
    assert sorted(set(inputs) - set(generated)) == [], "main.tex inputs a table no notebook writes"
    assert len(inputs) == len(set(inputs)), "a table is input twice"


def test_tables_one_to_ten_come_first_in_order() -> None:
    """LaTeX numbers tables in order of appearance: Tables 1-10 keep the paper's numbers only if
    table1..table10 are the first ten tables of the document."""
    assert _inputs()[:10] == [f"table{i}" for i in range(1, 11)]


@pytest.mark.skipif(not TEX, reason="needs TeX (latexmk or pdflatex); see docs/paper.md")
def test_paper_builds_without_overfull_tables(tmp_path) -> None:
    b = build.build(out_dir=tmp_path / "build", pdf=tmp_path / "main.pdf")
    assert b.pdf.stat().st_size > 10_000
    assert [str(p) for p in b.problems] == []
    # the numbering the reader sees: \label{tab:tableN} is Table N for the paper's ten tables
    aux = (tmp_path / "build" / "main.aux").read_text(encoding="utf-8")
    numbers = dict(re.findall(r"\\newlabel\{tab:(table\d+)\}\{\{([^}]*)\}", aux))
    assert {f"table{i}": str(i) for i in range(1, 11)}.items() <= numbers.items()
    # every supplementary table is numbered A1, A2, ... (none takes a paper number)
    assert all(
        v.startswith("A") or re.fullmatch(r"table\d+", k) or k.endswith("_models")
        for k, v in numbers.items()
    )
    # every table has the registry's number (A1, A2, ... in the registry's order), and its link
    # anchor is its own: no two tables share a destination, so a link to A2 lands on A2
    from layerlab.reporting.paper.tables import TABLES

    labels = dict(re.findall(r"\\newlabel\{tab:([^}]+)\}\{\{([^}]*)\}", aux))
    assert {t.id: labels.get(t.id) for t in TABLES} == {t.id: t.number for t in TABLES}
    anchors = [
        m.group(1)
        for line in aux.splitlines()
        if line.startswith("\\newlabel{tab:")
        and (m := re.search(r"\{(table\.[^{}]+)\}\{\}\}$", line))
    ]
    assert len(anchors) == len(TABLES) and len(set(anchors)) == len(anchors)
    log = (tmp_path / "build" / "main.log").read_text(encoding="utf-8", errors="replace")
    assert "destination with the same identifier" not in log


@pytest.mark.skipif(not TEX, reason="needs TeX (latexmk or pdflatex); see docs/paper.md")
def test_build_reports_an_overfull_table_by_file(tmp_path) -> None:
    """A table wider than the page is named, not just warned about in a log nobody reads."""
    src = tmp_path / "src"
    (src / "tables").mkdir(parents=True)
    (src / "tables" / "wide.tex").write_text(
        "\\begin{tabular}{l}" + "x" * 400 + "\\end{tabular}\\par\n", encoding="utf-8"
    )
    (src / "main.tex").write_text(
        "\\documentclass{article}\\begin{document}\\input{tables/wide.tex}\\end{document}\n",
        encoding="utf-8",
    )
    b = build.build(src / "main.tex", tmp_path / "build", tmp_path / "main.pdf")
    assert b.problems and all(p.file == "tables/wide.tex" for p in b.problems)
    assert "Overfull \\hbox" in str(b.problems[0])


def test_without_tex_make_paper_says_how_to_install_it(monkeypatch, capsys) -> None:
    monkeypatch.setattr(build, "engine", lambda: None)
    assert build.main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "apt-get install" in err[0] and "latexmk" in err[0]


def test_tex_error_is_one_line_naming_the_file(tmp_path) -> None:
    if not TEX:
        pytest.skip("needs TeX")
    (tmp_path / "main.tex").write_text(
        "\\documentclass{article}\\begin{document}\\undefinedmacro\\end{document}\n",
        encoding="utf-8",
    )
    with pytest.raises(
        build.PaperError, match=r"main.tex: TeX stopped: ! Undefined control sequence"
    ):
        build.build(tmp_path / "main.tex", tmp_path / "build", tmp_path / "out.pdf")


def test_log_parser_names_the_innermost_input_file() -> None:
    log = (
        "(./main.tex (/usr/share/texlive/article.cls (size11.clo)) (./main.aux)\n"
        "(./tables/a.tex (x) text\n"
        "Overfull \\hbox (12.0pt too wide) in alignment at lines 4--9\n"
        " []|\\OT1/cmr/m/n/10 unbalanced ( paren\n"
        "\n"
        ") (./tables/b.tex\n"
        "LaTeX Warning: Float too large for page by 20.0pt on input line 3.\n"
        ")\n"
        "Overfull \\hbox (3.0pt too wide) in paragraph at lines 40--41\n"
    )
    found = [str(p) for p in build.problems(log)]
    assert found == [
        "tables/a.tex: Overfull \\hbox (12.0pt too wide) in alignment at lines 4--9",
        "tables/b.tex: LaTeX Warning: Float too large for page by 20.0pt on input line 3.",
        "main.tex: Overfull \\hbox (3.0pt too wide) in paragraph at lines 40--41",
    ]


def test_a_duplicate_destination_is_a_problem() -> None:
    """Two tables with one link anchor (Table 1 and Table A1 both ``table.1``): a link lands on
    the wrong table, so the build names it instead of leaving it in the log."""
    log = (
        "(./main.tex (./tables/coverage.tex\n"
        "pdfTeX warning (ext4): destination with the same identifier (name{table.1}) has\n"
        " been already used, duplicate ignored\n"
        "))\n"
    )
    found = [str(p) for p in build.problems(log)]
    assert len(found) == 1 and found[0].startswith("tables/coverage.tex: pdfTeX warning (ext4)")


# --- the exporter: fitting by construction (no TeX needed) -------------------------------------


def _widths(tex: str) -> list[float]:
    return [float(w) for w in re.findall(r"p\{([0-9.]+)\\linewidth\}", tex)]


def test_a_narrow_table_stays_natural() -> None:
    df = pd.DataFrame({"scenario": ["clean", "stale_index"], "rate": [0.975, 0.0]})
    tex = export.to_latex(df, "A small table.", "tab:x")
    assert "\\begin{tabular}{@{}lr@{}}" in tex and "longtable" not in tex
    assert "clean & 0.975 \\\\" in tex


def test_a_wide_table_wraps_to_the_text_width() -> None:
    long = "a sentence long enough that it can never fit on one line of a table column " * 3
    df = pd.DataFrame(
        {f"column {i} with a long header": [long, "short"] for i in range(5)} | {"n": [1, 2]}
    )
    tex = export.to_latex(df, "Wide.", "tab:w")
    widths = _widths(tex)
    assert len(widths) == 6
    assert sum(widths) <= 1.0  # fractions of \linewidth, padding left over
    assert "\\RaggedRight" in tex and "\\raggedleft" in tex  # text wraps left, numbers right


def test_ids_may_break_after_underscores_slashes_and_plus_joins() -> None:
    df = pd.DataFrame(
        {"x": ["tfidf_domain_validity layerlab/extractive freshness+metadata +97.5"] * 3}
    )
    lay = export.layout(["x"], [[c] for c in df["x"]], width=60.0)
    assert lay.widths is not None
    tex = export.to_latex(df.assign(**{f"c{i}": "word " * 40 for i in range(6)}), "c", "tab:b")
    assert "tfidf\\_\\allowbreak{}domain" in tex and "layerlab/\\allowbreak{}extractive" in tex
    assert "freshness+\\allowbreak{}metadata" in tex and "+97.5" in tex  # numbers never split


def test_a_long_table_breaks_across_pages_and_a_very_wide_one_turns() -> None:
    tall = pd.DataFrame({"scenario": [f"s{i}" for i in range(120)], "rate": [0.5] * 120})
    assert "\\begin{longtable}" in export.to_latex(tall, "Tall.", "tab:t")
    wide = pd.DataFrame({f"numeric column {i}": [123456.789] for i in range(30)})
    tex = export.to_latex(wide, "Wide.", "tab:v")
    assert tex.startswith("\\begin{landscape}")


def test_a_long_wrapped_tables_notes_stay_with_its_last_rows() -> None:
    """A table as wide as the page that breaks across pages has its notes in longtable's last
    foot (set on the page of its last rows, never alone on a page of their own); a long table
    at its natural width has them under it; a target's block label is compact."""
    words = "tfidf_domain_validity and more words " * 2
    wide = pd.DataFrame({f"h{i}": [words] * 60 for i in range(6)})
    tex = export.to_latex(wide, "Wide and long.", "tab:w", notes="What the intervals assume.")
    assert "\\begin{longtable}" in tex and "p{" in tex
    foot = tex.split("\\endfoot\n", 1)[1].split("\\endlastfoot", 1)[0]
    assert foot.startswith("\\bottomrule\n\\multicolumn{6}{@{}p{0.98\\linewidth}@{}}")
    assert "\\textit{Notes.} What the intervals assume." in foot
    assert tex.count("Notes.") == 1
    narrow = pd.DataFrame({"s": [f"row {i}" for i in range(90)], "v": [0.25] * 90})
    tex = export.to_latex(narrow, "Long.", "tab:n", notes="N.")
    assert "\\endlastfoot" not in tex
    assert tex.split("\\end{longtable}\n", 1)[1].startswith("{\\noindent\\textit{Notes.} N.")
    blocks = pd.DataFrame({"block": [units.BLOCK_TARGETS], "rate": [0.5]})
    assert "targets & 0.500" in export.to_latex(blocks, "T.", "tab:b")


def test_latex_escapes_what_the_default_font_cannot_print() -> None:
    df = pd.DataFrame({"p": ["< 1e-10", "a|b", "x − y × z → w", "50%_#&"]})
    tex = export.to_latex(df, "p-values < 0.05", "tab:e")
    assert "\\ensuremath{<} 1e-10" in tex and "a\\ensuremath{|}b" in tex
    assert "\\ensuremath{-}" in tex and "\\ensuremath{\\times}" in tex
    assert "50\\%\\_\\#\\&" in tex
    assert not re.search(r"[^\x00-\x7f]", tex)


@pytest.mark.skipif(not TEX, reason="needs TeX")
def test_generated_latex_compiles_at_every_layout(tmp_path) -> None:
    """The four layouts (natural, wrapped, long, landscape) compile in the manuscript's preamble
    with no overfull box."""
    frames = {
        "natural": pd.DataFrame({"a": ["x_y"], "b": [1.5]}),
        "wrapped": pd.DataFrame(
            {f"h{i}": ["tfidf_domain_validity and more words " * 3] for i in range(6)}
        ),
        "long": pd.DataFrame({"s": [f"row {i}" for i in range(90)], "v": [0.25] * 90}),
        "landscape": pd.DataFrame({f"numeric column {i}": [123.456] for i in range(14)}),
        "long_wrapped": pd.DataFrame(
            {f"h{i}": [f"row {j} tfidf_domain_validity and more words " * 2 for j in range(40)]
             for i in range(6)}
        ),  # fmt: skip
    }
    (tmp_path / "tables").mkdir()
    preamble = MAIN.read_text(encoding="utf-8").split("\\begin{document}")[0]
    preamble = preamble.replace("\\graphicspath{{../figures/}}", "")
    body = []
    for name, df in frames.items():
        (tmp_path / "tables" / f"{name}.tex").write_text(
            export.to_latex(df, f"The {name} layout.", f"tab:{name}", notes="What 95% means."),
            encoding="utf-8",
        )
        body.append(f"\\input{{tables/{name}.tex}}")
    (tmp_path / "main.tex").write_text(
        preamble + "\\begin{document}\n" + "\n".join(body) + "\n\\end{document}\n", encoding="utf-8"
    )
    b = build.build(tmp_path / "main.tex", tmp_path / "build", tmp_path / "t.pdf")
    assert [str(p) for p in b.problems] == []
    shutil.rmtree(tmp_path / "build")


# --- the prose says only what the generated files hold (issue 33, item 5) -----------------------

VALUES = paths.COMMITTED_ARTIFACTS / "paper" / papervalues.VALUES_FILE
COMMITTED_TABLES = paths.COMMITTED_ARTIFACTS / "paper" / "tables"


def test_the_values_file_is_what_the_committed_tables_give() -> None:
    """One producer: the macro file is regenerated from the committed tables, archives and
    specs, byte for byte (a table that moves moves the prose's number with it)."""
    assert VALUES.read_text(encoding="utf-8") == papervalues.render(
        papervalues.values(COMMITTED_TABLES)
    ), "run `python -m layerlab.reporting.paper.papervalues` (or `layerlab reproduce`) and commit"
    body = MAIN.read_text(encoding="utf-8").split("\\begin{document}", 1)[1]
    assert body.lstrip().startswith(f"\\input{{{papervalues.VALUES_FILE.as_posix()}}}")


def test_the_prose_states_no_number_of_its_own() -> None:
    known = papervalues.macros(VALUES.read_text(encoding="utf-8"))
    assert papervalues.stray_numbers(MAIN.read_text(encoding="utf-8"), known) == []


def test_the_prose_states_no_verdict_the_tables_do_not_give() -> None:
    """A verdict about a named mitigation is a \\vVerdict macro, whose value is the current
    table's verdict; the vocabulary is read from the tables, not listed here."""
    words = papervalues.verdict_words(COMMITTED_TABLES)
    names = papervalues.mitigation_names(COMMITTED_TABLES)
    assert {"specific", "ineffective"} <= words and "validity resolution" in names
    tex = MAIN.read_text(encoding="utf-8")
    assert papervalues.stray_verdicts(tex, words, names) == []
    known = papervalues.macros(VALUES.read_text(encoding="utf-8"))
    used = set(re.findall(r"\\v(Verdict[A-Za-z]+)", papervalues.prose(tex)))
    assert used and used <= set(known)
    assert "user_table10_sized" in papervalues.VERDICT_TABLES
    for table in papervalues.VERDICT_TABLES:
        t = pd.read_csv(COMMITTED_TABLES / f"{table}.csv", dtype=str)
        for _, r in t.iterrows():
            prefix = papervalues.verdict_prefix(table, r["block"])
            assert prefix is not None, (table, r["block"])
            name = "Verdict" + prefix + "".join(w.title() for w in r["mitigation"].split("_"))
            assert known[name] == r["verdict"], (table, r["block"], r["mitigation"])


def test_the_checks_catch_a_stray_number_and_a_stray_verdict(tmp_path) -> None:
    known = papervalues.macros(VALUES.read_text(encoding="utf-8"))
    tex = (
        "\\begin{document}\\input{tables/table1.tex} Repair wins 3 of 16 tasks on "
        "\\vUserTasks{} tasks in \\vNoSuchValue, at twelve calls, over BM25 (two-way)."
        "% 42 in a comment\n Validity resolution is specific for the chain; the freshness guard"
        " is \\vVerdictUserFreshnessGuard. A mitigation is called inconclusive when unsure.\n"
    )
    nums = papervalues.stray_numbers(tex, known)
    assert [n.split(" ")[0] for n in nums] == ["\\vNoSuchValue", "'3'", "'16'", "'twelve'"]
    # the vocabulary comes from the tables: a table that gives "inconclusive" makes it one
    t = pd.read_csv(COMMITTED_TABLES / "user_table10.csv", dtype=str)
    t.loc[0, "verdict"] = "inconclusive (clean interval too wide)"
    t.to_csv(tmp_path / "user_table10.csv", index=False)
    words = papervalues.verdict_words(tmp_path)
    assert "inconclusive" in words
    names = papervalues.mitigation_names(tmp_path)
    found = papervalues.stray_verdicts(tex, words, names)
    assert len(found) == 1 and "'specific' for 'Validity resolution'" in found[0]
    found = papervalues.stray_verdicts(tex + " Repair is inconclusive here.", words, names)
    assert len(found) == 2 and "'inconclusive' for 'Repair'" in found[1]


def test_a_missing_table_is_one_line(tmp_path) -> None:
    with pytest.raises(papervalues.ValuesError, match=r"table1\.csv: missing") as e:
        papervalues.values(tmp_path)
    assert "\n" not in str(e.value)


def test_each_interval_the_prose_quotes_is_its_own_quantitys() -> None:
    """Issue 41: the abstract quoted the schema-drift gain with the margin's interval. The gain's
    macros are Table 5's repair-minus-strict cell, the margin's the margin table's, and the
    prose puts each interval beside its own quantity."""
    known = papervalues.macros(VALUES.read_text(encoding="utf-8"))
    block = papervalues.BLOCKS["Model"]
    t5 = pd.read_csv(COMMITTED_TABLES / "table5.csv", dtype=str)
    g = t5[t5["block"].str.startswith(block) & (t5["scenario"] == "schema_drift")].iloc[0]
    m = pd.read_csv(COMMITTED_TABLES / "specificity_margin.csv", dtype=str)
    m = m[m["block"].str.startswith(block)].iloc[0]
    want = {
        "ModelDriftGain": g["repair-strict (pp)"], "ModelDriftGainLow": g["95% low (pp)"],
        "ModelDriftGainHigh": g["95% high (pp)"], "ModelDriftMargin": m["margin (pp)"],
        "ModelDriftMarginLow": m["95% low (pp)"], "ModelDriftMarginHigh": m["95% high (pp)"],
    }  # fmt: skip
    assert {k: known[k] for k in want} == {k: f"{float(v):.1f}" for k, v in want.items()}
    flat = " ".join(papervalues.prose(MAIN.read_text(encoding="utf-8")).split())
    for q in ("Gain", "Margin"):
        assert re.search(rf"\\vModelDrift{q}\{{\}} pp,? \(?[^()]*?interval \\vModelDrift{q}Low\{{\}} "
                         rf"to \\vModelDrift{q}High", flat), q  # fmt: skip
