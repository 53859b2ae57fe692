"""The spec DSL: valid specs load; every kind of bad input gets one precise line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import paths
from layerlab.cli import app
from layerlab.corpus.spec import SpecError, load_domains, spec_hash

runner = CliRunner()


def _write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def _problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_domains(path)
    return [str(p) for p in info.value.problems]


def test_fixture_spec_is_valid(tmp_path: Path, good_spec_text: str) -> None:
    p = _write(tmp_path, "returns.yaml", good_spec_text)
    (d,) = load_domains(p)
    assert d.domain == "returns" and len(d.policies) == 2


def test_committed_specs_are_valid() -> None:
    domains = load_domains(paths.CORPUS_SPEC_DIR)
    assert [d.domain for d in domains] == sorted(
        ["returns", "pto", "support", "security", "finance", "hr", "legal", "it_ops"]
    )
    assert all(len(d.policies) == 10 for d in domains)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # unknown key, with the line it is on
        (
            "    topic: Approval",
            "    colour: red\n    topic: Approval",
            ":29: policies[1].colour: unknown key",
        ),
        # missing field
        ("    answer_kind: role\n", "", "policies[1].answer_kind: required field is missing"),
        # wrong type (a string where a year is expected)
        (
            "effective_year: 2023",
            'effective_year: "2023"',
            "policies[1].current.effective_year: expected int",
        ),
        # value the prose does not state
        (
            "value: Finance Controller",
            "value: Chief Financial Officer",
            "policies[1].current: the prose must state the value 'Chief Financial Officer'",
        ),
        # duplicate id
        ("id: returns-02", "id: returns-01", "duplicate policy id 'returns-01'"),
        # an answer kind outside the DSL
        (
            "answer_kind: role",
            "answer_kind: colour",
            "policies[1].answer_kind: Input should be 'duration'",
        ),
        # a version's prose stating the other version's value
        (
            "Agents log the approval",
            "Previously the Customer Service Manager did this. Agents log the approval",
            "current.prose also states the superseded value",
        ),
        # years out of order
        (
            "effective_year: 2023",
            "effective_year: 2019",
            "must be later than superseded.effective_year (2020)",
        ),
        # two questions instead of three
        (
            "      - Who gives written approval when a single order's payout is unusually large?\n",
            "",
            "policies[1].questions: List should have at least 3 items",
        ),
    ],
)
def test_bad_spec_names_file_field_and_expectation(
    tmp_path: Path, good_spec_text: str, old: str, new: str, expected: str
) -> None:
    assert old in good_spec_text
    p = _write(tmp_path, "returns.yaml", good_spec_text.replace(old, new, 1))
    problems = _problems(p)
    assert any(expected in line for line in problems), problems
    assert all(line.startswith(str(p)) for line in problems)


def test_invalid_yaml_reports_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "returns.yaml", "domain: returns\npolicies: [\n  - {id: x\n")
    (line,) = _problems(p)
    assert line.startswith(f"{p}:") and "not valid YAML" in line


def test_cross_file_problems(tmp_path: Path, good_spec_text: str) -> None:
    _write(tmp_path, "returns.yaml", good_spec_text)
    # same domain twice, under a file name that does not match, sharing a cue word
    _write(tmp_path, "zz.yaml", good_spec_text)
    problems = _problems(tmp_path)
    joined = "\n".join(problems)
    assert "duplicate domain 'returns'" in joined
    assert "must match the file name 'zz'" in joined
    assert "duplicate policy id 'returns-01'" in joined


def test_cli_spec_check_exits_nonzero_without_traceback(
    tmp_path: Path, good_spec_text: str
) -> None:
    p = _write(tmp_path, "returns.yaml", good_spec_text.replace("owner: Customer Operations\n", ""))
    result = runner.invoke(app, ["spec", "check", str(p)])
    assert result.exit_code == 1
    assert "owner: required field is missing" in result.output
    assert "Traceback" not in result.output


def test_cli_spec_check_ok() -> None:
    result = runner.invoke(app, ["spec", "check", str(paths.CORPUS_SPEC_DIR)])
    assert result.exit_code == 0, result.output
    assert "8 domain(s), 80 policy unit(s)" in result.output


def test_spec_hash_changes_with_content(tmp_path: Path, good_spec_text: str) -> None:
    p = _write(tmp_path, "returns.yaml", good_spec_text)
    h1 = spec_hash(tmp_path)
    p.write_text(good_spec_text + "\n# comment\n")
    assert spec_hash(tmp_path) != h1


def test_duplicate_yaml_keys_are_refused_with_their_line(tmp_path: Path, good_spec_text: str) -> None:
    text = good_spec_text.replace("title:", "owner: Someone Else\ntitle:", 1)
    p = tmp_path / "returns.yaml"
    p.write_text(text)
    first = text.splitlines().index("owner: Someone Else") + 1
    second = text.splitlines().index("owner: Customer Operations") + 1
    (line,) = _problems(p)
    assert line.startswith(f"{p}:{second}: owner: duplicate key 'owner' (first at line {first})")


def test_duplicate_policy_id_is_reported_at_its_own_line(
    tmp_path: Path, good_spec_text: str
) -> None:
    text = good_spec_text.replace("id: returns-02", "id: returns-01")
    p = tmp_path / "returns.yaml"
    p.write_text(text)
    lineno = [i for i, ln in enumerate(text.splitlines(), 1) if "id: returns-01" in ln][1]
    (line,) = _problems(p)
    assert line.startswith(f"{p}:{lineno}: policies[1].id: duplicate policy id 'returns-01'")


def test_lint_flags_a_question_its_document_cannot_answer(tmp_path: Path) -> None:
    from layerlab.corpus.spec import lint_questions

    assert lint_questions(load_domains(paths.CORPUS_SPEC_DIR)) == []
    text = (paths.CORPUS_SPEC_DIR / "legal.yaml").read_text()
    good = "What is the turnaround for a mutual confidentiality agreement submitted through the intake form?"
    bad = "What is the turnaround for a mutual confidentiality agreement when hiring a contractor?"
    assert good in text
    p = _write(tmp_path, "legal.yaml", text.replace(good, bad))
    (finding,) = lint_questions(load_domains(p))
    assert finding.policy_id == "legal-02" and finding.question == 1
    assert finding.words == ("hiring", "contractor")
    result = runner.invoke(app, ["spec", "lint", str(p)])
    assert result.exit_code == 1
    assert "legal-02 questions[1] uses words its current document does not contain" in result.output
    assert "hiring, contractor" in result.output and "Traceback" not in result.output


def test_cli_spec_lint_passes_on_committed_specs() -> None:
    result = runner.invoke(app, ["spec", "lint"])
    assert result.exit_code == 0, result.output
    assert "does not contain" not in result.output


def test_declared_paraphrases_must_be_words() -> None:
    from pydantic import ValidationError

    from layerlab.corpus.spec import PolicySpec

    (d,) = [x for x in load_domains(paths.CORPUS_SPEC_DIR) if x.domain == "finance"]
    data = d.policies[4].model_dump()
    data["paraphrases"] = ["Vendor bill"]
    with pytest.raises(ValidationError):
        PolicySpec.model_validate(data)


def test_current_prose_must_state_its_value_as_written(tmp_path: Path, good_spec_text: str) -> None:
    # "45-days" states the value for the reader (normalised, "45 days") but cannot be replaced
    # as written, so another tenant's version could not be derived from it
    assert "within 45 days of the delivery date" in good_spec_text
    text = good_spec_text.replace("within 45 days of the", "within 45-days of the")
    p = _write(tmp_path, "returns.yaml", text)
    (line,) = _problems(p)
    assert "returns.yaml:" in line and "current.prose must state '45 days' as written" in line
