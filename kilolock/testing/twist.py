"""C{python -m kilolock.testing.twist [twist options] kilolock [options]}:
Twisted's C{twist} whose C{kilolock} plugin also takes the options of
L{kilolock.testing.hooks}.  For Kilolock's own tests only: an installed
server runs C{twistd kilolock} or C{twist kilolock}, which know no hook.
"""

from __future__ import annotations

from collections.abc import Sequence

from twisted.application.runner._exit import ExitStatus, exit
from twisted.application.twist._options import TwistOptions
from twisted.application.twist._twist import Twist
from twisted.python.usage import UsageError

from kilolock.testing.hooks import MAKER

__all__ = ["HookedTwist"]


class HookedTwistOptions(TwistOptions):
    """C{twist}'s options with one plugin: Kilolock with the hooks."""

    def __init__(self) -> None:
        super().__init__()
        self["plugins"] = {MAKER.tapname: MAKER}


class HookedTwist(Twist):
    @staticmethod
    def options(argv: Sequence[str]) -> TwistOptions:
        options = HookedTwistOptions()
        try:
            options.parseOptions(argv[1:])
        except UsageError as error:
            exit(ExitStatus.EX_USAGE, f"Error: {error}\n\n{options}")
        return options


if __name__ == "__main__":
    HookedTwist.main()
