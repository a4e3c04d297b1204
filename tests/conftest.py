"""Test-wide setup: keep litellm offline so no test reaches the network for its cost map,
and spread the suite over every core when pytest-xdist is there and nobody chose.

The suite's modules import only helper modules of this folder (`helpers`,
`cli_helpers`, `scripted_llm`, ...), never each other, so `python -m pytest` collects
from the repository root or from tests/, with or without xdist.
"""

import os

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`-n auto --dist loadfile` unless the command line chose (`-n0`, `-n 2`, `--dist`,
    `--pdb`) or disabled xdist (`-p no:xdist`): one worker per core, a module's tests on
    one worker so its module fixtures (a study, an audit) are built once. In
    `addopts` these options made pytest refuse to start without the plugin."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    option = config.option
    if option.numprocesses is None and option.dist == "no" and not option.tx \
            and not option.usepdb:
        option.numprocesses = "auto"
        option.dist = "loadfile"
