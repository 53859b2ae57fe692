"""The one run configuration (layerlab/harness/config.py): its two doors give the same
configuration for the same settings, a bad value is one line naming the flag (or the file and
field), the command line only parses and calls the library, and ``--limit`` picks the tasks it
always picked."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from layerlab import paths
from layerlab.cli.app import main
from layerlab.harness.config import (
    ConfigError,
    ConfigProblems,
    Inputs,
    Matrix,
    ModelGroup,
    RunConfig,
    System,
)
from layerlab.harness.live import run_id_for
from layerlab.harness.selection import select_tasks, stratified_tasks

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def inputs() -> Inputs:
    return Inputs()


def _flags(out: Path, **more) -> dict:
    return {"out": out, "model": ["layerlab/extractive"], **more}


def test_the_two_doors_give_equal_configurations(tmp_path: Path, inputs: Inputs) -> None:
    out = tmp_path / "run"
    cli = RunConfig.from_cli(_flags(
        out, scenario=["clean", "stale_index"], mode=["strict"], limit=5, limit_seed=2, epochs=2,
        budget=40, concurrency=3, retry_seed=4, max_error_rate=0.1, timeout=60.0, max_tokens=300,
        temperature=0.0, seed=7, response_format="json_schema", retriever="bm25",
    ), inputs=inputs)  # fmt: skip
    f = tmp_path / "run.yaml"
    f.write_text(
        "models: [{model: layerlab/extractive}]\nscenarios: [clean, stale_index]\n"
        "mitigations: [strict]\nlimit: 5\nlimit_seed: 2\nepochs: 2\nbudget: 40\nconcurrency: 3\n"
        "retry_seed: 4\nmax_error_rate: 0.1\nretriever: bm25\n"
        "defaults: {timeout: 60.0, max_tokens: 300, temperature: 0.0, seed: 7, "
        "response_format: json_schema}\n"
    )
    yml = RunConfig.from_yaml(f, out=out, inputs=inputs)
    assert yml.outputs.config_file == f and cli.outputs.config_file is None
    assert dataclasses.replace(yml, outputs=cli.outputs) == cli
    (a,), (b,) = (c.groups(inputs.corpus.tasks, list(inputs.scenarios)) for c in (cli, yml))
    assert a.config == b.config and len(a.config.task_ids) == 5
    h = "x"  # the same configuration is the same run
    assert run_id_for(a.config, inputs.corpus, h) == run_id_for(b.config, inputs.corpus, h)


def test_the_python_door_is_the_constructor(tmp_path: Path, inputs: Inputs) -> None:
    config = RunConfig(System((ModelGroup(("layerlab/extractive",)),)), Matrix(limit=3))
    (g,) = config.groups(inputs.corpus.tasks, ["clean"])
    assert g.config.mitigations == ("strict", "repair") and g.folder == ""
    assert g.config.task_ids == stratified_tasks(inputs.corpus.tasks, 3)


def test_a_bad_value_is_one_line_naming_the_field(tmp_path: Path, inputs: Inputs) -> None:
    tasks, names = inputs.corpus.tasks, list(inputs.scenarios)
    n = len(tasks)
    cli = RunConfig.from_cli(_flags(tmp_path / "r", limit=n + 1), inputs=inputs)
    with pytest.raises(ConfigError) as exc:
        cli.groups(tasks, names)
    assert str(exc.value) == (f"--limit {n + 1}: only {n} tasks to choose from (expected 1 to "
                              f"{n}; leave --limit out to ask them all)")  # fmt: skip
    py = RunConfig(System((ModelGroup(("layerlab/extractive",)),)), Matrix(mitigations=("strct",)))
    with pytest.raises(ConfigError, match=r"^mitigations: unknown mitigation 'strct'") as exc:
        py.groups(tasks, names)
    assert "\n" not in str(exc.value)
    f = tmp_path / "run.yaml"
    f.write_text(f"models: [{{model: layerlab/extractive}}]\n\nlimit: {n + 1}\n")
    with pytest.raises(ConfigProblems) as bad:
        RunConfig.from_yaml(f, out=tmp_path / "r", inputs=inputs)
    assert str(bad.value) == (f"{f}:3: limit: {n + 1} tasks asked, only {n} to choose from "
                              f"(expected 1 to {n}; leave limit out to ask them all)")  # fmt: skip
    with pytest.raises(ConfigError, match=r"^--epochs 0: expected a whole number >= 1$"):
        RunConfig.from_cli(_flags(tmp_path / "r", epochs=0), inputs=inputs).groups(tasks, names)
    with pytest.raises(ConfigError, match="--max-steps: an agent-mode setting") as usage:
        RunConfig.from_cli(_flags(tmp_path / "r", max_steps=3), {"max_steps"})
    assert usage.value.usage  # the CLI's exit 2
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("flags", "given", "code"),
    [
        (["--limit", "100000"], (), 1),
        (["--mitigation", "strct"], (), 1),
        (["--max-steps", "3"], ("max_steps",), 2),
        (["--tasks", "nope"], (), 1),
        (["--budget", "-1"], (), 1),
        (["--specific", "strict"], ("specific",), 2),
        (["--until-decided", "--mitigation", "strict", "--mitigation", "repair",
          "--specific", "repair", "--limit", "3"], (), 2),
    ],
)  # fmt: skip
def test_the_command_line_says_what_the_library_refuses(capsys, tmp_path: Path, inputs: Inputs,
                                                        flags, given, code) -> None:  # fmt: skip
    """Every refusal ``run live`` prints is the library's line, and its exit code."""
    out = tmp_path / "r"
    args = ["run", "live", "-m", "layerlab/extractive", "--out", str(out), "--no-progress", *flags]
    assert main(args) == code
    err = capsys.readouterr().err.strip()
    params = _flags(out, **_parsed(flags))
    with pytest.raises(ConfigError) as exc:
        RunConfig.from_cli(params, set(given), inputs).groups(inputs.corpus.tasks, list(inputs.scenarios))
    assert err == f"error: {exc.value}" and exc.value.usage == (code == 2)


