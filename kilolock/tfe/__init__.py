"""The state part of the TFE API (Terraform's C{cloud {}} block and C{remote}
backend), without a run platform: what is not HTTP.

  - L{model}: TFE workspaces, tags and pending state versions;
  - L{names}: public ids (C{ws-...}, C{sv-...}, C{wsout-...}), the naming
    rules of workspaces and tags, and which state a workspace is;
  - L{tags}: merging and matching tags;
  - L{locks}: the LockInfo a TFE-lane lock is taken with;
  - L{grants}: upload capabilities and the rule a claim of one must pass;
  - L{outputs}: output rows as the TFE API shows them;
  - L{requests}: parsing the JSON:API documents clients send;
  - L{interfaces}: L{interfaces.ITFEStore}, provided by both stores.

The HTTP side is L{kilolock.web.tfe}.  Pure: no Twisted, no I/O.
"""
