"""The dashboard: server-rendered pages under C{/ui/} (twisted.web.template).

  /ui/                               the states (L{kilolock.web.ui.states_page})
  /ui/states/{state}                 one state (L{kilolock.web.ui.state_page})
  /ui/states/{state}/-/resource      one resource (L{kilolock.web.ui.resource_page})
  /ui/states/{state}/-/history       its versions (L{kilolock.web.ui.history_page})
  /ui/states/{state}/-/diff          two versions compared (L{kilolock.web.ui.diff_page})
  /ui/states/{state}/-/versions/{n}  one version; C{/json}, C{/download} below
                                     (L{kilolock.web.ui.version_page})
  /ui/states/{state}/-/unlock        force-unlock, with a confirmation step
  /ui/audit                          the audit trail and its chain check
  /ui/search                         resources across states
  /ui/sign-in, /ui/sign-out          a session from a Kilolock token
  /ui/static/{name}.{hash}.{ext}     the stylesheet and the script

The tree is L{kilolock.web.ui.tree}; what every page shares is
L{kilolock.web.ui.base}.
"""

#: Where the dashboard lives on the state listener.
BASE_PATH = "/ui"
