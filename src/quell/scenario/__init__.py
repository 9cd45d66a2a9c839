"""The scenario file: hosts, instances, load balancer, workload, timed events, policy, duration."""

from quell.scenario.load import load_scenario, parse_scenario
from quell.scenario.model import Scenario

__all__ = ["Scenario", "load_scenario", "parse_scenario"]
