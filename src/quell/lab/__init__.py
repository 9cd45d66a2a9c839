"""The lab: one Linux machine standing in for a cloud. Hosts are network namespaces behind
bandwidth-shaped links, instances are real web servers in their own namespaces and cgroups,
HAProxy balances them, an open-loop generator drives load, and antagonists interfere."""
