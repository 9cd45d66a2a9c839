"""PRIMA's study: measure cells of utilisation × interference in the lab or the simulator,
build the model bundle from them (``profile``), measure it on held-out points (``validate``)
and write the results page from the measured runs (``results``)."""
