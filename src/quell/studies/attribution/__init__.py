"""Soroban's reproduction: the campaign's cells (``campaign``), its instrumented service
(``service``) run beside stress-ng tenants on this machine (``experiment``), what the runs show
(``analysis``) and the results page (``results``). Fitting and applying the model to runs is
the product's (``quell.experiment.attribution``, ``quell.report.attribution_runs``).
"""
