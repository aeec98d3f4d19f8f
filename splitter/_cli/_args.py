"""What every ``splitter`` command shares: its help layout, option types that refuse a bad
value in words, the API key, and the one error a command raises to stop with a status."""

from __future__ import annotations

import argparse
import os

__all__ = ["CommandError", "Help", "api_key", "at_least_one", "positive_number"]


class CommandError(Exception):
    """Stop the command: ``message`` is its one line on stderr, ``status`` its exit status."""

    def __init__(self, message: str, *, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


class Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions and the exit-status table as written; each option's default shown,
    except where there is none to show (None, off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        # Paragraphs are rewrapped to the terminal; the exit-status table keeps its lines.
        if text.startswith("exit status:"):
            return super()._fill_text(text, width, indent)
        return argparse.HelpFormatter._fill_text(self, text, width, indent)


def at_least_one(text: str) -> int:
    """A whole number of at least 1 (an ``argparse`` type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_number(text: str) -> float:
    """A number above 0 (an ``argparse`` type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text}")
    return value


def api_key(args: argparse.Namespace) -> str:
    """``--api-key``, else ``$OPENAI_API_KEY``; a ``CommandError`` (status 2) when neither."""
    key = args.api_key or os.environ.get("OPENAI_API_KEY")
    if not key:
        raise CommandError(
            "no API key: pass --api-key KEY or set OPENAI_API_KEY "
            "(any text will do for a server that needs no key)"
        )
    return str(key)
