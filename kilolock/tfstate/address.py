"""Terraform addresses as C{terraform state} commands read them.  Pure: no
Twisted, no I/O.

An address names a module instance, a resource, or a resource instance::

    module.net                          a module instance (and what is below it)
    module.net["eu"].module.db          a nested one
    terraform_data.web                  a resource (every instance of it)
    terraform_data.web[0]               an instance (count)
    module.net.data.http.ip["a"]        an instance of a data source (for_each)

Integer keys are written C{[0]}, string keys as HCL strings (C{["eu"]});
keys are part of a module step: C{module.net} is the instance without a key
and matches neither C{module.net[0]} nor C{module.net["a"]} (Terraform's own
rule).  A state's C{module} field is parsed with L{parse_module_path}.

What an address contains (L{Target.contains_instance}) follows Terraform:
a module instance contains every resource instance whose module path starts
with its steps (keys included), a resource contains its instances, an
instance only itself.
"""

from __future__ import annotations

import re

from attrs import frozen

from kilolock.core.errors import BadRequest
from kilolock.tfstate.projection import hcl_quote

__all__ = ["InvalidAddress", "Key", "ModuleStep", "Target", "format_key", "format_module",
           "parse_address", "parse_module_path"]

#: An instance key: an integer (C{count}), a string (C{for_each}) or None (no key).
Key = int | str | None

#: The longest address accepted, in characters.
MAX_ADDRESS_LENGTH = 4096

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_INTEGER = re.compile(r"0|[1-9][0-9]{0,17}")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


class InvalidAddress(BadRequest):
    """An address that is not a Terraform module, resource or instance address."""

    code = "invalid_address"


@frozen
class ModuleStep:
    """One step of a module path: C{module.NAME} with an optional key."""

    name: str
    key: Key = None

    def __str__(self) -> str:
        return f"module.{self.name}{format_key(self.key)}"


@frozen
class Target:
    """A parsed address: the module instance path, and for a resource (or an
    instance) its mode (C{managed} or C{data}), type and name, and the
    instance key (C{keyed}: whether the address names one)."""

    module: tuple[ModuleStep, ...] = ()
    mode: str | None = None
    type: str | None = None
    name: str | None = None
    key: Key = None
    keyed: bool = False

    @property
    def is_module(self) -> bool:
        return self.type is None

    @property
    def module_text(self) -> str:
        """The module path as a state's C{module} field spells it."""
        return format_module(self.module)

    @property
    def resource_text(self) -> str:
        """The resource without its module: C{data.http.ip} or C{terraform_data.web}."""
        assert self.type is not None
        return ("data." if self.mode == "data" else "") + f"{self.type}.{self.name}"

    def resource(self) -> Target:
        """The resource this address is, or is an instance of."""
        return Target(self.module, self.mode, self.type, self.name)

    def instance(self, key: Key) -> Target:
        """The instance of this resource with C{key} (None: no key)."""
        return Target(self.module, self.mode, self.type, self.name, key, keyed=True)

    def config_text(self) -> str:
        """The address with every key left out: what an instance's
        C{dependencies} name (C{module.net.terraform_data.web})."""
        steps = ".".join(f"module.{step.name}" for step in self.module)
        if self.is_module:
            return steps
        return f"{steps}.{self.resource_text}" if steps else self.resource_text

    def module_contains(self, module: tuple[ModuleStep, ...]) -> bool:
        """Whether the module path C{module} is this module instance or below it."""
        return len(module) >= len(self.module) and module[:len(self.module)] == self.module

    def touches_resource(self, module: tuple[ModuleStep, ...], mode: str, type_: str,
                         name: str) -> bool:
        """Whether this address names the resource (module path, mode, type,
        name), something containing it, or one of its instances."""
        if self.is_module:
            return self.module_contains(module)
        return (module, mode, type_, name) == (self.module, self.mode, self.type, self.name)

    def contains_instance(self, module: tuple[ModuleStep, ...], mode: str, type_: str,
                          name: str, key: Key) -> bool:
        """Whether the resource instance (module path, mode, type, name, key)
        is named by this address."""
        if self.is_module:
            return self.module_contains(module)
        if (module, mode, type_, name) != (self.module, self.mode, self.type, self.name):
            return False
        return not self.keyed or key == self.key

    def __str__(self) -> str:
        if self.is_module:
            return self.module_text
        prefix = f"{self.module_text}." if self.module else ""
        suffix = format_key(self.key) if self.keyed else ""
        return prefix + self.resource_text + suffix


