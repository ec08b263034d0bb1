"""How every ``veil`` command reports a failure: one clean line on stderr (a JSON object with
``--format json``) and an exit code, never a traceback — shared by the commands in
``veil.cli`` and ``veil.service.commands``."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import typer
from rich.console import Console

from veil.cli_options import OutputFormat
from veil.errors import InternalError, UserError, VeilError, VeilWarning

__all__ = ["INTERNAL_ERROR_EXIT", "USER_ERROR_EXIT", "reported_errors", "run", "stderr"]

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
