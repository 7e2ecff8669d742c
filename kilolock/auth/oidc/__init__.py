"""CI identity through OpenID Connect: tokens that GitHub Actions, GitLab CI
and other issuers hand their jobs, verified against trusted issuers' keys and
mapped to grants by per-tenant rules.

The modules, from the bottom up (each imports only modules listed before it):

- L{kilolock.auth.oidc.refusal}: why a token was refused, as a reason code.
- L{kilolock.auth.oidc.patterns}: claim patterns and grant templates (pure).
- L{kilolock.auth.oidc.claims}: claim names and values, the audit detail.
- L{kilolock.auth.oidc.policy}: the frozen policy types (issuers, rules, grants).
- L{kilolock.auth.oidc.jwks}: JSON Web Key Sets to verification keys.
- L{kilolock.auth.oidc.validation}: the one validator, for files and the control API.
- L{kilolock.auth.oidc.policy_file}: C{--oidc-config} / C{KL_OIDC_CONFIG} files.
- L{kilolock.auth.oidc.fetch}: discovery documents and JWKS over HTTP, non-blocking.
- L{kilolock.auth.oidc.keys}: key sources, cached with a TTL, refetched at a bounded rate.
- L{kilolock.auth.oidc.verify}: signature, issuer, audience and time checks.
- L{kilolock.auth.oidc.decision}: rules applied to a verified token.
- L{kilolock.auth.oidc.credential}: which presented secrets are OIDC tokens
  (imports nothing of the package: the auth layer can use it alone).
- L{kilolock.auth.oidc.grace}: finishing a locked apply after the token expired.
- L{kilolock.auth.oidc.places}: hosted grants naming workspaces and environments, as ids.

docs/ci-identity.md explains the trust model.
"""
