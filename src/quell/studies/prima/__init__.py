"""PRIMA's profile: measure cells of utilisation × interference in the lab or the simulator,
build the model bundle from them (``profile``) and measure it on held-out points
(``validate``)."""
