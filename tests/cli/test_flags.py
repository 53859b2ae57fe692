"""Flags and messages: a short flag means one thing in every command; a misspelt name gets a
suggestion that fits what was typed."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
import typer

from layerlab.cli import app, main
from layerlab.cli.app import SHORT_FLAGS
from layerlab.registry import did_you_mean


def _commands(cmd, path=("layerlab",)):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _short_flags() -> dict[str, set[tuple[str, str]]]:
    """short flag -> {(command, the long flag it stands for)} over every command."""
    seen: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path, cmd in _commands(typer.main.get_command(app)):
        for p in cmd.params:
            names = [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]
            shorts = [n for n in names if re.fullmatch(r"-[A-Za-z0-9]", n)]
            longs = [n for n in names if n.startswith("--")]
            for s in shorts:
                seen[s].add((" ".join(path), longs[0] if longs else "(none)"))
    return seen


def test_every_short_flag_means_one_thing_in_every_command() -> None:
    seen = _short_flags()
    meanings = {s: {long for _, long in uses} for s, uses in seen.items()}
    assert all(len(m) == 1 for m in meanings.values()), meanings
    # and it is the documented one, used where a command takes that option
    assert {s: m.pop() for s, m in meanings.items()} == SHORT_FLAGS
    commands = {c for uses in seen.values() for c, _ in uses}
    assert {"layerlab run live", "layerlab study langchain"} <= commands


@pytest.mark.parametrize("command", [["run", "deterministic"], ["mitigation", "run"]])
def test_minus_m_is_not_a_mitigation_and_says_what_to_use(capsys, tmp_path, command) -> None:
    rc = main([*command, "--out", str(tmp_path / "x"), "-m", "strict"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "No such option: -m (-m is --model" in err and "a mitigation is --mitigation" in err
    assert not (tmp_path / "x").exists()


def test_did_you_mean() -> None:
    assert (
        did_you_mean("wrong_sesion", ["clean", "wrong_session"])
        == " (did you mean 'wrong_session'?)"
    )
    assert did_you_mean("STRICT", ["strict", "repair"]) == " (did you mean 'strict'?)"
    assert did_you_mean("zzz", ["strict", "repair"]) == ""


ONE = ["--tasks", "hr-01-q1", "--scenario", "clean", "--no-progress"]


@pytest.mark.parametrize(
    "args, line",
    [
        # a registered local model typed without its provider: local/, not a hosted example
        (["-m", "smollm2-135m"], "--model: 'smollm2-135m' names no provider (did you mean 'local/smollm2-135m'?)"),
        (["-m", "extractive"], "names no provider (did you mean 'layerlab/extractive'?)"),
        (["-m", "gpt-4o-mini"], "names no provider (write provider/name, e.g. openai/gpt-4o-mini)"),
        (["-m", "local/smolm2-135m"], "unknown local model 'smolm2-135m' (did you mean 'smollm2-135m'?)"),
        (["-m", "opnai/gpt-4o-mini"], "unknown provider 'opnai' in 'opnai/gpt-4o-mini' (did you mean 'openai'?)"),
        (["-m", "layerlab/extractve"], "unknown reference agent 'layerlab/extractve' (did you mean 'layerlab/extractive'?)"),
        (["-m", "layerlab/extractive", "--scenario", "wrong_sesion"], "(did you mean 'wrong_session'?)"),
        (["-m", "layerlab/extractive", "--mitigation", "stict"], "unknown mitigation 'stict' (did you mean 'strict'?)"),
    ],
)  # fmt: skip
def test_live_run_names_get_suggestions_that_fit(capsys, tmp_path, args, line) -> None:
    out = tmp_path / "run"
    rc = main(["run", "live", *args, "--out", str(out), *ONE])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 1 and len(err) == 1 and line in err[0], err
    assert "openai/gpt-4o-mini" not in err[0] or "gpt-4o-mini" in " ".join(args)
    assert not out.exists()


@pytest.mark.parametrize(
    "args, line",
    [
        (["run", "deterministic", "--retriever", "tfidf_domain_valdity"], "--retriever: unknown retriever 'tfidf_domain_valdity' (did you mean 'tfidf_domain_validity'?)"),
        (["mitigation", "run", "--reader", "extractve"], "--reader: unknown reader 'extractve' (did you mean 'extractive'?)"),
        (["rn"], "No such command 'rn'. Did you mean 'run'?"),
        (["run", "liv"], "No such command 'liv'. Did you mean 'live'?"),
    ],
)  # fmt: skip
def test_other_names_and_subcommands_get_suggestions(capsys, tmp_path, args, line) -> None:
    out = tmp_path / "x"
    extra = ["--out", str(out)] if len(args) > 2 else []
    rc = main([*args, *extra])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc in (1, 2) and len(err) == 1 and line in err[0], err
    assert not out.exists()


def test_every_help_page_fits_80_columns_whole(monkeypatch, capsys) -> None:
    """At 80 columns every command's --help keeps each flag name whole (not cut to
    ``--target-versi…``, not split at a hyphen across two lines), shows no raw markup and no
    line wider than the terminal."""
    monkeypatch.setenv("COLUMNS", "80")
    broken = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*-$")
    metavar = re.compile(r"\{[\w.]+\}")  # typer's {RUN}, {PATH...}: click writes RUN, PATH...
    bad = []
    for path, _cmd in _commands(typer.main.get_command(app)):
        assert main([*path[1:], "--help"]) in (0, None)
        for line in capsys.readouterr().out.splitlines():
            raw = any(m in line for m in ("``", "\\[", "<list[")) or metavar.search(line)
            if len(line) > 80 or "…" in line or raw or broken.search(line.rstrip()):
                bad.append(f"{' '.join(path)}: {line!r}")
    assert not bad, "\n".join(bad[:20])


def _sections(text: str) -> dict[str, list[str]]:
    """A help page's sections: heading -> the flag names listed under it."""
    out: dict[str, list[str]] = {}
    heading = ""
    for line in text.splitlines():
        if re.fullmatch(r"\S.*:", line):
            heading = line[:-1]
            out[heading] = []
        elif heading and re.match(r"  -", line):
            out[heading] += re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", line.split("  ")[1])
    return out


