"""The command line: parse arguments, call the library, map errors to exit codes.

Exit codes: 0 gate passed (warnings allowed), 1 gate failed, 2 could not evaluate (bad
arguments, invalid policy, unreadable or malformed source), 70 internal error (a bug in
gatekeeper: CI must never read a crash as a failing gate). Every error is one line on
stderr; `--debug` or GATEKEEPER_DEBUG=1 adds the traceback of an internal error.

Start-up: importing this module imports no more than `os` and `sys` (and the version);
`--version` is answered before anything else, and a built-in command's run imports that
command's module alone (`tests/test_startup.py`, `bench/bench_startup.py`).
"""

from __future__ import annotations

import os
import sys
from functools import cache
from typing import TYPE_CHECKING, Any

from gatekeeper import __version__
from gatekeeper.registry import Registry

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

# The built-in commands in `--help` order; the module of each is gatekeeper/cli/<name>.py
# (a dash in the name is an underscore there). A module of this package with a
# `register(subparsers)` that is not named here is a command too, listed after these
# (adding a command is adding its module; naming it here only sets its place in --help
# and lets its run skip the scan). Each command module imports only argparse-level things
# at the top, so building its parser stays cheap.
BUILTIN_COMMANDS = (
    "check", "validate", "checks", "serve", "history", "watch", "run", "test", "export",
    "suggest", "import-recipe", "lint", "report", "sources", "completion",
)
# this package's other modules: the entry point, options, completion scripts, config files
_NOT_COMMANDS = ("main", "args", "shellcomplete", "projectconfig", "configschema")


def _register_of(name: str) -> Callable[[Any], None]:
    import importlib

    register: Callable[[Any], None] = importlib.import_module(
        f"gatekeeper.cli.{name.replace('-', '_')}"
    ).register
    return register


def _builtin_command(name: str) -> Callable[[Any], None] | None:
    return _register_of(name) if name in BUILTIN_COMMANDS else None


def _builtin_commands() -> dict[str, Callable[[Any], None]]:
    """Every built-in command's `register`, in `--help` order: the named ones, then any
    other module of this package that defines `register`."""
    import importlib
    import pkgutil

    commands = {name: _register_of(name) for name in BUILTIN_COMMANDS}
    for info in pkgutil.iter_modules(_package_path()):
        name = info.name.replace("_", "-")
        if info.name.startswith("_") or info.name in _NOT_COMMANDS or name in commands:
            continue
        register = getattr(importlib.import_module(f"gatekeeper.cli.{info.name}"), "register", None)
        if callable(register):
            commands[name] = register
    return commands


def _package_path() -> list[str]:
    return [os.path.dirname(os.path.abspath(__file__))]


# Every command by name; a third-party package adds one through the `gatekeeper.commands`
# entry point (a `register(subparsers)` function).
COMMANDS: Registry[Callable[[Any], None]] = Registry(
    "command", _builtin_commands, one=_builtin_command
)


@cache
def _parser_class() -> type[argparse.ArgumentParser]:
    import argparse

    from gatekeeper.errors import UsageError

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:  # argparse exits 2 itself; one message form
            raise UsageError(usage_message(self.prog, message))

    return _Parser


