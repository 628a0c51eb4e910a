"""Workload identity: a short-lived OIDC-style token per run, signed with the
platform's own asymmetric key, that a target verifies against the published key set
(docs/how-to/workload-identity.md).

- `keys`: generating a signing key, its public JWK and kid, sealing the private half.
- `tokens`: a run's claims and the signed token (the workers' side).
- The key ring's reads are `dispatch.selectors.identity`, its writes (first key,
  rotation) `dispatch.services.identity`; the discovery document and the JWKS are
  served by `dispatch.api.identity`.
"""
