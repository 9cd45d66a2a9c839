"""IC2's detector measured: a synthetic server under antagonists (``synthetic``), runs of it
with IC2 off or on and a bootstrap runner over them (``runs``), and what the cost matrix and
the bootstrap do (``ablation``)."""
