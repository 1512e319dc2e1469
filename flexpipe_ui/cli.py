"""The ``flexpipe`` command. Subcommands live in small modules, each with ``register(subparsers)``.

Exit codes: 0 ok, 2 bad input (a one-line message on stderr, no traceback), 1 anything else.
"""
from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main"]

# Each module defines register(subparsers) and sets ``func`` on its parsers; absent ones are skipped
# (so the core CLI works before optional parts land).
COMMAND_MODULES = (
    "flexpipe_ui.cli_core",
    "flexpipe_ui.library.cli",
    "flexpipe_ui.search.cli",
    "flexpipe_ui.cli_calibrate",
    "kernel_runtime.cli",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's usage errors are bad input too: exit 2, one line
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="flexpipe", description="Pipeline-parallel schedule designer and runner.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (name == e.name or name.startswith(e.name + ".")):
                continue
            raise
        mod.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:       # a bad flag (exit 2, one line already printed) or --help (0)
        return e.code if isinstance(e.code, int) else 2
    try:
        rc = args.func(args)
    except (ValueError, OSError) as e:  # user input: ScheduleError, PlanFileError, ProblemError...
        msg = str(e)
        plan = getattr(args, "plan", None)
        if isinstance(plan, str) and plan not in msg:   # e.g. a ScheduleError: say which file
            msg = f"{plan}: {msg}"
        print(f"flexpipe {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
