"""What kl prints: tables and lines on stdout, notes on stderr, JSON with
C{--json}, a progress bar for large uploads, and the formats of times, ages,
sizes and values they share."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import IO, Any

from attrs import define

from kilolock.core.model import parse_created

#: Files at least this big get a progress bar on an interactive stderr.
PROGRESS_THRESHOLD = 1 << 20


@define
class Output:
    """stdout and stderr of one command, and whether it prints JSON."""

    stdout: IO[str]
    stderr: IO[str]
    as_json: bool = False

    def json_if_asked(self, document: Any) -> bool:
        """With C{--json}, print C{document} and say so (the command is done)."""
        if self.as_json:
            self.json(document)
        return self.as_json

    def json(self, document: Any) -> None:
        """C{document} indented (compact when too deep to indent)."""
        try:
            text = json.dumps(document, indent=2, ensure_ascii=False)
        except RecursionError:
            text = json.dumps(document, ensure_ascii=False)
        self.stdout.write(text + "\n")

    def line(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def lines(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.line(text)

    def note(self, text: str) -> None:
        self.stderr.write(f"kl: {text}\n")

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        cells = [[str(cell) for cell in row] for row in rows]
        widths = [max([len(header)] + [len(row[i]) for row in cells])
                  for i, header in enumerate(headers)]
        self.line("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
        for row in cells:
            self.line("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())

    def fields(self, pairs: Sequence[tuple[str, Any]], indent: str = "",
               width: int | None = None) -> None:
        """C{name  value} lines, the names padded to C{width} (the longest name's)."""
        width = max(len(name) for name, _ in pairs) if width is None else width
        for name, value in pairs:
            self.line(f"{indent}{name.ljust(width)}  {value}")


class Progress:
    """A progress bar on a terminal: C{kl: uploading  12.0 MiB / 100.0 MiB [###...]  12%}."""

    WIDTH = 30

    def __init__(self, total: int, stream: IO[str], label: str = "uploading") -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.label = label
        self.done = 0
        self._shown = -1.0

    def advance(self, count: int) -> None:
        self.done += count
        fraction = min(1.0, self.done / self.total)
        if fraction - self._shown >= 0.01 or fraction == 1.0:
            self._shown = fraction
            filled = int(fraction * self.WIDTH)
            self.stream.write(f"\rkl: {self.label} {self.done / 2**20:6.1f} MiB /"
                              f" {self.total / 2**20:.1f} MiB"
                              f" [{'#' * filled}{'.' * (self.WIDTH - filled)}]"
                              f" {fraction * 100:3.0f}%")
            self.stream.flush()

    def finish(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def format_time(moment: datetime | str | None) -> str:
    """C{2026-01-02 03:04:05Z}; C{-} for none; text that is no time as is."""
    if moment is None:
        return "-"
    if isinstance(moment, str):
        parsed = parse_created(moment)
        if parsed is None:
            return moment
        moment = parsed
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def format_age(seconds: float) -> str:
    """C{42s}, C{3m05s}, C{2h03m}, C{4d07h}."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def format_size(size: int | None) -> str:
    """C{512 B}, C{1.5 KiB} ... C{GiB}; C{-} for none."""
    if size is None:
        return "-"
    if size < 1024:
        return f"{size} B"
    for unit in ("KiB", "MiB", "GiB"):
        size_f = size / 1024
        if size_f < 1024 or unit == "GiB":
            return f"{size_f:.1f} {unit}"
        size = int(size_f)
    return f"{size} B"  # pragma: no cover


def format_value(value: Any, width: int = 60) -> str:
    """A value on one line (JSON unless text), cut to C{width} characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[:width - 1] + "…"


def or_dash(value: Any) -> str:
    """The value as text, C{-} for none."""
    return "-" if value is None else str(value)


def format_count(number: int, noun: str) -> str:
    """C{1 state}, C{2 states}."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def describe_lock_info(info: Mapping[str, Any], acquired_at: str | None = None) -> str:
    """A lock holder in one phrase: who, what, since when, its ID (from
    Terraform's LockInfo or the native lane's lock document).

    "Since" is always the server's time of acquisition (C{acquired_at}, or
    the lock document's C{acquiredAt}), the time C{kl lock status} shows --
    never the C{Created} the client wrote into its LockInfo; without it,
    no time is shown."""
    who = info.get("Who") or info.get("who") or "someone"
    operation = info.get("Operation") or info.get("operation") or "an operation"
    lock_id = info.get("ID") or info.get("id") or "?"
    acquired = acquired_at or info.get("acquiredAt")
    since = ""
    moment = parse_created(acquired) if isinstance(acquired, str) else None
    if moment is not None:
        since = (f" since {format_time(moment)}"
                 f" ({format_age((datetime.now(UTC) - moment).total_seconds())})")
    return f"{who} ({operation}){since}, lock ID {lock_id}"
