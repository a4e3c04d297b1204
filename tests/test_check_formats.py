"""Diagnostics for machines (issue 30, item 1): `eairc check --format json|sarif` and
`eairc fmt -` (standard input to standard output, for an editor's format-on-save).

The JSON and SARIF outputs carry what the text shows — code, severity, file, range,
message, hint — for the same worlds and with the same exit code; SARIF's shape is
checked here field by field against the parts of the 2.1.0 format it uses (the
official JSON schema is not vendored).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from eairdsl.cli import app

ROOT = Path(__file__).resolve().parents[1]


def _broken(tmp_path: Path) -> Path:
    """D1 with one misspelt role in a tool's `roles` list: one located error."""
    text = (ROOT / "worlds" / "d1.eair").read_text(encoding="utf-8")
    world = tmp_path / "d1"
    world.mkdir()
    for f in (ROOT / "worlds" / "d1").iterdir():
        (world / f.name).write_bytes(f.read_bytes())
    assert "authority 3" in text
    broken = text.replace("authority 3", "authority three", 1)
    path = tmp_path / "d1.eair"
    path.write_text(broken, encoding="utf-8")
    return path


def _invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    return result.exit_code, result.stdout, result.stderr


def _check_as(fmt: str, bad: Path) -> Any:
    """`eairc check BAD worlds/f1.eair --format FMT` (one error, one warning): exit 1 and
    the output parsed."""
    code, out, _ = _invoke("check", str(bad), str(ROOT / "worlds" / "f1.eair"), "--format", fmt)
    assert code == 1
    return json.loads(out)


def test_json_carries_what_the_text_shows(tmp_path: Path) -> None:
    bad = _broken(tmp_path)
    data = _check_as("json", bad)
    first, second = data["worlds"]
    assert first["path"] == str(bad) and first["ok"] is False and first["errors"] >= 1
    d = first["diagnostics"][0]
    assert d["severity"] == "error" and d["file"] == str(bad)
    start = d["range"]["start"]
    line = bad.read_text(encoding="utf-8").split("\n")[start["line"] - 1]
    assert "three" in line[start["col"] - 1:]
    text_code, _, text_err = _invoke("check", str(bad))
    assert text_code == 1
    assert f"{bad}:{start['line']}:{start['col']}: error[{d['code']}]" in text_err
    assert second["ok"] is True and second["warnings"] == len(second["diagnostics"]) >= 1
    assert second["diagnostics"][0]["severity"] == "warning"


def test_sarif_is_a_2_1_0_log_of_the_same_diagnostics(tmp_path: Path) -> None:
    bad = _broken(tmp_path)
    log = _check_as("sarif", bad)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "eairc" and driver["version"]
    rules = [r["id"] for r in driver["rules"]]
    assert rules == sorted(set(rules))
    data = _check_as("json", bad)
    want = [d for w in data["worlds"] for d in w["diagnostics"]]
    assert len(run["results"]) == len(want)
    for result, d in zip(run["results"], want, strict=True):
        assert result["ruleId"] == d["code"] == rules[result["ruleIndex"]]
        assert result["level"] == d["severity"] and result["level"] in ("error", "warning")
        assert result["message"]["text"].startswith(d["message"])
        (loc,) = result["locations"]
        region = loc["physicalLocation"]["region"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"] == d["file"]
        assert (region["startLine"], region["startColumn"]) == (
            d["range"]["start"]["line"], d["range"]["start"]["col"])
        assert region["endLine"] >= region["startLine"] >= 1
        if d["hint"]:
            assert result["properties"]["hint"] == d["hint"]


def test_an_unknown_format_is_a_usage_error() -> None:
    code, _, err = _invoke("check", str(ROOT / "worlds" / "d1.eair"), "--format", "xml")
    assert code == 2 and "choose text, json or sarif" in err


def test_fmt_stdin_writes_the_formatted_text_to_stdout(tmp_path: Path) -> None:
    source = (ROOT / "worlds" / "d1.eair").read_text(encoding="utf-8")
    messy = source.replace("\n  ", "\n      ", 40)  # indentation the formatter undoes
    assert messy != source
    code, out, _ = _invoke("fmt", "-", stdin=messy)
    assert code == 0 and out == source
    assert _invoke("fmt", "-", "--check", stdin=source)[0] == 0
    assert _invoke("fmt", "-", "--check", stdin=messy)[0] == 1
    # the same text `eairc fmt FILE` writes
    path = tmp_path / "messy.eair"
    path.write_text(messy, encoding="utf-8")
    assert _invoke("fmt", str(path))[0] == 0
    assert path.read_text(encoding="utf-8") == out


def test_fmt_stdin_with_a_parse_error_writes_nothing_to_stdout() -> None:
    code, out, err = _invoke("fmt", "-", stdin="world x {\n  roles {")
    assert code == 1 and out == ""
    assert "<stdin>:2:3: error[E104]" in err
    code, _, err = _invoke("fmt", "-", "worlds/d1.eair")
    assert code == 2 and "on its own" in err
