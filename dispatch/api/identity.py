"""The workload identity's public documents (dispatch/identity): the OpenID
discovery document and the key set, unauthenticated like any OIDC issuer's, so a
target verifies a run's token with a standard library and nothing else.

The key set may be cached for JWKS_MAX_AGE_S: a key made by `identity_keys rotate`
is published twice that long before it signs (unless the operator says `--ahead 0`).
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from core.db import db_now
from dispatch.identity import keys, tokens
from dispatch.selectors import identity as ring

JWKS_MAX_AGE_S = 300
JWKS_PATH = "/.well-known/jwks.json"


# Public documents that change nothing: a POST is a 405, not a CSRF failure.
@csrf_exempt
@require_safe
def openid_configuration(request: HttpRequest) -> JsonResponse:
    issuer = tokens.issuer()
    response = JsonResponse(
        {
            "issuer": issuer,
            "jwks_uri": issuer + JWKS_PATH,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [keys.ALGORITHM],
            "claims_supported": sorted(tokens.CLAIMS),
        }
    )
    response["Cache-Control"] = f"public, max-age={JWKS_MAX_AGE_S}"
    return response


@csrf_exempt
@require_safe
def jwks(request: HttpRequest) -> JsonResponse:
    published = ring.published_keys(db_now())
    response = JsonResponse({"keys": [key.public_jwk for key in published]})
    response["Cache-Control"] = f"public, max-age={JWKS_MAX_AGE_S}"
    return response
