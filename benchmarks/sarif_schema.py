"""`eairc check --format sarif` against the official SARIF 2.1.0 JSON schema (issue 30).

The schema is not shipped with this repository (it is OASIS's, not ours): pass the
file, e.g. sarif-2.1/schema/sarif-schema-2.1.0.json from github.com/oasis-tcs/sarif-spec
or https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json.
Needs `jsonschema` (installed with litellm).

Every section of the check, compile and parse fixtures (tests/fixtures/*/*.eair:
worlds written to draw diagnostic codes) and every shipped world is checked, its diagnostics made
into the log `eairc check --format sarif` prints (`diagnostics.sarif_log`), and the
log validated; then one log of all of them together. Prints how many logs, results
and distinct codes were validated, and every schema violation (exit 1 if any).

    python benchmarks/sarif_schema.py /path/to/sarif-schema-2.1.0.json

Run on 2026-12-03 against sarif-2.1/schema/sarif-schema-2.1.0.json of oasis-tcs/sarif-spec
at e0583813: 146 logs, 830 results, 37 distinct codes, 0 schema violations.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import load_sections  # noqa: E402

from eairdsl import __version__  # noqa: E402
from eairdsl.compiler import compile_world  # noqa: E402
from eairdsl.diagnostics import Diagnostic, sarif_log  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("schema", type=Path)
    args = parser.parse_args()
    import jsonschema

    schema = json.loads(args.schema.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    os.chdir(ROOT)  # diagnostics name files relative to the working directory
    everything: list[Diagnostic] = []
    logs = results = bad = 0
    codes: set[str] = set()

    def validate(name: str, diagnostics: list[Diagnostic]) -> None:
        nonlocal logs, results, bad
        log = sarif_log(diagnostics, __version__)
        logs += 1
        results += len(log["runs"][0]["results"])
        codes.update(d.code for d in diagnostics)
        for error in validator.iter_errors(log):
            bad += 1
            print(f"{name}: {'/'.join(map(str, error.absolute_path))}: {error.message}")

    with tempfile.TemporaryDirectory() as scratch:
        fixtures = ROOT / "tests" / "fixtures"
        for fixture in sorted([*fixtures.glob("check/*.eair"), *fixtures.glob("compile/*.eair"),
                               *fixtures.glob("parse/*.eair")]):
            for number, section in enumerate(load_sections(fixture)):
                folder = f"{fixture.parent.name}_{fixture.stem}_{number}"
                world = Path(scratch) / folder / "world.eair"
                world.parent.mkdir()
                world.write_text(section.body, encoding="utf-8")
                found = list(compile_world(world).diagnostics)
                everything.extend(found)
                validate(f"{fixture.name}:{section.line}", found)
        for world in sorted((ROOT / "worlds").glob("*.eair")):
            found = list(compile_world(world).diagnostics)
            everything.extend(found)
            validate(str(world.relative_to(ROOT)), found)
        validate("all together", everything)
    print(f"{logs} logs, {results} results, {len(codes)} distinct codes validated against "
          f"{args.schema.name}: {bad} schema violations")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
