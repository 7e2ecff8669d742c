"""The option table's machinery: what one option of C{twistd kilolock} is
(L{Option}), how it is declared (L{option}, as a field of
L{kilolock.server.settings.Settings}: the table is that class, each option
declared once), how its value is read and checked, and what is built from
the table: twistd's options with their C{--help} lines (L{TableOptions})
and the options table of C{docs/running.md} (L{markdown_table}).

A command-line option wins over its environment variable, which wins over
the default; a variable that is set but empty counts as unset.  Secrets have
no command-line form (command lines are visible in the process list).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from attrs import evolve, field, fields, frozen
from twisted.python import usage

__all__ = ["Bounds", "OneOf", "Option", "TableOptions", "Valid", "markdown_table", "option",
           "options_of"]

T = TypeVar("T")

#: The key of an option in its attrs field's metadata.
_OPTION = "kilolock.option"

#: What a value that its option cannot parse is told, unless the option says.
NOT_A_NUMBER = "{env} must be a number, not {value!r}"


class Rule(Protocol):
    """A rule a parsed value must keep (None values are not checked)."""

    def problem(self, option: Option, value: Any) -> str | None:
        """The usage error's message when C{value} breaks the rule, else None."""


@frozen
class OneOf:
    """The value is one of C{choices}."""

    choices: tuple[str, ...]
    #: The message: C{{option}}, C{{env}} and C{{choices}} are filled in.
    message: str = "{option} must be one of {choices}"

    def problem(self, option: Option, value: Any) -> str | None:
        if value in self.choices:
            return None
        return option.words(self.message, value, choices=", ".join(self.choices))


@frozen
class Bounds:
    """The value is at least C{least}, more than C{above} and at most
    C{most} (None: no such bound)."""

    #: The message: C{{option}}, C{{env}}, C{{least}} and C{{most}} are filled in.
    message: str
    least: float | None = None
    above: float | None = None
    most: float | None = None

    def problem(self, option: Option, value: Any) -> str | None:
        # Written as refusals, not as "least <= value <= most": a value that
        # compares false with everything passes, as it always has.
        if ((self.least is not None and value < self.least)
                or (self.above is not None and value <= self.above)
                or (self.most is not None and value > self.most)):
            return option.words(self.message, value, least=self.least, most=self.most)
        return None


@frozen
class Valid:
    """C{check(value)} does not raise one of C{errors}: a domain's own
    check (an endpoint string, a key file, a network)."""

    check: Callable[[Any], object]
    #: The message: C{{option}}, C{{env}}, C{{value}} and C{{error}} are filled in.
    message: str = "{option}: {error}"
    errors: tuple[type[Exception], ...] = (ValueError,)

    def problem(self, option: Option, value: Any) -> str | None:
        try:
            self.check(value)
        except self.errors as error:
            return option.words(self.message, value, error=error)
        return None


