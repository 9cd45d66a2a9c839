"""Experiments: run a scenario against any Environment, its scripted events on time, every
interval recorded as it happens (``run``); bring the lab up around a run and always tear it down
(``lab``); run several policies on one scenario and set them side by side (``compare``)."""