@pytest.mark.parametrize(
    ("command", "panels"),
    [
        (["run", "live"], ["What to test", "The matrix", "Output and resume", "Agent mode",
                           "Calls and failures", "Decoding", "Until decided"]),
        (["gate"], ["Rate thresholds", "Table 10 verdicts", "Input and output"]),
    ],
)  # fmt: skip
def test_long_commands_list_their_options_by_topic(monkeypatch, capsys, command, panels) -> None:
    """``run live`` (40 flags) and ``gate`` list every option under a topic heading; only
    ``--help`` is left under "Options"."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main([*command, "--help"]) in (0, None)
    sections = _sections(capsys.readouterr().out)
    assert [h for h in sections if h not in ("Usage: layerlab " + " ".join(command) + " [OPTIONS]",
                                             "Arguments")] == [*panels, "Options"]  # fmt: skip
    assert sections["Options"] == ["--help"]
    cmd = typer.main.get_command(app)
    for name in command:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    # every option but a hidden earlier name (``--replicates``: ``--epochs``)
    declared = {p.opts[0] for p in cmd.params if p.param_type_name == "option" and not p.hidden}
    listed = [f for h in panels for f in sections[h]]
    assert declared <= set(listed), declared - set(listed)
    assert "--model" in sections.get("What to test", ["--model"])


def test_help_is_formatted_through_the_public_hooks(monkeypatch) -> None:
    """The help formatter is the commands' context's (``Context.formatter_class``): importing
    the CLI patches no module of typer's or click's; a flag name and a path with hyphens are
    never split at a line end, and the docstrings' ````code```` quotes are dropped."""
    from typer._click import formatting  # only to see that it is left alone

    from layerlab.cli.help import Context, PlainFormatter

    assert formatting.wrap_text.__module__ == formatting.__name__
    assert Context.formatter_class is PlainFormatter
    f = PlainFormatter(width=56)
    f.write_text("Run ``layerlab gate`` with --max-error-rate-of-the-run at /work/my-long-checkout-name/x.")
    f.write_dl([("--max-error-rate <float>", "Exit 4 above --max-error-rate (see /a/b-c/d-e/f-g/h).")])
    text = f.getvalue()
    assert "``" not in text and "\u2011" not in text
    words = text.split()
    assert "--max-error-rate-of-the-run" in words and "/work/my-long-checkout-name/x." in words
    assert all(not w.endswith("-") for w in words), text
