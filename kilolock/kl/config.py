"""kl's settings: command-line flags, then C{KL_*} environment variables,
then the config file (C{--config}, C{KL_CONFIG}, else
C{$XDG_CONFIG_HOME/kilolock/kl.toml}, i.e. C{~/.config/kilolock/kl.toml}),
then the defaults; the first found wins."""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from attrs import frozen

from kilolock.kl.exits import EXIT_USAGE, KlError

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_CONTROL_URL = "http://127.0.0.1:8090"
DEFAULT_TIMEOUT = 60.0
DEFAULT_DISCOVERY_TIMEOUT = 3.0

CONFIG_KEYS = ("url", "token", "control_url", "control_token", "timeout",
               "discovery_timeout", "ca_file")


@frozen
class Settings:
    """Where the server and its control API are, the tokens, the timeouts."""

    url: str = DEFAULT_URL
    token: str | None = None
    control_url: str = DEFAULT_CONTROL_URL
    control_token: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    discovery_timeout: float = DEFAULT_DISCOVERY_TIMEOUT
    ca_file: str | None = None


def default_config_path(environ: Mapping[str, str]) -> Path:
    """C{$XDG_CONFIG_HOME/kilolock/kl.toml}, C{~/.config} when it is unset."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kilolock" / "kl.toml"


def load_config_file(path: Path, explicit: bool, warn: Callable[[str], None]) -> dict[str, Any]:
    """The settings of a kl.toml (top-level keys of L{CONFIG_KEYS}); a missing
    file is no settings unless it was named (C{explicit})."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise KlError(EXIT_USAGE, f"the config file {path} does not exist") from None
        return {}
    except OSError as error:
        raise KlError(EXIT_USAGE, f"cannot read the config file {path}: {error}") from None
    try:
        document = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise KlError(EXIT_USAGE, f"the config file {path} is not valid TOML: {error}") from None
    unknown = sorted(set(document) - set(CONFIG_KEYS))
    if unknown:
        raise KlError(EXIT_USAGE, f"the config file {path} has unknown keys: {', '.join(unknown)}"
                      f" (known: {', '.join(CONFIG_KEYS)})")
    if any(document.get(key) for key in ("token", "control_token")):
        try:
            mode = path.stat().st_mode
        except OSError:
            mode = 0
        if mode & 0o077:
            warn(f"{path} holds a token and is readable by others: chmod 600 {path}")
    return document


def resolve_settings(args: argparse.Namespace, environ: Mapping[str, str],
                     warn: Callable[[str], None]) -> Settings:
    """Flags, then C{KL_*} variables, then the config file, then defaults."""
    explicit = getattr(args, "config", None) or environ.get("KL_CONFIG")
    path = Path(explicit) if explicit else default_config_path(environ)
    config = load_config_file(path, bool(explicit), warn)

    def pick(name: str, default: Any) -> Any:
        flag = getattr(args, name, None)
        if flag is not None:
            return flag
        env = environ.get("KL_" + name.upper())
        if env:
            return env
        value = config.get(name)
        return default if value is None or value == "" else value

    def seconds(name: str, default: float) -> float:
        value = pick(name, default)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise KlError(EXIT_USAGE, f"{name} must be a number of seconds, not {value!r}") \
                from None
        if number <= 0:
            raise KlError(EXIT_USAGE, f"{name} must be a positive number of seconds")
        return number

    settings = Settings(
        url=str(pick("url", DEFAULT_URL)).rstrip("/"),
        token=pick("token", None),
        control_url=str(pick("control_url", DEFAULT_CONTROL_URL)).rstrip("/"),
        control_token=pick("control_token", None),
        timeout=seconds("timeout", DEFAULT_TIMEOUT),
        discovery_timeout=seconds("discovery_timeout", DEFAULT_DISCOVERY_TIMEOUT),
        ca_file=pick("ca_file", None),
    )
    for name in ("url", "control_url"):
        parts = urlsplit(getattr(settings, name))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise KlError(EXIT_USAGE, f"{name} must be an http:// or https:// URL,"
                          f" not {getattr(settings, name)!r}")
    return settings
