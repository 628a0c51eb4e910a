"""The base of every API view (kept apart from core/api/inputs.py, which the
settings import before DRF's views can be)."""

from __future__ import annotations

from typing import Any

from rest_framework import views
from rest_framework.request import Request

from core.api.inputs import InvalidInput


class StrictQueryView(views.APIView):
    # An API view that refuses query parameters it does not know, naming them.
    #
    # Like unknown body fields: a typo (`?staus=failed`) must not silently mean
    # "no filter". `query_params_allowed` maps a method to the names it reads.
    #
    # A comment, not a docstring: drf-spectacular describes an operation by the
    # first docstring among its view's classes, so this one would be published as
    # the description of every endpoint whose view has none of its own.

    query_params_allowed: dict[str, frozenset[str]] = {}

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        method = (request.method or "").lower()
        if method not in self.http_method_names or not hasattr(self, method):
            return  # dispatch answers 405 next, whatever the query says
        allowed = self.query_params_allowed.get(method, frozenset())
        unknown = sorted(set(request.query_params) - allowed)
        if unknown:
            raise InvalidInput(unknown[0], "unknown query parameter")
