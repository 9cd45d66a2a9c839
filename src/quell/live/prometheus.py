"""A small client for Prometheus's HTTP query API (``/api/v1/query``), over httpx with a timeout
on every call. Values come back as strings (``"NaN"``, ``"+Inf"`` included) and are returned as
floats; whatever goes wrong (refused, timed out, an error answer, not JSON) raises
``ComponentError("prometheus", ...)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from quell.errors import ComponentError


@dataclass(frozen=True, slots=True)
class Sample:
    labels: dict[str, str]
    time_s: float
    value: float


class PrometheusClient:
    def __init__(self, url: str, timeout_s: float = 2.0, client: httpx.Client | None = None):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._client = client or httpx.Client(timeout=timeout_s, trust_env=False)

    def query(self, expr: str) -> list[Sample]:
        """An instant query's vector (a scalar comes back as one sample without labels)."""
        try:
            r = self._client.post(f"{self.url}/api/v1/query", data={"query": expr})
            doc: Any = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ComponentError("prometheus", f"{self.url}: {expr!r}: {exc}") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            err = doc.get("error") if isinstance(doc, dict) else doc
            raise ComponentError("prometheus", f"{expr!r}: HTTP {r.status_code}: {err}")
        return parse_result(doc.get("data"), expr)

    def close(self) -> None:
        self._client.close()


def _float(text: Any, expr: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ComponentError("prometheus", f"{expr!r}: value {text!r} is not a number") from None


def parse_result(data: Any, expr: str) -> list[Sample]:
    if not isinstance(data, dict):
        raise ComponentError("prometheus", f"{expr!r}: no data in the answer")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        return [Sample({}, _float(result[0], expr), _float(result[1], expr))]
    if kind != "vector" or not isinstance(result, list):
        raise ComponentError("prometheus", f"{expr!r}: a {kind!r} answer, not a vector")
    out = []
    for item in result:
        try:
            ts, value = item["value"]
            labels = {str(k): str(v) for k, v in item.get("metric", {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ComponentError("prometheus", f"{expr!r}: malformed sample {item!r}") from None
        out.append(Sample(labels, _float(ts, expr), _float(value, expr)))
    return out
