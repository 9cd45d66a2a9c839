"""What the client side wrote: the load generator's per-request log and the prober's per-download
log, read once per interval. A request belongs to the interval in which it completed (a failed
one: in which it was sent), a probe download to the one in which it ended; both logs are read
as they grow, so what has not completed yet waits for a later interval."""

from __future__ import annotations

from pathlib import Path

from quell.lab.prober import ProbeRecord, probe_tail
from quell.lab.request_log import LineTail, record_tail
from quell.probe.severity import probe_extra
from quell.store.run import RequestRecord


def probe_readings(
    records: list[ProbeRecord], now_s: float
) -> tuple[dict[str, dict[str, float]], list[ProbeRecord]]:
    """Each instance's probe reading (``Observation.extra``) from the downloads that completed
    before ``now_s`` — the mean time of the successful ones and their count — and the records
    still running past it. Every download counts: one that spilled past the last interval's end
    is averaged with the one that started after it, not dropped for it."""
    times: dict[str, list[float]] = {}
    for r in records:
        if r.end_s < now_s and r.ok:
            times.setdefault(r.instance_id, []).append(r.seconds)
    pending = [r for r in records if r.end_s >= now_s]
    return {iid: probe_extra(t) for iid, t in times.items()}, pending


class ClientLog:
    """The run's request log (``requests.csv``) and, with a probe, its probe log."""

    def __init__(self) -> None:
        self._tail: LineTail[RequestRecord] | None = None
        self._probe_tail: LineTail[ProbeRecord] | None = None
        self._pending: list[RequestRecord] = []
        self._probe_pending: list[ProbeRecord] = []
        self._to_store: list[RequestRecord] = []

    def follow_requests(self, path: Path) -> None:
        self._tail = record_tail(path)

    def follow_probes(self, path: Path) -> None:
        self._probe_tail = probe_tail(path)

    def completed(self, now: float) -> list[RequestRecord]:
        """The requests completed before ``now`` and not returned before."""
        if self._tail is not None:
            new = self._tail.read()
            self._to_store.extend(new)
            self._pending.extend(new)
        # A request belongs to the interval in which it completed (failures: when sent).
        done = [r for r in self._pending if r.send_s + (r.latency_s or 0.0) < now]
        self._pending = [r for r in self._pending if r.send_s + (r.latency_s or 0.0) >= now]
        return done

    def probe_results(self, now: float) -> dict[str, dict[str, float]]:
        """Per instance, the mean time and the count of the successful downloads completed
        since the last interval, before ``now``."""
        if self._probe_tail is None:
            return {}
        self._probe_pending.extend(self._probe_tail.read())
        readings, self._probe_pending = probe_readings(self._probe_pending, now)
        return readings

    def completed_between(self, since: float, now: float) -> list[RequestRecord]:
        """The requests completed in ``[since, now)``, without taking them from ``completed``
        (a glance)."""
        if self._tail is not None:
            new = self._tail.read()
            self._to_store.extend(new)
            self._pending.extend(new)
        return [r for r in self._pending if since <= r.send_s + (r.latency_s or 0.0) < now]

    def probes_between(self, since: float, now: float) -> dict[str, dict[str, float]]:
        """Per instance, the probe reading of the downloads completed in ``[since, now)``,
        without taking them from ``probe_results`` (a glance)."""
        if self._probe_tail is None:
            return {}
        self._probe_pending.extend(self._probe_tail.read())
        readings, _ = probe_readings([r for r in self._probe_pending if r.end_s >= since], now)
        return readings

    def take_requests(self) -> list[RequestRecord]:
        """Every request record read since the last call, for the run store."""
        out, self._to_store = self._to_store, []
        return out
