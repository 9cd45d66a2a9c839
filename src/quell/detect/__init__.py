"""IC2's interference detector (Maji et al., Section 4), as plain objects over numbers:

* ``features``: what one interval of one instance says (RT, throughput, CPU, LPO, WorkDone,
  PSI, run-queue wait, CFS throttling, link utilisation; hardware counters when there are any);
* ``mad``: the paper's outlier rule (Eq. 1) over a rolling window;
* ``labels``: the classes NI, T, I and the labels an antagonist timeline gives intervals;
* ``tree``: the cost-sensitive decision tree (the cost matrix a : b : c);
* ``dataset``: labelled intervals and the three-phase bootstrap over an injected runner;
* ``evaluate``: recall, precision, miss rate, detection and clearing latency;
* ``bundle``: the versioned JSON detector bundle.

Nothing here imports scikit-learn but ``CostSensitiveTree.fit``: a loaded detector predicts
with plain Python.
"""