def build_parser(plugins: bool = True, only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; `plugins=False` leaves out the commands other packages
    add (scanning installed packages is the slowest part of start-up); `only` (a built-in
    command's name) builds that command's parser alone."""
    parser_class = _parser_class()
    parser = parser_class(prog="gatekeeper", description="Training-run health gate.")
    parser.add_argument("--version", action="version", version=f"gatekeeper {__version__}")
    parser.add_argument(
        "--debug", action="store_true",
        help="on an internal error, print the full traceback (also GATEKEEPER_DEBUG=1)",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=parser_class, metavar="COMMAND"
    )
    if only is not None:
        _register_of(only)(sub)
        return parser
    commands = COMMANDS.all() if plugins else COMMANDS.builtins()
    for register in commands.values():
        register(sub)
    return parser


def usage_message(prog: str, message: str) -> str:
    """argparse's complaint as the one error line: main prints "gatekeeper: error: ", so
    the command is named after it (`check: ...`), never "gatekeeper" a second time, and
    the line ends saying where the command's options are listed."""
    command = prog.removeprefix("gatekeeper").strip()
    message += _did_you_mean(message)
    if not command:
        return f"{message}; see 'gatekeeper --help'"
    return f"{command}: {message}; see 'gatekeeper {command} --help'"


def _did_you_mean(message: str) -> str:
    """For argparse's "invalid choice: 'X' (choose from ...)" (a subcommand such as
    `history recrod`, a `--github` value), the nearest choices by spelling."""
    import difflib
    import re

    m = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", message)
    if not m:
        return ""
    choices = [c.strip(" '") for c in m.group(2).split(",")]
    close = difflib.get_close_matches(m.group(1), choices, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def unknown_command(word: str, known: Sequence[str]) -> str:
    """The error for a word that names no command, with the nearest commands by spelling
    (difflib, as `git` and `ruff` suggest: "did you mean")."""
    import difflib

    close = difflib.get_close_matches(word, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return (
        f"{word!r} is not a gatekeeper command{hint} (commands: {', '.join(known)}; "
        "see 'gatekeeper --help')"
    )


def _command_names(parser: argparse.ArgumentParser) -> list[str]:
    """The commands `parser` knows, in --help order."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


# Where the one-line internal-error message sends people.
REPORT_BUGS = "the gatekeeper issue tracker, with the --debug output"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line. Without `argv` this is the program (the console script,
    `python -m gatekeeper`): the process exits right after, so its objects are frozen for
    the garbage collector first. Python's shutdown would otherwise walk every object
    numpy, pydantic and the checks made in full collections, tens of milliseconds that
    change nothing (atexit handlers and the flushing of open files still run)."""
    if argv is not None:
        return _main(list(argv))
    _begin_startup()
    try:
        return _main(sys.argv[1:])
    finally:
        import gc

        startup_done()
        gc.freeze()


# The program's start-up (importing numpy, pydantic, the command, building the policies)
# makes hundreds of thousands of objects that live until exit. main() runs it
#   - with the cyclic collector paused: it walked them again and again while they were
#     made (~7% of a small check's CPU, bench_startup.py);
#   - without pydantic plug-ins for gatekeeper's own models (PYDANTIC_DISABLE_PLUGINS,
#     unless the user set it): a pydantic plug-in is for the user's models.
# `startup_done` ends it before the command's work: the environment as the user gave it
# (a trainer `gatekeeper run` starts inherits it unchanged), the collector on.
_STARTUP_ENV = {"PYDANTIC_DISABLE_PLUGINS": "__all__"}
_startup: tuple[bool, list[str]] | None = None  # (collector paused, variables set)


def _begin_startup() -> None:
    import gc

    global _startup
    added = [name for name in _STARTUP_ENV if name not in os.environ]
    for name in added:
        os.environ[name] = _STARTUP_ENV[name]
    paused = gc.isenabled()  # never turned on here when the program had it off
    if paused:
        gc.disable()
    _startup = (paused, added)


def startup_done() -> None:
    """Start-up is over, the command's work begins (a run read, a trainer or daemon
    started): the environment is restored, the objects made so far are frozen (kept out
    of every later collection; they live until exit anyway) and the collector runs again.
    A command that builds much before its work (check: its policies) calls this itself
    (its parser sets `owns_startup`); for the others main calls it before running them.
    A no-op outside the program's start-up (main(argv), a library call)."""
    global _startup
    if _startup is None:
        return
    paused, added = _startup
    _startup = None
    for name in added:
        os.environ.pop(name, None)
    if paused:
        import gc

        gc.freeze()
        gc.enable()


def _main(argv: list[str]) -> int:
    with _PipeGuard():  # a reader that goes away never changes the exit code
        return _command(argv)


def _command(argv: list[str]) -> int:
    # --debug is read here, wherever it stands (before or after the command): it must
    # work even when building the parser is what fails
    debug = "--debug" in argv or os.environ.get("GATEKEEPER_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    if argv[:1] == ["--version"]:  # what argparse answers (and exits 0), importing nothing
        print(f"gatekeeper {__version__}")
        return 0
    from gatekeeper.errors import GatekeeperError, UsageError, one_line

    try:
        command = _builtin_named(argv)
        parser = build_parser(plugins=False, only=command) if command else build_parser()
        if not argv:  # as ruff: the help, on stderr, and 2 (no command ran, nothing passed)
            parser.print_help(sys.stderr)
            return 2
        if command is None and not argv[0].startswith("-"):
            names = _command_names(parser)
            if argv[0] not in names:
                raise UsageError(unknown_command(argv[0], names))
        args, extra = parser.parse_known_args(argv)
        if extra:  # named against the command they were given to, not the top level
            where = f"gatekeeper {args.command}" if getattr(args, "command", None) else ""
            raise UsageError(usage_message(where, f"unrecognized arguments: {' '.join(extra)}"))
        with _quiet_numpy():  # numpy is imported only for a command, never for --version
            if not getattr(args, "owns_startup", False):
                startup_done()
            return int(args.func(args))
    except GatekeeperError as exc:
        print(_error_line(exc, one_line(str(exc))), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gatekeeper: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise  # argparse's --help/--version: their own output and code
    except BaseException as exc:  # noqa: BLE001 - anything else is a bug, never "gate failed"
        return _internal_error(exc, debug)


def _error_line(exc: BaseException, text: str) -> str:
    """The one line an exit-2 error prints; under GitHub Actions a workflow command, so
    the error shows as an annotation on the file:line it names (a policy, a record)."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return f"gatekeeper: error: {text}"
    from gatekeeper.errors import PolicyError
    from gatekeeper.toolkit.output import Item, annotation, where_of

    title = "gatekeeper: invalid policy" if isinstance(exc, PolicyError) else "gatekeeper: error"
    return annotation(Item("error", title, text, *where_of(exc)))


class _PipeGuard:
    """sys.stdout and sys.stderr for one command, through `_Pipe`: a reader that goes
    away (`gatekeeper check RUN -p P --json v.json | head -1`) costs no report and never
    changes the exit code -- not 1 (rich's broken-pipe handler exits 1), not 70."""

    def __enter__(self) -> None:
        self._saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Pipe(sys.stdout), _Pipe(sys.stderr)  # type: ignore[assignment]

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()  # what is buffered, while a broken pipe is still caught
        sys.stderr.flush()
        sys.stdout, sys.stderr = self._saved


class _Pipe:
    """A standard stream that survives its reader: at the first EPIPE its file
    descriptor is pointed at /dev/null, as Python's docs advise for SIGPIPE (so the
    interpreter's own flush at exit cannot fail either), and the command goes on to
    write its files and return its own code; what it prints after that is dropped."""

    def __init__(self, stream: Any):
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                written = self._stream.write(text)
                return len(text) if written is None else int(written)
            except BrokenPipeError:
                self._to_devnull()
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._to_devnull()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's
        return getattr(self._stream, name)

    def _to_devnull(self) -> None:
        self.broken = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture)
            pass


def _builtin_named(argv: list[str]) -> str | None:
    """The built-in command argv runs, or None (no command, another package's command,
    or an option before it that argparse answers from the whole parser: -h, --version).
    Then only that command's module is imported and no installed package is scanned."""
    for arg in argv:
        if arg.startswith("-"):
            return None  # the top-level options (-h, --version) need every command
        return arg if arg in BUILTIN_COMMANDS else None
    return None


def _internal_error(exc: BaseException, debug: bool) -> int:
    """One line saying it is a bug, where it happened and where to report it."""
    import traceback

    from gatekeeper.errors import INTERNAL_ERROR, one_line

    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "gatekeeper" in f.filename.replace(os.sep, "/")] or frames
    where = f" at {_short(ours[-1].filename)}:{ours[-1].lineno}" if ours else ""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    hint = "" if debug else "; rerun with --debug (or GATEKEEPER_DEBUG=1) for the traceback"
    text = one_line(f"{type(exc).__name__}: {exc}")[:300]
    print(
        f"gatekeeper: internal error (a bug in gatekeeper, not a gate result): {text}{where}"
        f"{hint}; please report it on {REPORT_BUGS}",
        file=sys.stderr,
    )
    return INTERNAL_ERROR


def _short(filename: str) -> str:
    norm = filename.replace(os.sep, "/")
    cut = norm.rfind("gatekeeper/")
    return norm[cut:] if cut >= 0 else os.path.basename(norm)


# gatekeeper's arithmetic is element-wise over 1-D series: it never calls BLAS. OpenBLAS
# still starts a thread per core when numpy is imported, and they spin for a while: on a
# shared 2-core runner that costs more CPU than judging a small run (bench_startup.py).
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS",)


def _import_numpy() -> None:
    """Import numpy with OpenBLAS on one thread, unless the user set its thread count. The
    variable is set for the import only (OpenBLAS reads it when it loads): the processes
    gatekeeper starts (`gatekeeper run`'s trainer) get the environment as it was."""
    if "numpy" in sys.modules:
        return
    added = [name for name in _BLAS_THREADS if name not in os.environ]
    for name in added:
        os.environ[name] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        for name in added:
            os.environ.pop(name, None)


class _quiet_numpy:
    """NaN and Inf are data here (judged as errors by the engine), not a reason for numpy
    to print RuntimeWarnings ("invalid value encountered") into CI logs."""

    def __enter__(self) -> None:
        import warnings

        _import_numpy()
        import numpy as np

        self._err = np.seterr(all="ignore")
        self._warn = warnings.catch_warnings()
        self._warn.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: Any) -> None:
        import numpy as np

        self._warn.__exit__(*exc)
        np.seterr(**self._err)


if __name__ == "__main__":
    sys.exit(main())
