"""The consolidation study (Kanemasa et al., docs/papers/consolidation.md), in one place: a sweep of
points (``spec``: the spec file; ``sweep``: run, resume, the study record), each point two
n-tier systems whose database tiers share one capped core (``point``: what a point is and what
it measures), measured in the lab (``lab``, its tiers in ``ntier`` and ``postgres``) or the
simulator (``sim``); ``results``: the results page and its figures from the records."""
