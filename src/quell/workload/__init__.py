"""Workloads shared by the lab and the simulator: arrival processes and request schedules."""
