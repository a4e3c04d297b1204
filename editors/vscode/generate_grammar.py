"""Write (or with --check, verify) syntaxes/eair.tmLanguage.json from the parser's grammar.

    python editors/vscode/generate_grammar.py [--check]

The grammar is made by `eairdsl.syntax.textmate.textmate_json()`; run this after the
language gains a keyword. tests/test_textmate.py fails while the file is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from eairdsl.syntax.textmate import GRAMMAR_FILE, textmate_json

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    target = ROOT / GRAMMAR_FILE
    text = textmate_json()
    if "--check" in sys.argv[1:]:
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            print(f"{target} is stale: run python editors/vscode/generate_grammar.py",
                  file=sys.stderr)
            return 1
        print(f"{target} is up to date")
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
