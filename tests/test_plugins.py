"""Plug-ins by entry point: an installed package adds a mitigation and gets its Table 10 row with
no edit inside ``layerlab/``; a broken plug-in is one clear error line, never an import-time
failure."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from layerlab import mitigations, paths
from layerlab.corpus.spec import SpecError

PLUGIN_PKG = Path(__file__).parent / "fixtures" / "plugin_pkg"


def _python(code: str, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` with ``site`` (where plug-ins are installed) on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site), *filter(None, [env.get("PYTHONPATH", "")]), str(paths.ROOT)]
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=paths.ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy plug-in installed by pip into a folder of its own (built from a copy, so that the
    build leaves nothing in the fixture)."""
    tmp = tmp_path_factory.mktemp("plugin")
    src = shutil.copytree(PLUGIN_PKG, tmp / "src")
    target = tmp / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target), str(src)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return target


@pytest.fixture(scope="module")
def toy_run(site: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``mitigation run --mitigation toy_guard`` with the plug-in installed, made once for the
    tests that read it (each copies it before it changes anything): the folder and its stdout."""
    run = tmp_path_factory.mktemp("toy") / "run"
    res = _python(
        "import sys; from layerlab.cli import main; sys.exit(main(sys.argv[1:]))",
        site,
        *("mitigation", "run", "--out", str(run), "--mitigation", "toy_guard"),
    )
    assert res.returncode == 0, res.stderr
    return run, res.stdout


_TABLE10 = """
import json, sys
from layerlab.analysis import specificity
from layerlab.reporting.paper import tables
df = specificity.matrix_frame([sys.argv[1]])
mx = specificity.matrix(df, n_boot=200)
row = tables.table10(mx, df).set_index("mitigation").loc["toy_guard"]
print("ROW " + json.dumps({k: str(v) for k, v in row.items()}))
"""


def test_an_installed_plugin_mitigation_gets_its_table10_row(
    site: Path, toy_run: tuple[Path, str]
) -> None:
    listed = _python("from layerlab.cli import main; main(['mitigation', 'list'])", site)
    assert listed.returncode == 0, listed.stderr
    assert "toy_guard" in listed.stdout and "toy_partial_refusal" in listed.stdout
    run, said = toy_run
    assert "arms: strict, toy_guard" in said
    hashes = json.loads((run / "manifest.json").read_text())["spec_hashes"]
    assert set(hashes) == {"corpus", "scenarios", "mitigations", "mitigations:toy"}  # its arms file
    t10 = _python(_TABLE10, site, str(run))
    assert t10.returncode == 0, t10.stderr
    row = json.loads(t10.stdout.split("ROW ", 1)[1])
    assert row["layer(s)"] == "completeness" and row["stage"] == "reader_input"
    assert row["target scenario(s)"] == "partial_timeout" and row["verdict"] == "specific"


def _broken_site(tmp_path: Path) -> Path:
    """A plug-in whose module fails to import, its dist-info written by hand."""
    site = tmp_path / "site"
    dist = site / "broken_plugin-0.2.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.2\n")
    (dist / "entry_points.txt").write_text("[layerlab]\nguards = broken_layerlab_plugin\n")
    (site / "broken_layerlab_plugin.py").write_text('raise ImportError("needs a newer layerlab")\n')
    return site


def test_a_broken_plugin_is_one_clear_error_and_never_an_import_failure(tmp_path: Path) -> None:
    site = _broken_site(tmp_path)
    imported = _python(
        "import layerlab, layerlab.mitigations, layerlab.faults.scenario, "
        "layerlab.system.retrieval, layerlab.system.reader, layerlab.cli; print('ok')",
        site,
    )
    assert imported.returncode == 0 and imported.stdout.strip() == "ok", imported.stderr
    res = _python("import sys; from layerlab.cli import main; sys.exit(main(sys.argv[1:]))", site,
                  "scenario", "list")  # fmt: skip
    assert res.returncode == 1 and res.stdout == ""
    [line] = res.stderr.splitlines()
    assert line == (
        "error: layerlab plug-in guards = 'broken_layerlab_plugin' (distribution broken-plugin "
        "0.2) failed to load: ImportError: needs a newer layerlab at "
        f"{site.resolve() / 'broken_layerlab_plugin.py'}:1 in <module>"
    )  # the plug-in's own line (it is not under site-packages here)
    again = _python(
        textwrap.dedent(
            """\
            from layerlab.mitigations import KINDS
            from layerlab.registry import PluginError
            for _ in range(2):  # the failure is kept: no run goes on with part of a plug-in
                try:
                    KINDS["contract"]
                except PluginError as exc:
                    print("PluginError", "broken-plugin 0.2" in str(exc))
            """
        ),
        site,
    )
    assert again.stdout.split("\n")[:2] == ["PluginError True"] * 2, again.stderr


def test_a_plugin_arms_file_problem_names_its_file_and_line(tmp_path: Path) -> None:
    arms = tmp_path / "arms.yaml"
    arms.write_text(
        "mitigations:\n  - name: freshness_guard\n    kind: contract\n"
        "  - name: odd\n    kind: no_such_kind\n"
    )
    mitigations.ARM_FILES.register(arms, "zz_test")
    try:
        with pytest.raises(SpecError) as exc:
            mitigations.load_mitigations()
    finally:
        mitigations.ARM_FILES._items.pop("zz_test")
    assert [str(p) for p in exc.value.problems] == [
        f"{arms}:2: mitigations[0].name: duplicate name 'freshness_guard'",
        f"{arms}:5: mitigations[1].kind: unknown mitigation kind 'no_such_kind'; expected one of "
        f"{sorted(mitigations.KINDS)}",
    ]
    assert "zz_test" not in mitigations.load_mitigations().arms


_CLI = "import sys; from layerlab.cli import main; sys.exit(main(sys.argv[1:]))"


def _plain(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with no plug-in importable (the site folder not on the path)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH", ""), str(paths.ROOT)]))
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args], cwd=paths.ROOT, capture_output=True, text=True,
        env=env, timeout=600,
    )  # fmt: skip


def test_a_plugin_arm_keeps_its_verdict_when_the_plugin_is_gone(
    site: Path, tmp_path: Path, toy_run: tuple[Path, str]
) -> None:
    """Issue 34 item 4: the manifest keeps each arm's definition (the plug-in's distribution
    and version too); recompute, gate and report read it from there, not from what is
    importable."""
    run = shutil.copytree(toy_run[0], tmp_path / "run")
    arms = json.loads((run / "manifest.json").read_text())["mitigation_arms"]
    assert arms["baseline"] == "strict"
    assert arms["arms"]["toy_guard"] == {
        "kinds": ["toy_partial_refusal"], "layers": ["completeness"], "stages": ["reader_input"],
        "stack": False, "matrix": True,
        "plugins": [{"distribution": "layerlab-toy-plugin", "version": "0.1.0"}],
    }  # fmt: skip
    assert "plugins" not in arms["arms"]["strict"]

    def verdicts(run_cli: object, out: str) -> tuple[str, int]:
        rec = run_cli(  # type: ignore[operator]
            "recompute", str(run), "--matrix", str(run), "--out", str(tmp_path / out),
            "--n-boot", "200", "--json",
        )  # fmt: skip
        assert rec.returncode == 0, rec.stderr
        verdict = json.loads(rec.stdout.split("\nnote:")[0])["specificity_matrix"]["toy_guard"]
        gate = run_cli("gate", str(run), "--no-over-broad", "--n-boot", "200")  # type: ignore[operator]
        page = tmp_path / f"{out}.html"
        rep = run_cli("report", str(run), "--out", str(page))  # type: ignore[operator]
        assert rep.returncode == 0, rep.stderr
        said = re.findall(r"— ([a-z -]+?): [^<]*?toy_guard \(", page.read_text())
        return verdict, gate.returncode, said

    with_plugin = verdicts(lambda *a: _python(_CLI, site, *a), "with")
    without = verdicts(_plain, "without")
    assert with_plugin == without == ("specific", 0, ["specific"])
    # and the plug-in really is gone for the second pair: listing the mitigations lacks it
    assert "toy_guard" not in _plain("mitigation", "list").stdout


def test_an_arm_known_neither_by_its_manifest_nor_the_spec_is_bad_input(
    site: Path, tmp_path: Path, toy_run: tuple[Path, str]
) -> None:
    from layerlab import archive
    from layerlab.mitigations import book

    run = shutil.copytree(toy_run[0], tmp_path / "run")
    m = archive.read_manifest(run)
    del m[book.KEY]  # as a manifest written before the key existed
    archive.write_manifest(run, m)
    for args in (
        ("recompute", str(run), "--matrix", str(run), "--out", str(tmp_path / "o"), "--n-boot", "200"),
        ("gate", str(run), "--no-over-broad", "--n-boot", "200"),
        ("compare", str(run), "--matrix", "--n-boot", "200"),
    ):  # fmt: skip
        res = _python(_CLI, site, *args)  # even with the plug-in installed
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "'toy_guard'" in lines[0], lines
        assert "neither the manifest (mitigation_arms) nor the shipped mitigation spec" in lines[0]
    assert not (tmp_path / "o").exists()


def test_a_broken_plugins_error_goes_through_the_one_redactor(tmp_path: Path) -> None:
    site = _broken_site(tmp_path)
    key = "sk-" + "a1b2c3d4" * 3
    (site / "broken_layerlab_plugin.py").write_text(
        f'raise ImportError("cannot reach postgres://admin:hunter2pw@db/vec with {key}")\n'
    )
    res = _python("import sys; from layerlab.cli import main; sys.exit(main(sys.argv[1:]))", site,
                  "scenario", "list")  # fmt: skip
    assert res.returncode == 1 and key not in res.stderr and "hunter2pw" not in res.stderr
    assert "failed to load: ImportError: cannot reach postgres://(secret: not stored)@db" in res.stderr
