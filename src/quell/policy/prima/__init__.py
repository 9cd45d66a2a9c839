"""The PRIMA controller (Section III-B3, calibration of Section IV); ``PrimaPolicy`` in
``controller``."""

from __future__ import annotations

from quell.policy.prima.controller import PrimaParams, PrimaPolicy, instance_rows

__all__ = ["PrimaParams", "PrimaPolicy", "instance_rows"]
