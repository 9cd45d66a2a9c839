"""Live mode: a quell agent on each host and a controller that runs any policy against the
user's own HAProxy and instances (``docs/guides/fleet.md``)."""
