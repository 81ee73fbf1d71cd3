"""One module per command: its argparse grammar beside its handler.

    servediff --help

Every command module has the same four names: ``NAME`` (as typed after ``servediff``), ``HELP``
(its line in ``servediff --help``), ``add_arguments(sub)`` (adds its parser to the subparsers;
argparse only, so building the parser loads no engine and no scipy) and ``main(args) -> int`` (the
exit code; the library is imported inside). ``audit`` and ``shadow`` keep theirs in their own
packages (``audit/command.py``, ``shadow/command.py``).

To add a command: write ``commands/NAME.py`` with the four names and add it to the dict literal in
``registry.py``; ``cli.py`` builds the parser from that registry and maps errors to exit codes.
"""
