"""Standard JSON out of our figures: "not measured yet" is null, never a bare ``NaN``.

Python's ``json`` writes NaN and ±inf as ``NaN``/``Infinity``, which JSON parsers (jq,
browsers, ``json.loads`` with ``parse_constant`` unset elsewhere) reject; numpy scalars and
arrays are not serialisable at all. Every ``--json`` output, recorded JSON message and
web-viewer document goes through :func:`json_safe`.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


def json_safe(value: Any) -> Any:
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` accepts: non-finite
    floats become None, numpy scalars and arrays Python numbers and lists, tuples lists and
    dict keys strings."""
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`json_safe` (``value``): always standard JSON."""
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)