def _parsed(flags: list[str]) -> dict:
    """The few flags the refusals above give, as the command line parses them."""
    d: dict = {}
    it = iter(flags)
    for f in it:
        name = {"--mitigation": "mode", "--until-decided": "until_decided"}.get(f, f[2:].replace("-", "_"))
        if name == "until_decided":
            d[name] = True
        elif name in ("mode", "specific"):
            d.setdefault(name, []).append(next(it))
        else:
            v = next(it)
            d[name] = int(v) if v.lstrip("-").isdigit() else v
    return d


def test_the_command_line_only_parses_and_calls_the_library() -> None:
    """``cli/run.py``'s ``run live`` checks nothing itself: no task selection, no arm lookup, no
    refusal of its own wording (its errors are the library's, passed through)."""
    tree = ast.parse((ROOT / "layerlab/cli/run.py").read_text(encoding="utf-8"))
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "run_live")
    text = "\n".join(ast.unparse(s) for s in fn.body)  # its statements (not the flags' help)
    for word in ("stratified", "select_tasks", ".arm(", "load_mitigations", "RunSettings(",
                 "LiveConfig(", "get_parameter_source"):  # fmt: skip
        assert word not in text, word
    literal = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func) in
               ("_fail", "_usage") and n.args and isinstance(n.args[0], ast.Constant | ast.JoinedStr)]  # fmt: skip
    assert not literal, [ast.unparse(n) for n in literal]


@pytest.mark.parametrize("named", [None, ("hr-01-q1", "finance-01-q1", "hr-02-q1", "legal-01-q1")])
@pytest.mark.parametrize(("n", "seed"), [(1, 0), (3, 0), (3, 5), (4, 1), (24, 0), (60, 11)])
def test_limit_picks_the_tasks_it_picked_before(inputs: Inputs, named, n, seed, tmp_path) -> None:
    tasks = inputs.corpus.tasks
    pool = [t for t in tasks if named is None or t.task_id in set(named)]  # the CLI's old code
    if n > len(pool):
        return
    before = stratified_tasks(pool, n, seed)
    assert select_tasks(tasks, named, n, seed) == before
    flags = _flags(tmp_path / "r", limit=n, limit_seed=seed,
                   tasks=None if named is None else ",".join(named))  # fmt: skip
    (g,) = RunConfig.from_cli(flags, inputs=inputs).groups(tasks, ["clean"])
    assert g.config.task_ids == before


def test_the_inputs_default_to_the_committed_corpus(inputs: Inputs) -> None:
    assert inputs.corpus_dir == Path(paths.CORPUS_DIR) and "clean" in inputs.scenarios


def test_several_scenario_files_are_read_together_and_named_in_the_hash(tmp_path: Path) -> None:
    from layerlab.corpus.spec import spec_hash
    from layerlab.faults.scenario import load_scenarios

    one, two = paths.SCENARIO_SPEC, paths.TRANSPORT_SCENARIO_SPEC
    both = Inputs(paths.CORPUS_DIR, one, two)
    assert list(both.scenarios) == [*load_scenarios(one), *load_scenarios(two)]
    assert both.scenarios["service_outage@0.25"].spec.layer == "transport"  # variants resolve
    assert Inputs().scenario_hash == spec_hash(one)  # one file: the hash every run had
    assert both.scenario_hash == f"{spec_hash(one)}+{spec_hash(two)}"
    with pytest.raises(ConfigError, match=r"--scenarios .*scenarios.yaml: scenario\(s\) clean,"):
        _ = Inputs(paths.CORPUS_DIR, one, one).scenarios
    cfg = RunConfig.from_cli(_flags(tmp_path / "run", scenarios_path=[one, two]), inputs=both)
    assert (cfg.matrix.scenarios_path, cfg.matrix.more_scenarios) == (one, (two,))
    (g,) = cfg.groups(both.corpus.tasks, list(both.scenarios), both.scenarios)
    assert "rate_limited" in g.config.scenarios and "clean" in g.config.scenarios
