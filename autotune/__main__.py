"""``python -m autotune`` runs the command line."""

from autotune.cli.app import main

main()
