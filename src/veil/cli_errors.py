"""How every ``veil`` command reports a failure: one clean line on stderr (a JSON object with
``--format json``) and an exit code, never a traceback — shared by the commands in
``veil.cli`` and ``veil.service.commands``."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from rich.console import Console

from veil.cli_options import OutputFormat
from veil.errors import InternalError, InvalidArgumentError, UserError, VeilError, VeilWarning

__all__ = [
    "INTERNAL_ERROR_EXIT",
    "USER_ERROR_EXIT",
    "refuse_empty_options",
    "reported_errors",
    "run",
    "stderr",
]

T = TypeVar("T")

USER_ERROR_EXIT = 2
INTERNAL_ERROR_EXIT = 1


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


@contextmanager
def reported_errors(fmt: OutputFormat = OutputFormat.table) -> Iterator[None]:
    """Turn veil errors into one clean line on stderr and an exit code; never a traceback.
    With ``--format json`` the line is a JSON object ``{"error": {type, message, position,
    user_error}}`` so that programs can read the position of a refused construct. A user
    error prints its message in the CLI's syntax (``UserError.for_cli``); a ``VeilWarning``
    raised meanwhile prints as one ``warning: …`` line (``{"warning": …}`` in JSON)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", VeilWarning)
        try:
            refuse_empty_options()
            yield
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            stderr().print("interrupted")
            raise typer.Exit(130) from None
        except UserError as err:
            _report(err, "error", fmt, user_error=True)
            raise typer.Exit(USER_ERROR_EXIT) from None
        except VeilError as err:  # InternalError, RandomnessError
            _report(err, "error", fmt, user_error=False)
            raise typer.Exit(INTERNAL_ERROR_EXIT) from None
        except Exception as err:
            bug = InternalError(f"unexpected {type(err).__name__}: {err}")
            _report(bug, "internal error", fmt, user_error=False)
            raise typer.Exit(INTERNAL_ERROR_EXIT) from None
        finally:
            for w in caught:
                if issubclass(w.category, VeilWarning):
                    _warn(str(w.message), fmt)


def refuse_empty_options() -> None:
    """Refuse an option of the running command given an empty value (``--epsilon ''``, an
    unset shell variable): it is never read as a default, which would spend what nobody
    asked for. Refused naming the flag, before the command does anything."""
    ctx = _current_context()
    if ctx is None:
        return
    for param in ctx.command.params:
        if getattr(param, "param_type_name", "") != "option":
            continue
        value = ctx.params.get(param.name or "")
        values = value if isinstance(value, list | tuple) else (value,)
        if any(isinstance(v, str) and not v.strip() for v in values):
            flag = max(param.opts, key=len)
            raise InvalidArgumentError(
                f"{flag} needs a value, not an empty one; give it one (e.g. {flag} VALUE) or "
                "leave the option out"
            )


def _current_context() -> Any:
    """The running command's click context (Typer's own copy of click, or click's)."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # a Typer that does not carry its own click
        from click import get_current_context  # type: ignore[no-redef]
    return get_current_context(silent=True)


def _warn(message: str, fmt: OutputFormat) -> None:
    if fmt is OutputFormat.json:
        sys.stderr.write(json.dumps({"warning": message}, ensure_ascii=False) + "\n")
    else:
        stderr().print(f"warning: {message}", markup=False, style="yellow")


def _report(err: VeilError, label: str, fmt: OutputFormat, *, user_error: bool) -> None:
    message = err.for_cli() if isinstance(err, UserError) else str(err)
    if fmt is not OutputFormat.json:
        stderr().print(f"{label}: {message}", markup=False)
        return
    position = getattr(err, "position", None)
    payload = {
        "error": {
            "type": type(err).__name__,
            "message": message,
            "position": list(position) if position else None,
            "user_error": user_error,
        }
    }
    sys.stderr.write(json.dumps(payload, ensure_ascii=False) + "\n")


def run(fn: Callable[[], T], fmt: OutputFormat = OutputFormat.table) -> T:
    with reported_errors(fmt):
        return fn()
