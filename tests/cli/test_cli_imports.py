"""Start-up: commands that make no model call never import litellm (seconds of import, and a
network-reaching library a user did not ask for). Checked in fresh interpreters, since this test
process may already have imported it for other tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from layerlab import paths

sys.path.insert(0, str(Path(__file__).parents[1]))
from bench.suite import CLI_COMMANDS, probe_command  # noqa: E402

_RUN_ALL = """
import json, sys
from layerlab.cli import main
out = []
for args in json.loads(sys.argv[1]):
    rc = main(args)
    out.append([args, rc, sorted(m for m in ("litellm", "openai", "pandas") if m in sys.modules)])
sys.__stdout__.write("\\nRESULT " + json.dumps(out) + "\\n")
"""


def _fresh(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=paths.ROOT, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def test_importing_the_cli_does_not_import_litellm() -> None:
    proc = _fresh("import sys, layerlab.cli; print(sorted(m for m in sys.modules if 'litellm' in m))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_help_in_a_subprocess_does_not_import_litellm() -> None:
    wall, rc, heavy = probe_command(["--help"])
    assert rc == 0
    assert "litellm" not in heavy and "openai" not in heavy
    assert "pandas" not in heavy and "sklearn" not in heavy  # --help needs neither


def test_model_free_commands_never_import_litellm(tmp_path) -> None:
    """Every command of the benchmark's model-free list, doing its real work, one after another
    in one interpreter: none imports litellm, and each succeeds."""
    cmds = [[a.format(tmp=tmp_path) for a in c] for c in CLI_COMMANDS]
    assert any(c[0] == "recompute" for c in cmds) and any(c[0] == "reproduce" for c in cmds)
    proc = _fresh(_RUN_ALL, json.dumps(cmds))
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, proc.stderr[-2000:]
    results = json.loads(line[-1][len("RESULT ") :])
    for args, rc, imported in results:
        assert rc in (0, None), (args, rc, proc.stderr[-2000:])
        assert "litellm" not in imported and "openai" not in imported, (
            f"layerlab {' '.join(args)} imported {imported}"
        )
    # the probe does see imports: printing Table 1 needs pandas, and it shows up
    assert "pandas" in dict((" ".join(a), i) for a, _, i in results)["scenario list"]

