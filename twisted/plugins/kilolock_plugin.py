"""twistd plugin: C{twistd -n kilolock [options]}.

Kept tiny and lazy: nothing is imported until twistd builds the service.
"""

from twisted.application.service import ServiceMaker

kilolock = ServiceMaker(
    "Kilolock",
    "kilolock.server.tap",
    "A Terraform/OpenTofu remote state server (http backend)",
    "kilolock",
)
