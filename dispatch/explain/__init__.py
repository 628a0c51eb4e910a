"""The explainer: why did (or didn't) a schedule run at a given moment?

`reasons` decides (from recorded decisions, followed by id: see `records`);
`present` holds the answer's shape, the wording of instants and the JSON the
API and the console show. Callers import from here.
"""

from __future__ import annotations

from dispatch.explain.present import Evidence, Explanation, api_url, as_json
from dispatch.explain.reasons import CODE_MEANINGS, CODES, OUTCOME_CODES, explain
from dispatch.explain.records import PauseInterval, pause_intervals

__all__ = [
    "CODES",
    "CODE_MEANINGS",
    "OUTCOME_CODES",
    "Evidence",
    "Explanation",
    "PauseInterval",
    "api_url",
    "as_json",
    "explain",
    "pause_intervals",
]
