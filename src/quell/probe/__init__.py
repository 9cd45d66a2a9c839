"""The interference probe (PRIMA Section III-B1): its isolation table R_iso(U), the severity
factor of Eq. 1, and the rule that says when training has measured enough."""

from quell.probe.severity import SeverityEstimator, severity_factor
from quell.probe.table import ProbeTable, TrainingLevel, confidence_width

__all__ = [
    "ProbeTable",
    "SeverityEstimator",
    "TrainingLevel",
    "confidence_width",
    "severity_factor",
]
