"""Soroban's attribution campaigns: reading the per-request records of runs, building the
training set (labels from an uncontended and contended runs of one schedule), fitting the sparse
GP with the baselines scored on held-out requests, and predicting each request's provider part.
"""
