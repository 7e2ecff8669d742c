# twistd -ny kilolock.tac
#
# Configured entirely from KL_* environment variables (see docs/running.md),
# e.g. KL_STORE=memory KL_LISTEN=tcp:8080 twistd -ny kilolock.tac
from twisted.application.service import Application

from kilolock.tap import Settings, make_service_from_settings

application = Application("kilolock")
make_service_from_settings(Settings.from_sources({})).setServiceParent(application)