def format_key(key: Key) -> str:
    """C{[0]}, C{["eu"]} (HCL-quoted, as Terraform prints it), or C{""}."""
    if key is None:
        return ""
    if isinstance(key, int):
        return f"[{key}]"
    return f"[{hcl_quote(key)}]"


def format_module(steps: tuple[ModuleStep, ...]) -> str:
    """A module path as a state's C{module} field spells it (C{""}: the root)."""
    return ".".join(str(step) for step in steps)


def parse_address(text: str) -> Target:
    """Parse a module, resource or resource instance address.

    @raise InvalidAddress: naming the position where it stops making sense.
    """
    return _Parser(text).address()


def parse_module_path(text: str) -> tuple[ModuleStep, ...]:
    """Parse a module path (C{""}: the root module).

    @raise InvalidAddress: it is not one.
    """
    if text == "":
        return ()
    target = parse_address(text)
    if not target.is_module:
        raise InvalidAddress("a module path has only module.NAME steps")
    return target.module


class _Parser:
    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise InvalidAddress("an address must be a non-empty string")
        if len(text) > MAX_ADDRESS_LENGTH:
            raise InvalidAddress(f"an address is at most {MAX_ADDRESS_LENGTH} characters")
        self.text = text
        self.at = 0

    def fail(self, what: str) -> InvalidAddress:
        return InvalidAddress(f"not a Terraform address: {what} at character {self.at + 1}"
                              " (e.g. module.net, terraform_data.web,"
                              ' terraform_data.web[0], module.app["eu"].data.http.ip)')

    def address(self) -> Target:
        steps: list[ModuleStep] = []
        while True:
            word = self.name()
            if word == "module" and self.peek("."):
                self.at += 1
                steps.append(ModuleStep(self.name(), self.key()))
                if self.done():
                    return Target(tuple(steps))
                self.expect(".")
                continue
            mode = "managed"
            if word == "data" and self.peek("."):
                self.at += 1
                mode, word = "data", self.name()
            self.expect(".")
            name = self.name()
            keyed = self.peek("[")
            key = self.key()
            if not self.done():
                raise self.fail("unexpected text after the resource")
            return Target(tuple(steps), mode, word, name, key, keyed)

    def done(self) -> bool:
        return self.at == len(self.text)

    def peek(self, char: str) -> bool:
        return self.text.startswith(char, self.at)

    def expect(self, char: str) -> None:
        if not self.peek(char):
            raise self.fail(f"expected {char!r}")
        self.at += 1

    def name(self) -> str:
        match = _NAME.match(self.text, self.at)
        if match is None:
            raise self.fail("expected a name")
        self.at = match.end()
        return match.group()

    def key(self) -> Key:
        if not self.peek("["):
            return None
        self.at += 1
        match = _INTEGER.match(self.text, self.at)
        if match is not None:
            self.at = match.end()
            key: Key = int(match.group())
        elif self.peek('"'):
            key = self.string()
        else:
            raise self.fail("expected a whole number or a quoted string key")
        self.expect("]")
        return key

    def string(self) -> str:
        """An HCL string literal (C{\\n}, C{\\"}, C{\\uXXXX} escapes;
        C{$${} and C{%%{} for the template introducers)."""
        self.at += 1
        out: list[str] = []
        text = self.text
        while self.at < len(text):
            char = text[self.at]
            if char == '"':
                self.at += 1
                return "".join(out)
            if char == "\\":
                out.append(self.escape())
                continue
            if char in "$%" and text.startswith(char + char + "{", self.at):
                out.append(char)
                self.at += 2
                continue
            out.append(char)
            self.at += 1
        raise self.fail("unterminated string")

    def escape(self) -> str:
        text = self.text
        kind = text[self.at + 1:self.at + 2]
        if kind in _ESCAPES:
            self.at += 2
            return _ESCAPES[kind]
        width = {"u": 4, "U": 8}.get(kind)
        digits = text[self.at + 2:self.at + 2 + width] if width else ""
        if width and re.fullmatch(r"[0-9A-Fa-f]+", digits) and len(digits) == width:
            point = int(digits, 16)
            if point <= 0x10FFFF and not 0xD800 <= point <= 0xDFFF:
                self.at += 2 + width
                return chr(point)
        raise self.fail("unknown escape in a string key")