@frozen
class Option:
    """One setting of C{twistd kilolock}: its names, how its value is read
    and checked, and how C{--help} and C{docs/running.md} describe it."""

    #: The environment variable.
    env: str
    default: Any
    #: The C{--help} line, without the variable and the default (added).
    help: str
    #: The meaning column of the table in C{docs/running.md} (Markdown).
    doc: str
    #: The long option without its dashes; None: environment only (a secret).
    long: str | None = None
    short: str | None = None
    #: From the text given to the value (None: the text is the value).
    parse: Callable[[Any], Any] | None = None
    #: The message when C{parse} fails.
    unparsable: str = NOT_A_NUMBER
    rules: tuple[Rule, ...] = ()
    #: Given once per value on the command line; comma-separated in the
    #: environment.
    repeatable: bool = False
    #: The value's name in the docs (a repeatable option's).
    metavar: str | None = None
    #: How the default reads when its value does not say it (Markdown).
    shown: str | None = None
    #: A remark after the default, in parentheses (Markdown).
    note: str | None = None
    #: The L{kilolock.server.settings.Settings} attribute (set by L{options_of}).
    name: str = ""

    @property
    def flag(self) -> str:
        """How messages name the option: C{--listen} (the variable when it
        has no command-line form)."""
        return self.env if self.long is None else f"--{self.long}"

    def words(self, message: str, value: Any, **more: Any) -> str:
        return message.format(option=self.flag, env=self.env, value=value, **more)

    def read(self, options: Mapping[str, Any], environ: Mapping[str, str]) -> Any:
        """The value from the command line's C{options}, else C{environ},
        else the default, parsed.

        @raise usage.UsageError: naming the option when it cannot be parsed."""
        if self.repeatable:
            given = options.get(self.long) if self.long is not None else None
            if given:
                return tuple(given)
            return tuple(item.strip() for item in environ.get(self.env, "").split(",")
                         if item.strip())
        value = options.get(self.long) if self.long is not None else None
        if value is None:
            value = environ.get(self.env) or None
        if value is None:
            value = self.default
        if value is None or self.parse is None:
            return value
        try:
            return self.parse(value)
        except (TypeError, ValueError):
            raise usage.UsageError(self.words(self.unparsable, value)) from None

    def check(self, value: Any) -> None:
        """@raise usage.UsageError: the message of the first rule C{value} breaks."""
        if value is None:
            return
        for rule in self.rules:
            problem = rule.problem(self, value)
            if problem is not None:
                raise usage.UsageError(problem)

    def default_words(self, markdown: bool) -> str:
        """The default as the docs (Markdown) and C{--help} (plain) say it."""
        if self.shown is not None:
            said = self.shown
        elif self.default in (None, "", ()):
            said = "none"
        elif isinstance(self.default, float):
            said = f"`{self.default:g}`"
        else:
            said = f"`{self.default}`"
        if self.note is not None:
            said = f"{said} ({self.note})"
        return said if markdown else said.replace("`", "")

    def help_line(self) -> str:
        """The option's line in C{--help}."""
        listed = f"{self.env}, comma-separated" if self.repeatable else self.env
        return f"{self.help} [{listed}, default {self.default_words(markdown=False)}]"

    def markdown_row(self) -> str:
        """The option's row in the table of C{docs/running.md}."""
        if self.long is None:
            named = "—"
        elif self.repeatable:
            named = f"`--{self.long} {self.metavar}` (repeatable)"
        else:
            named = f"`--{self.long}`" + ("" if self.short is None else f", `-{self.short}`")
        env = f"`{self.env}`" + (" (comma-separated)" if self.repeatable else "")
        return f"| {named} | {env} | {self.default_words(markdown=True)} | {self.doc} |"


def option(long: str | None = None, short: str | None = None, *, env: str, default: T,
           help: str, doc: str, parse: Callable[[Any], Any] | None = None,
           unparsable: str = NOT_A_NUMBER, rules: Sequence[Rule] = (),
           repeatable: bool = False, metavar: str | None = None, shown: str | None = None,
           note: str | None = None) -> T:
    """Declare an option as an attrs field of the settings class (its
    attribute name is the option's L{Option.name}): typed C{default} for
    the field, everything else for the table (L{options_of})."""
    declared = Option(env=env, default=default, help=help, doc=doc, long=long, short=short,
                      parse=parse, unparsable=unparsable, rules=tuple(rules),
                      repeatable=repeatable, metavar=metavar, shown=shown, note=note)
    return field(default=default, metadata={_OPTION: declared})


def options_of(settings: type[Any]) -> tuple[Option, ...]:
    """Every option of the attrs class C{settings}, in declaration order."""
    return tuple(evolve(each.metadata[_OPTION], name=each.name) for each in fields(settings))


def markdown_table(table: Sequence[Option]) -> str:
    """The options table of C{docs/running.md}."""
    head = ["| option | environment variable | default | meaning |", "|---|---|---|---|"]
    return "\n".join([*head, *(each.markdown_row() for each in table)]) + "\n"


def _appender(key: str, declared: Option) -> Callable[[usage.Options, str], None]:
    def append(self: usage.Options, value: str) -> None:
        self[key].append(value)

    append.__doc__ = declared.help_line()
    return append


class TableOptions(usage.Options):
    """twistd options built from C{table}: a parameter for each option with
    a command-line form, an C{opt_} handler collecting each repeatable one;
    the longer description names the options read from the environment only."""

    table: ClassVar[tuple[Option, ...]] = ()
    optParameters: ClassVar[list[list[Any]]]
    longdesc: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "table" not in cls.__dict__:
            return  # a subclass of a built class adds to it
        cls.optParameters = [[each.long, each.short, None, each.help_line()]
                             for each in cls.table if each.long and not each.repeatable]
        for key, each in _repeatable(cls.table):
            setattr(cls, "opt_" + key.replace("-", "_"), _appender(key, each))
        secrets = [f"{each.env} ({each.help})" for each in cls.table if each.long is None]
        if secrets:
            cls.longdesc = (f"{getattr(cls, 'longdesc', '')} Read from the environment only"
                            f" (no option): {'; '.join(secrets)}.").strip()

    def __init__(self) -> None:
        super().__init__()
        for key, _ in _repeatable(self.table):
            self[key] = []


def _repeatable(table: Sequence[Option]) -> list[tuple[str, Option]]:
    return [(each.long, each) for each in table if each.long and each.repeatable]
