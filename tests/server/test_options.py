"""The option table (kilolock.server.settings.OPTIONS, each option declared
once as a field of Settings): how every option is read, the message of each
rule it breaks, and what is built from it (Settings, the edge limits, the
table of docs/running.md).  `twistd kilolock --help` is in test_packaging.py."""

from __future__ import annotations

import pytest
from attrs import asdict, fields
from hypothesis import given
from hypothesis import strategies as st
from twisted.python import usage

from kilolock.server.options import NOT_A_NUMBER, Option
from kilolock.server.settings import OPTIONS, Settings, options_table
from kilolock.web import edge
from kilolock.web.edge import DEFAULT_LIMITS, EdgeLimits, LimitRefusal
from tests.support.paths import DOCS

BY_NAME = {each.name: each for each in OPTIONS}
WITH_OPTION = [each for each in OPTIONS if each.long is not None]


def test_the_table_of_running_md_is_the_option_table() -> None:
    """docs/running.md holds the table rendered from OPTIONS, verbatim.  After
    changing an option, print the table with
    `python -c "from kilolock.server.settings import options_table as t; print(t(), end='')"`
    and paste it over the one in docs/running.md."""
    assert options_table() in (DOCS / "running.md").read_text()


def test_every_option_has_its_own_names() -> None:
    """No two options share a long option, a short one or an environment
    variable; each variable is KL_*; only the two secrets have no
    command-line form."""
    longs = [each.long for each in WITH_OPTION]
    shorts = [each.short for each in OPTIONS if each.short is not None]
    envs = [each.env for each in OPTIONS]
    assert len(set(longs)) == len(longs) and len(set(shorts)) == len(shorts)
    assert len(set(envs)) == len(envs) and all(env.startswith("KL_") for env in envs)
    assert [each.env for each in OPTIONS if each.long is None] == [
        "KL_AUTH_TOKEN", "KL_CONTROL_TOKEN"]


def test_settings_are_the_table() -> None:
    """Settings has one field per option, in the table's order, whose
    default is the option's; read from nothing, the settings are those
    defaults."""
    assert [field.name for field in fields(Settings)] == [each.name for each in OPTIONS]
    assert [field.default for field in fields(Settings)] == [each.default for each in OPTIONS]
    assert Settings.from_sources({}, {}) == Settings()


def _raw(declared: Option, which: int) -> str:
    """Two different texts the option parses."""
    return ("7", "9")[which] if declared.parse is not None else ("first", "second")[which]


@pytest.mark.parametrize("declared", OPTIONS, ids=lambda each: each.env)
def test_the_option_wins_over_the_variable_which_wins_over_the_default(
        declared: Option) -> None:
    """Each option: the command line first, then its KL_* variable (set but
    empty counts as unset), then the default; a secret is read from the
    environment only; a repeatable option's variable is comma-separated."""
    parse = declared.parse or (lambda value: value)
    first, second = _raw(declared, 0), _raw(declared, 1)
    default = declared.default if declared.default is None or declared.parse is None \
        else parse(declared.default)
    if declared.repeatable:
        assert declared.read({declared.long: [first, second]}, {declared.env: "x"}) == (
            first, second)
        assert declared.read({declared.long: []}, {declared.env: f" {first}, ,{second}"}) == (
            first, second)
    elif declared.long is None:
        spelt = declared.name.replace("_", "-")
        assert declared.read({spelt: first}, {declared.env: second}) == parse(second)
    else:
        assert declared.read({declared.long: first}, {declared.env: second}) == parse(first)
        assert declared.read({declared.long: None}, {declared.env: second}) == parse(second)
    assert declared.read({}, {declared.env: ""}) == default
    assert declared.read({}, {}) == default


NUMBERS = [each for each in OPTIONS if each.parse in (int, float)]


@given(text=st.text(min_size=1, max_size=12))
def test_a_number_option_parses_or_says_it_wants_a_number(text: str) -> None:
    """Any text given to a number option is its number, or the usage error
    'KL_X must be a number, not ...': never another exception."""
    for declared in NUMBERS:
        assert declared.parse is not None
        try:
            expected = declared.parse(text)
        except ValueError:
            with pytest.raises(usage.UsageError) as refused:
                declared.read({}, {declared.env: text})
            assert str(refused.value) == NOT_A_NUMBER.format(env=declared.env, value=text)
        else:
            # repr: a NaN is not equal to itself.
            assert repr(declared.read({}, {declared.env: text})) == repr(expected)


@given(text=st.text(max_size=12))
def test_a_retention_limit_parses_or_names_its_range(text: str) -> None:
    """Any text given to a retention limit is off, a number in range, or the
    usage error naming the range."""
    try:
        settings = Settings.from_sources({"store": "memory"}, {"KL_RETENTION_DAYS": text})
    except usage.UsageError as error:
        assert str(error) == "KL_RETENTION_DAYS must be a whole number from 1 to 36500, or off"
    else:
        days = settings.retention_days
        assert days is None or 1 <= days <= 36500
        assert days is not None or text.strip().lower() in ("", "off", "none")


