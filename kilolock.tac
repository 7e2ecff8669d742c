# twistd -ny kilolock.tac
#
# Configured entirely from KL_* environment variables (see docs/running.md),
# e.g. KL_STORE=memory KL_LISTEN=tcp:8080 twistd -ny kilolock.tac
from twisted.application.service import Application
from twisted.logger import ILogObserver

from kilolock.server.logs import json_log_observer
from kilolock.server.settings import Settings
from kilolock.server.tap import make_service_from_settings

settings = Settings.from_sources({})
application = Application("kilolock")
if settings.log_format == "json":
    application.setComponent(ILogObserver, json_log_observer())
make_service_from_settings(settings).setServiceParent(application)
