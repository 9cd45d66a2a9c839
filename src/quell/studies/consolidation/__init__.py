"""The consolidation study (Kanemasa et al., docs/consolidation.md): a sweep of points, each
two n-tier systems whose database tiers share one capped core, measured in the lab or the
simulator (``sweep``) from a spec file (``spec``)."""