@pytest.mark.parametrize(("environ", "message"), [
    ({"KL_LISTEN": "nonsense:1"}, "--listen 'nonsense:1' is not a usable Twisted endpoint"
                                  " string: Unknown endpoint type: 'nonsense'"),
    ({"KL_STORE": "disk"}, "--store must be one of memory, postgres"),
    ({"KL_PREPARED_STATEMENTS": "yes"}, "--prepared-statements must be on or off"),
    ({"KL_AUTH_MODE": "ldap"}, "KL_AUTH_MODE must be one of open, static, database"),
    ({"KL_MAX_BODY_BYTES": "1MiB"}, "KL_MAX_BODY_BYTES must be a number, not '1MiB'"),
    ({"KL_MAX_BODY_BYTES": "0"}, "KL_MAX_BODY_BYTES must be a positive number of bytes"),
    ({"KL_REQUEST_TIMEOUT": "0"}, "KL_REQUEST_TIMEOUT must be a positive number of seconds"),
    ({"KL_IDLE_TIMEOUT": "-1"}, "KL_IDLE_TIMEOUT must be a positive number of seconds"),
    ({"KL_HEADER_TIMEOUT": "0"}, "KL_HEADER_TIMEOUT must be positive"),
    ({"KL_BODY_MIN_RATE": "-1"}, "KL_BODY_MIN_RATE must be 0 or more"),
    ({"KL_BODY_RATE_GRACE": "soon"}, "KL_BODY_RATE_GRACE must be a number, not 'soon'"),
    ({"KL_MAX_REQUEST_LINE": "0"}, "KL_MAX_REQUEST_LINE must be positive"),
    ({"KL_LISTEN_BACKLOG": "1.5"}, "KL_LISTEN_BACKLOG must be a number, not '1.5'"),
    ({"KL_PARSE_BUDGET_BYTES": "-5"}, "KL_PARSE_BUDGET_BYTES must be 0 or more"),
    ({"KL_SHUTDOWN_GRACE": "-1"}, "KL_SHUTDOWN_GRACE must not be negative"),
    ({"KL_TRUSTED_PROXIES": "10.0.0.0/8,nowhere"}, "--trusted-proxy: not an IP network:"
                                                   " 'nowhere'"),
    ({"KL_UI": "maybe"}, "--ui must be on or off"),
    ({"KL_UI_SESSION_SECONDS": "0"}, "KL_UI_SESSION_SECONDS must be a positive number of"
                                     " seconds"),
    ({"KL_UI_SIGN_IN_FAILURES": "0"}, "KL_UI_SIGN_IN_FAILURES must be a number from 1 to"
                                      " 1000000"),
    ({"KL_OIDC_LOCK_GRACE": "21601"}, "KL_OIDC_LOCK_GRACE: the OIDC lock grace must be 0 to"
                                      " 21600 seconds"),
    ({"KL_ENCRYPTION_KEYS": "/nonexistent/keys.toml"}, "--encryption-keys: cannot read the"
                                                       " key file '/nonexistent/keys.toml'"),
    ({"KL_RETENTION_VERSIONS": "many"}, "KL_RETENTION_VERSIONS must be a whole number from 1"
                                        " to 1000000, or off"),
    ({"KL_RETENTION_DAYS": "36501"}, "KL_RETENTION_DAYS must be a whole number from 1 to"
                                     " 36500, or off"),
    ({"KL_RETENTION_INTERVAL": "0"}, "KL_RETENTION_INTERVAL must be a positive number of"
                                     " seconds"),
    ({"KL_LOG_FORMAT": "xml"}, "--log-format must be one of text, json"),
    ({"KL_AUTH_MODE": "static"}, "KL_AUTH_MODE=static needs KL_AUTH_TOKEN, --oidc-config,"
                                 " or both"),
    ({"KL_TLS_CLIENT_CA": "/nonexistent/ca.pem"}, "--tls-client-ca: "),
])
def test_each_bad_setting_is_named_by_its_usage_error(environ: dict[str, str],
                                                      message: str) -> None:
    """One bad setting, one usage error whose message starts with these
    words (the messages operators and scripts have always seen)."""
    with pytest.raises(usage.UsageError) as refused:
        Settings.from_sources({}, {"KL_STORE": "memory", **environ})
    assert str(refused.value).startswith(message)


def test_the_edge_limits_are_options_of_the_same_names() -> None:
    """Every EdgeLimits field is the option of the same name with the same
    default, so Settings().edge is the default limits and an option reaches
    its limit."""
    for limit in fields(EdgeLimits):
        assert BY_NAME[limit.name].default == limit.default, limit.name
    assert Settings().edge == DEFAULT_LIMITS
    chosen = Settings.from_sources({"max-headers": "12"}, {"KL_BODY_MIN_RATE": "0"}).edge
    assert asdict(chosen) == {**asdict(DEFAULT_LIMITS), "max_headers": 12, "body_min_rate": 0}


def test_each_edge_refusal_names_the_variable_of_its_limit() -> None:
    """A refusal at the edge ends naming the KL_* variable of the limit it
    enforces: the variable of the option of that name."""
    refusals = [value for value in vars(edge).values() if isinstance(value, LimitRefusal)]
    assert len(refusals) == 6
    for refusal in refusals:
        assert refusal.setting == BY_NAME[refusal.field].env, refusal.code
        assert refusal.refusal(DEFAULT_LIMITS).message.endswith(f"({refusal.setting})")
    assert edge.over_budget(3).message.endswith(f"({BY_NAME['body_budget_bytes'].env})")
    assert edge.payload_too_large(9).message.endswith(f"({BY_NAME['max_body_bytes'].env})")
