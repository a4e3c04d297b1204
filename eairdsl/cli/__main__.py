"""`python -m eairdsl.cli`: the same entry point as the `eairc` console script."""

from eairdsl.cli import main

main()
