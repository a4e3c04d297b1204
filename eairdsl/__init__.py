"""EAIR-DSL: a declarative world language, compiler and simulator for enterprise
multi-agent interaction risks (after the EAIR paper).

The pipeline reads top to bottom: syntax -> check -> ir -> (runtime -> measure ->
study). Import the stage you need; this package root stays light so that
`eairc --help` starts fast.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
